// Small pieces every daemon's main() uses, so that all of them behave alike for operators:
// exit code 2 for a bad flag, a bad config file or bad options (model path, secret...), 1 for a
// failure to start (port in use, device missing), 0 after an orderly shutdown.
#ifndef TANDEM_COMMON_DAEMON_H_
#define TANDEM_COMMON_DAEMON_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"

namespace tandem {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitStartFailed = 1;

// Prints "<program>: <message>" to stderr and returns the exit code for `status`: kExitUsage
// when the operator's input is at fault (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
// OUT_OF_RANGE, DATA_LOSS: e.g. a corrupt model file), otherwise kExitStartFailed.
int ReportStartupFailure(const std::string& program, const absl::Status& status);

// Process-wide runtime settings a daemon makes first thing in main(). Debian's Abseil is built
// with mutex deadlock detection on, which makes every lock and unlock update a global lock graph
// (about 6% of the router's CPU under load); daemons turn it off, tests keep it. It also raises
// the open-file soft limit to the hard one, so that connections, not descriptors, run out first
// (HttpServerOptions::max_connections).
void InitDaemonRuntime();

// Starts the HTTP endpoint every daemon has: /metrics rendered from `registry` and /health from
// `health_fn` (AddStandardRoutes; it answers asynchronously). Errors (e.g. the port is in use) are
// prefixed with `port_flag`
// ("--http-port: ") so the operator knows which flag to change. `registry` must outlive the server.
// Its routes take no body, so the server reads none: a request carrying one is a 413 (this port
// has no key, and anyone who reaches it could otherwise make it buffer options.max_body_bytes
// per connection).
absl::StatusOr<std::unique_ptr<HttpServer>> StartStatusEndpoint(const HttpServerOptions& options,
                                                                const MetricsRegistry& registry,
                                                                HealthFn health_fn,
                                                                const std::string& port_flag);

}  // namespace tandem

#endif  // TANDEM_COMMON_DAEMON_H_
