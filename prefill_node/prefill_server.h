// PrefillServer: the tandem-prefill daemon's process-level object: the serving engine, the KV
// handoff (bootstrap server + transfer engine, worker/handoff/prefill_handoff.h), the gRPC Worker
// service whose Prefill legs it serves, and the HTTP endpoint (/metrics, /health).
//
// Drain (SIGTERM): new legs are refused with UNAVAILABLE, in-flight rooms get --drain-timeout to
// finish, the rest are failed (their decode workers are told), then everything stops.
// Thread-safe: Create/Drain/Shutdown on the main thread; the rest on gRPC, HTTP, engine threads.
#ifndef TANDEM_PREFILL_NODE_PREFILL_SERVER_H_
#define TANDEM_PREFILL_NODE_PREFILL_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "engine/engine.h"
#include "prefill_node/prefill_options.h"
#include "worker/grpc_server.h"
#include "worker/handoff/prefill_handoff.h"
#include "worker/worker_core.h"

namespace tandem::prefill {

class PrefillServer {
 public:
  // Validates options, loads the model, starts the transfer engine, the bootstrap server, gRPC
  // and HTTP. Errors name the flag (a port in use, a bad model directory, no cluster secret).
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Create(PrefillOptions options);
  ~PrefillServer();
  PrefillServer(const PrefillServer&) = delete;
  PrefillServer& operator=(const PrefillServer&) = delete;

  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_->port(); }
  // Graceful stop for SIGTERM, then Shutdown.
  void Drain();
  // Stops everything now; in-flight rooms fail. Idempotent.
  void Shutdown();

 private:
  explicit PrefillServer(PrefillOptions options);

  PrefillOptions options_;
  MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<worker::PrefillHandoff> handoff_;
  std::unique_ptr<worker::WorkerCore> core_;
  std::unique_ptr<worker::GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_NODE_PREFILL_SERVER_H_
