#include "common/daemon.h"

#include <iostream>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/status.h"

namespace tandem {

void InitDaemonRuntime() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

int ReportStartupFailure(const std::string& program, const absl::Status& status) {
  std::cerr << program << ": " << status.message() << std::endl;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kDataLoss:
      return kExitUsage;
    default:
      return kExitStartFailed;
  }
}

absl::StatusOr<std::unique_ptr<HttpServer>> StartStatusEndpoint(const HttpServerOptions& options,
                                                                const MetricsRegistry& registry,
                                                                HealthFn health_fn,
                                                                const std::string& port_flag) {
  HttpServerOptions bodiless = options;
  bodiless.max_body_bytes = 0;
  auto server = std::make_unique<HttpServer>(std::move(bodiless));
  AddStandardRoutes(*server, registry, std::move(health_fn));
  RETURN_IF_ERROR(server->Start(), port_flag);
  return server;
}

}  // namespace tandem
