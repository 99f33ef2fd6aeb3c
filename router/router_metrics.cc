#include "router/router_metrics.h"

#include <string>

namespace tandem::router {

RouterMetrics::RouterMetrics(MetricsRegistry* r)
    : retries(r->AddCounter("tandem_router_retries_total",
                            "Attempts retried with a new pair before the first token", {})
                  .Get()),
      ttft(r->AddHistogram("tandem_router_ttft_seconds",
                           "Request received to first token sent to the client", {})
               .Get()),
      tpot(r->AddHistogram("tandem_router_tpot_seconds", "Time per output token after the first",
                           {}, ExponentialBuckets(0.0005, 2, 16))
               .Get()),
      e2e(r->AddHistogram("tandem_router_e2e_seconds", "Request received to last byte sent", {})
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
      requests_(
          r->AddCounter("tandem_router_requests_total", "Requests answered", {"route", "status"})),
      errors_(r->AddCounter("tandem_router_errors_total", "Failed requests by kind", {"kind"})),
      disaggregation_(r->AddCounter(
          "tandem_router_disaggregation_decisions_total",
          "PD attempts by where the prompt was prefilled: pd (a prefill worker), local_short or "
          "local_saturated (the decode worker itself)",
          {"decision"})) {
  // Every decision's series shows from start-up, at 0 until it is taken.
  for (const char* decision : {"pd", "local_short", "local_saturated"}) {
    disaggregation_.WithLabels({decision});
  }
}

void RouterMetrics::CountRequest(const std::string& route, int status) {
  requests_.WithLabels({route, std::to_string(status)}).Increment();
}

void RouterMetrics::CountDisaggregation(const char* decision) {
  disaggregation_.WithLabels({decision}).Increment();
}

void RouterMetrics::CountError(const std::string& kind) { errors_.WithLabels({kind}).Increment(); }

}  // namespace tandem::router
