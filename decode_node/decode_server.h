// DecodeServer: the tandem-decode daemon's process-level object. It owns the serving Engine, the
// Worker gRPC service (worker/) on --host:--port, the metrics registry and the HTTP endpoint
// (/metrics, /health: 200 once the model answers a one-token probe, 503 with the reason
// otherwise or while draining).
//
// With --local-prefill (colocated mode) Decode legs without a prefill worker are served end to
// end. Without it, legs name their prefill worker and get their KV through the handoff
// (worker/handoff/decode_handoff.h); legs without one are refused.
//
// Thread-safe: Create/Drain/Shutdown on the main thread; gRPC and HTTP handlers on their own
// threads; engine outputs on the engine's loop thread.
#ifndef TANDEM_DECODE_NODE_DECODE_SERVER_H_
#define TANDEM_DECODE_NODE_DECODE_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "decode_node/decode_options.h"
#include "engine/engine.h"
#include "worker/grpc_server.h"
#include "worker/handoff/decode_handoff.h"
#include "worker/worker_core.h"

namespace tandem::decode {

class DecodeServer {
 public:
  // Validates options, loads the model, starts the engine, the gRPC service and the HTTP
  // endpoint. A port in use is UNAVAILABLE naming the flag.
  static absl::StatusOr<std::unique_ptr<DecodeServer>> Create(DecodeOptions options);
  ~DecodeServer();
  DecodeServer(const DecodeServer&) = delete;
  DecodeServer& operator=(const DecodeServer&) = delete;

  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_->port(); }

  // Graceful drain (SIGTERM): new legs are refused with UNAVAILABLE, running streams get
  // --drain-timeout seconds to finish, the rest are aborted (their streams end with an abort
  // event), then everything stops as Shutdown does.
  void Drain();
  // Stops the gRPC service (open RPCs are cancelled), the engine and the HTTP endpoint.
  // Idempotent.
  void Shutdown();

 private:
  explicit DecodeServer(DecodeOptions options);

  DecodeOptions options_;
  MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<worker::DecodeHandoff> handoff_;  // without --local-prefill; uses engine_
  std::unique_ptr<worker::WorkerCore> core_;        // uses engine_; destroyed after it is shut down
  std::unique_ptr<worker::GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_NODE_DECODE_SERVER_H_
