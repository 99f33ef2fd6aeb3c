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
      requests_(
          r->AddCounter("tandem_router_requests_total", "Requests answered", {"route", "status"})),
      errors_(r->AddCounter("tandem_router_errors_total", "Failed requests by kind", {"kind"})) {}

void RouterMetrics::CountRequest(const std::string& route, int status) {
  requests_.WithLabels({route, std::to_string(status)}).Increment();
}

void RouterMetrics::CountError(const std::string& kind) { errors_.WithLabels({kind}).Increment(); }

}  // namespace tandem::router
