#include "router/router_listeners.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace tandem::router {
namespace {

// The Prometheus port's bounds (StartPrometheusPort): holding it full takes this many
// connections opened anew every few seconds, each displacing the one silent longest.
constexpr int kMaxPrometheusConnections = 256;
constexpr std::chrono::milliseconds kPrometheusTimeout{5000};

}  // namespace

HttpServerOptions ClientPortOptions(const RouterOptions& o, RouterMetrics* metrics) {
  HttpServerOptions http;
  http.host = o.host;
  http.port = static_cast<uint16_t>(o.port);
  http.threads = o.http_threads;
  http.max_body_bytes = static_cast<size_t>(o.max_payload_size);
  http.max_body_bytes_held = static_cast<size_t>(o.http_max_body_memory);
  http.on_body_refused = [metrics] { metrics->CountError("body_memory"); };
  http.on_connection_evicted = [metrics] {
    metrics->connections_at_limit.WithLabels({"evicted"}).Increment();
  };
  http.on_connection_refused = [metrics] {
    metrics->connections_at_limit.WithLabels({"refused"}).Increment();
  };
  http.read_timeout = absl::ToChronoMilliseconds(o.http_read_timeout);
  http.idle_timeout = absl::ToChronoMilliseconds(o.http_idle_timeout);
  http.max_connections = o.http_max_connections;
  http.tls_cert_file = o.tls_cert_file;
  http.tls_key_file = o.tls_key_file;
  http.cors_allowed_origins = o.cors_origins;
  return http;
}

absl::StatusOr<std::unique_ptr<HttpServer>> StartPrometheusPort(
    const RouterOptions& o, const HttpServerOptions& client,
    std::function<HttpResponse()> metrics) {
  HttpServerOptions prometheus;
  prometheus.host = o.prometheus_host;
  prometheus.port = static_cast<uint16_t>(o.prometheus_port);
  prometheus.threads = 1;
  prometheus.max_body_bytes = 0;
  prometheus.read_timeout = std::min(client.read_timeout, kPrometheusTimeout);
  prometheus.idle_timeout = std::min(client.idle_timeout, kPrometheusTimeout);
  prometheus.max_connections = std::min(client.max_connections, kMaxPrometheusConnections);
  prometheus.tls_cert_file = client.tls_cert_file;
  prometheus.tls_key_file = client.tls_key_file;
  auto server = std::make_unique<HttpServer>(prometheus);
  server->Handle("GET", "/metrics",
                 [metrics = std::move(metrics)](HttpRequest, HttpResponder responder) {
                   responder.Send(metrics());
                 });
  RETURN_IF_ERROR(server->Start(), "--prometheus-host/--prometheus-port: ");
  spdlog::info("tandem-router /metrics also on {}:{} (--prometheus-port)", o.prometheus_host,
               server->port());
  return server;
}

}  // namespace tandem::router
