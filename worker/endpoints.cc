#include "worker/endpoints.h"

#include <utility>

#include "common/daemon.h"
#include "common/status.h"

namespace tandem::worker {

absl::StatusOr<WorkerEndpoints> StartWorkerEndpoints(WorkerCore* core,
                                                     const MetricsRegistry& metrics,
                                                     const std::string& host, int grpc_port,
                                                     int http_port, int session_port,
                                                     const std::string& cluster_secret) {
  WorkerEndpoints endpoints;
  HttpServerOptions http;
  http.host = host;
  http.port = static_cast<uint16_t>(http_port);
  auto health = [core](std::function<void(absl::Status)> done) {
    core->CheckHealth(std::move(done));
  };
  // gRPC first: once /health answers, the worker's requests port is already listening (a
  // supervisor or test that waits for /health may send work at once).
  ASSIGN_OR_RETURN(endpoints.grpc, GrpcServer::Start(host, grpc_port, core,
                                                     "--port: ", cluster_secret, session_port));
  ASSIGN_OR_RETURN(endpoints.http, StartStatusEndpoint(http, metrics, health, "--http-port: "));
  return endpoints;
}

}  // namespace tandem::worker
