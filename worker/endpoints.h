// The two listening endpoints of every worker daemon, started together: the Worker gRPC service
// (the router's legs) and the HTTP status endpoint (/metrics, and /health that answers 200 only
// when the model really answers and the worker is not draining).
#ifndef TANDEM_WORKER_ENDPOINTS_H_
#define TANDEM_WORKER_ENDPOINTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "worker/grpc_server.h"
#include "worker/worker_core.h"

namespace tandem::worker {

struct WorkerEndpoints {
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<GrpcServer> grpc;
};

// gRPC on host:grpc_port (and the session socket on host:session_port unless it is -1) first,
// then HTTP on host:http_port (0 = ephemeral for each), so that a healthy /health means the
// requests ports are listening. Errors name the flag to change (--port, --session-port,
// --http-port). `core` and `metrics` must outlive the endpoints.
// A non-empty `cluster_secret` makes the gRPC service accept only callers proving it (see
// GrpcServer); /metrics and /health stay open (they reveal load, not data, and are what probes
// and Prometheus read).
absl::StatusOr<WorkerEndpoints> StartWorkerEndpoints(WorkerCore* core,
                                                     const MetricsRegistry& metrics,
                                                     const std::string& host, int grpc_port,
                                                     int http_port, int session_port,
                                                     const std::string& cluster_secret);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_ENDPOINTS_H_
