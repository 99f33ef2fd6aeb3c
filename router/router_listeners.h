// The router's HTTP listeners: the client port's options (from the --http-* and TLS flags, with
// the callbacks that count refusals in RouterMetrics) and sgl-router's --prometheus-port.
#ifndef TANDEM_ROUTER_ROUTER_LISTENERS_H_
#define TANDEM_ROUTER_ROUTER_LISTENERS_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "router/router_metrics.h"
#include "router/router_options.h"

namespace tandem::router {

// The client port (--host/--port): its limits, timeouts, TLS files and CORS origins; bodies
// refused for memory and connections closed at --http-max-connections are counted in `metrics`,
// which must outlive the server.
HttpServerOptions ClientPortOptions(const RouterOptions& o, RouterMetrics* metrics);

// sgl-router's Prometheus port (--prometheus-host/--prometheus-port): GET /metrics alone,
// answered with `metrics()`, on one I/O thread, reading no body. Scrapers are few and send their
// request at once, so a connection silent, slow or idle for 5 s is closed and at most 256 are
// open (the client port's TLS files apply). Started; errors name the flags.
absl::StatusOr<std::unique_ptr<HttpServer>> StartPrometheusPort(
    const RouterOptions& o, const HttpServerOptions& client, std::function<HttpResponse()> metrics);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_LISTENERS_H_
