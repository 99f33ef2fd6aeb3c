#include "router/router_metrics.h"

#include <iterator>
#include <string>

namespace tandem::router {
namespace {

// sgl-router's bounds for its *_duration_seconds histograms.
constexpr double kSglDurationBounds[] = {0.001, 0.005, 0.01, 0.025, 0.05,  0.1,  0.25,
                                         0.5,   1.0,   2.5,  5.0,   10.0,  15.0, 30.0,
                                         45.0,  60.0,  90.0, 120.0, 180.0, 240.0};

// A route whose requests run legs on the workers (the routes of RouteOf).
bool IsGenerationRoute(const std::string& route) {
  for (ApiKind kind : {ApiKind::kGenerate, ApiKind::kCompletions, ApiKind::kChatCompletions,
                       ApiKind::kResponses}) {
    if (route == RouteOf(kind)) return true;
  }
  return false;
}

}  // namespace

RouterMetrics::RouterMetrics(MetricsRegistry* r, bool pd)
    : ttft(r->AddHistogram("tandem_router_ttft_seconds",
                           "Request received to first token sent to the client", {})
               .Get()),
      tpot(r->AddHistogram("tandem_router_tpot_seconds", "Time per output token after the first",
                           {}, ExponentialBuckets(0.0005, 2, 16))
               .Get()),
      inflight(
          r->AddGauge("tandem_router_inflight", "Requests admitted and not finished", {}).Get()),
      queue_depth(r->AddGauge("tandem_router_queue_depth",
                              "Requests waiting for a --max-concurrent-requests slot", {})
                      .Get()),
      http_body_bytes_held(
          r->AddGauge("tandem_router_http_body_bytes_held",
                      "Request body bytes held over all connections (--http-max-body-memory)", {})
              .Get()),
      sgl_active_workers(
          r->AddGauge("sgl_router_active_workers", "Number of currently active workers", {}).Get()),
      stored_responses(r->AddGauge("tandem_router_stored_responses",
                                   "Responses API responses kept for retrieval and continuation",
                                   {})
                           .Get()),
      stored_response_bytes(
          r->AddGauge("tandem_router_stored_response_bytes",
                      "Bytes the stored responses are counted as (--response-store-mb)", {})
              .Get()),
      connections_at_limit(r->AddCounter(
          "tandem_router_http_connections_at_limit_total",
          "Connections closed at --http-max-connections: evicted (waiting longest for a request) "
          "or refused (every one had a request in progress)",
          {"action"})),
      pd_(pd),
      retries_(r->AddCounter("tandem_router_retries_total",
                             "Attempts retried with a new pair before the first token", {})
                   .Get()),
      e2e_(r->AddHistogram("tandem_router_e2e_seconds", "Request received to last byte sent", {})
               .Get()),
      requests_(
          r->AddCounter("tandem_router_requests_total", "Requests answered", {"route", "status"})),
      errors_(r->AddCounter("tandem_router_errors_total", "Failed requests by kind", {"kind"})),
      disaggregation_(r->AddCounter(
          "tandem_router_disaggregation_decisions_total",
          "PD attempts by where the prompt was prefilled: pd (a prefill worker), local_short or "
          "local_saturated (the decode worker itself)",
          {"decision"})),
      sgl_requests_(r->AddCounter("sgl_router_requests_total",
                                  "Total number of requests by route and method", {"route"})),
      sgl_duration_(r->AddHistogram(
          "sgl_router_request_duration_seconds", "Request duration in seconds by route", {"route"},
          {std::begin(kSglDurationBounds), std::end(kSglDurationBounds)})),
      sgl_errors_(r->AddCounter("sgl_router_request_errors_total",
                                "Total number of request errors by route and error type",
                                {"route", "error_type"})),
      sgl_retries_(r->AddCounter("sgl_router_retries_total",
                                 "Total number of request retries by route", {"route"})),
      sgl_pd_requests_(
          r->AddCounter("sgl_router_pd_requests_total", "Total PD requests by route", {"route"})),
      sgl_pd_duration_(r->AddHistogram(
          "sgl_router_pd_request_duration_seconds", "PD request duration by route", {"route"},
          {std::begin(kSglDurationBounds), std::end(kSglDurationBounds)})),
      sgl_pd_errors_(r->AddCounter("sgl_router_pd_errors_total", "Total PD errors by error type",
                                   {"error_type"})) {
  // Every decision's series shows from start-up, at 0 until it is taken.
  for (const char* decision : {"pd", "local_short", "local_saturated"}) {
    disaggregation_.WithLabels({decision});
  }
}

void RouterMetrics::CountRequest(const std::string& route, int status) {
  requests_.WithLabels({route, std::to_string(status)}).Increment();
  sgl_requests_.WithLabels({route}).Increment();
}

void RouterMetrics::ObserveDuration(const std::string& route, double seconds) {
  e2e_.Observe(seconds);
  sgl_duration_.WithLabels({route}).Observe(seconds);
  if (pd_) {
    sgl_pd_requests_.WithLabels({route}).Increment();
    sgl_pd_duration_.WithLabels({route}).Observe(seconds);
  }
}

void RouterMetrics::CountDisaggregation(const char* decision) {
  disaggregation_.WithLabels({decision}).Increment();
}

void RouterMetrics::CountError(const std::string& kind) { errors_.WithLabels({kind}).Increment(); }

void RouterMetrics::CountError(const std::string& route, const std::string& kind) {
  errors_.WithLabels({kind}).Increment();
  sgl_errors_.WithLabels({route, kind}).Increment();
  if (pd_ && IsGenerationRoute(route)) sgl_pd_errors_.WithLabels({kind}).Increment();
}

void RouterMetrics::CountRetry(ApiKind kind) {
  retries_.Increment();
  sgl_retries_.WithLabels({RouteOf(kind)}).Increment();
}

const char* RouteOf(ApiKind kind) {
  switch (kind) {
    case ApiKind::kGenerate:
      return "/generate";
    case ApiKind::kCompletions:
      return "/v1/completions";
    case ApiKind::kChatCompletions:
      return "/v1/chat/completions";
    case ApiKind::kResponses:
      return "/v1/responses";
  }
  return "/generate";
}

}  // namespace tandem::router
