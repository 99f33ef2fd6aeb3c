// PrefillServer: the tandem-prefill daemon's process-level object. It owns the model description,
// the metrics registry and the HTTP endpoint (/metrics, /health).
//
// The prefill leg (gRPC), the bootstrap server and the KV push are not part of this build yet:
// /health answers 503 and says so, so that no router or operator mistakes this daemon for a
// serving one. Thread-safe: Create/Shutdown on the main thread; HTTP handlers on I/O threads.
#ifndef TANDEM_PREFILL_NODE_PREFILL_SERVER_H_
#define TANDEM_PREFILL_NODE_PREFILL_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "engine/model_config.h"
#include "prefill_node/prefill_options.h"

namespace tandem::prefill {

class PrefillServer {
 public:
  // Validates options, reads the model's config.json, starts the HTTP endpoint.
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Create(PrefillOptions options);
  ~PrefillServer();
  PrefillServer(const PrefillServer&) = delete;
  PrefillServer& operator=(const PrefillServer&) = delete;

  int http_port() const { return http_->port(); }
  // Stops accepting, closes the endpoint. Idempotent.
  void Shutdown();

 private:
  PrefillServer(PrefillOptions options, engine::ModelConfig model);

  PrefillOptions options_;
  engine::ModelConfig model_;
  MetricsRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_NODE_PREFILL_SERVER_H_
