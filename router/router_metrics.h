// The router's own metrics (tandem_router_*, and sgl-router's sgl_router_* names for some of the
// same figures), registered once on the process's MetricsRegistry.
// Per-worker load, health, circuit state and policy decisions are exported by the registry and
// the policies under their own names. Thread-safe; the references stay valid for the registry's
// lifetime.
#ifndef TANDEM_ROUTER_ROUTER_METRICS_H_
#define TANDEM_ROUTER_ROUTER_METRICS_H_

#include <string>

#include "common/metrics.h"
#include "router/api/request.h"

namespace tandem::router {

class RouterMetrics {
 public:
  // `pd`: the router pairs prefill and decode workers (--pd-disaggregation), so generation
  // requests are also counted under sgl-router's PD names.
  explicit RouterMetrics(MetricsRegistry* registry, bool pd = false);
  RouterMetrics(const RouterMetrics&) = delete;
  RouterMetrics& operator=(const RouterMetrics&) = delete;

  // One answered request: route is the registered path, status the HTTP code.
  void CountRequest(const std::string& route, int status);
  // A generation request's time from received to last byte sent (e2e, and sgl-router's
  // request duration by route; in PD mode also its PD request count and duration by route).
  void ObserveDuration(const std::string& route, double seconds);
  // A failed request on `route` (the registered path): kind "bad_request", "unauthorized",
  // "queue_full", "queue_timeout", "no_worker", "upstream", "timeout", "client_gone" or
  // "internal"; also sgl-router's errors by route and error type (and, for a generation request
  // in PD mode, its PD errors by type).
  void CountError(const std::string& route, const std::string& kind);
  // A failure before any route is known: "body_memory" (503: the bodies held over all
  // connections are at --http-max-body-memory).
  void CountError(const std::string& kind);
  // An attempt retried with a new pair (tandem_router_retries_total, and sgl-router's retries
  // by the route of the request's kind).
  void CountRetry(ApiKind kind);
  // One PD attempt's conditional-disaggregation decision: "pd", "local_short" or
  // "local_saturated" (router/disaggregation.h).
  void CountDisaggregation(const char* decision);

  Histogram& ttft;  // seconds, request received -> first token sent to the client
  Histogram& tpot;  // seconds per output token after the first
  Gauge& inflight;  // requests admitted and not finished
  Gauge& queue_depth;
  Gauge& http_body_bytes_held;  // set from the HTTP server when /metrics is rendered
  Gauge& sgl_active_workers;    // healthy workers, set when /metrics is rendered
  // The Responses API's stored responses and their bytes, set when /metrics is rendered.
  Gauge& stored_responses;
  Gauge& stored_response_bytes;
  // Connections closed at --http-max-connections: by "evicted" (the one waiting longest for a
  // request, to let a new one in) or "refused" (the new one: every one had a request in
  // progress).
  MetricFamily<Counter>& connections_at_limit;

 private:
  const bool pd_;
  Counter& retries_;
  Histogram& e2e_;  // seconds, received -> last byte (ObserveDuration)
  MetricFamily<Counter>& requests_;
  MetricFamily<Counter>& errors_;
  MetricFamily<Counter>& disaggregation_;
  // sgl-router's names (docs/router.md "Metrics").
  MetricFamily<Counter>& sgl_requests_;
  MetricFamily<Histogram>& sgl_duration_;
  MetricFamily<Counter>& sgl_errors_;
  MetricFamily<Counter>& sgl_retries_;
  MetricFamily<Counter>& sgl_pd_requests_;
  MetricFamily<Histogram>& sgl_pd_duration_;
  MetricFamily<Counter>& sgl_pd_errors_;
};

// The route a request of `kind` is served on ("/generate", "/v1/completions", ...).
const char* RouteOf(ApiKind kind);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_METRICS_H_
