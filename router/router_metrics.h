// The router's own metrics (tandem_router_*, and sgl-router's sgl_router_* names for some of the
// same figures), registered once on the process's MetricsRegistry.
// Per-worker load, health, circuit state and policy decisions are exported by the registry and
// the policies under their own names. Thread-safe; the references stay valid for the registry's
// lifetime.
#ifndef TANDEM_ROUTER_ROUTER_METRICS_H_
#define TANDEM_ROUTER_ROUTER_METRICS_H_

#include <string>

#include "common/metrics.h"

namespace tandem::router {

class RouterMetrics {
 public:
  explicit RouterMetrics(MetricsRegistry* registry);
  RouterMetrics(const RouterMetrics&) = delete;
  RouterMetrics& operator=(const RouterMetrics&) = delete;

  // One answered request: route is the registered path, status the HTTP code.
  void CountRequest(const std::string& route, int status);
  // A generation request's time from received to last byte sent (e2e, and sgl-router's
  // request duration by route).
  void ObserveDuration(const std::string& route, double seconds);
  // kind: "bad_request", "unauthorized", "queue_full", "queue_timeout", "no_worker",
  // "upstream", "timeout", "client_gone", "internal", "body_memory" (503: the bodies held over
  // all connections are at --http-max-body-memory).
  void CountError(const std::string& kind);
  // One PD attempt's conditional-disaggregation decision: "pd", "local_short" or
  // "local_saturated" (router/disaggregation.h).
  void CountDisaggregation(const char* decision);

  Counter& retries;
  Histogram& ttft;  // seconds, request received -> first token sent to the client
  Histogram& tpot;  // seconds per output token after the first
  Gauge& inflight;  // requests admitted and not finished
  Gauge& queue_depth;
  Gauge& http_body_bytes_held;  // set from the HTTP server when /metrics is rendered
  Gauge& sgl_active_workers;    // healthy workers, set when /metrics is rendered
  // The Responses API's stored responses and their bytes, set when /metrics is rendered.
  Gauge& stored_responses;
  Gauge& stored_response_bytes;

 private:
  Histogram& e2e_;  // seconds, received -> last byte (ObserveDuration)
  MetricFamily<Counter>& requests_;
  MetricFamily<Counter>& errors_;
  MetricFamily<Counter>& disaggregation_;
  // sgl-router's names (docs/router.md "Metrics").
  MetricFamily<Counter>& sgl_requests_;
  MetricFamily<Histogram>& sgl_duration_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_METRICS_H_
