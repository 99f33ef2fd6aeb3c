// DecodeServer: the tandem-decode daemon's process-level object. It owns the model description,
// the metrics registry and the HTTP endpoint (/metrics, /health).
//
// The decode leg (gRPC), KV reservation and the token stream are not part of this build yet:
// /health answers 503 and says so, so that no router or operator mistakes this daemon for a
// serving one. Thread-safe: Create/Shutdown on the main thread; HTTP handlers on I/O threads.
#ifndef TANDEM_DECODE_NODE_DECODE_SERVER_H_
#define TANDEM_DECODE_NODE_DECODE_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "decode_node/decode_options.h"
#include "engine/model_config.h"

namespace tandem::decode {

class DecodeServer {
 public:
  // Validates options, reads the model's config.json, starts the HTTP endpoint.
  static absl::StatusOr<std::unique_ptr<DecodeServer>> Create(DecodeOptions options);
  ~DecodeServer();
  DecodeServer(const DecodeServer&) = delete;
  DecodeServer& operator=(const DecodeServer&) = delete;

  int http_port() const { return http_->port(); }
  // Stops accepting, closes the endpoint. Idempotent.
  void Shutdown();

 private:
  DecodeServer(DecodeOptions options, engine::ModelConfig model);

  DecodeOptions options_;
  engine::ModelConfig model_;
  MetricsRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_NODE_DECODE_SERVER_H_
