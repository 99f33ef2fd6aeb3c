#include "common/daemon.h"

#include <sys/resource.h>

#include <iostream>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/status.h"

namespace tandem {

void InitDaemonRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Each client connection is a descriptor; the soft limit (often 1,024) would be met long before
  // --http-max-connections. The hard limit is what the operator allows.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

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
