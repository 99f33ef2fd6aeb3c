// MetricsSummary: what an operator reads first in the router's /metrics: requests by route and
// status class, errors by kind, retries, TTFT / TPOT / E2E means and percentiles (estimated from
// the histograms' cumulative buckets, as Prometheus's histogram_quantile does) and each
// registered worker's health, circuit state and load. Built from parsed samples
// (tools/tandemctl/prometheus.h); rendered as aligned tables or as a stable JSON document.
// Value types and pure functions; thread-compatible.
#ifndef TANDEM_TOOLS_TANDEMCTL_METRICS_SUMMARY_H_
#define TANDEM_TOOLS_TANDEMCTL_METRICS_SUMMARY_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/tandemctl/prometheus.h"

namespace tandem::ctl {

// One histogram's cumulative buckets: (upper bound `le`, observations <= le), sorted by le.
// The last bound is +Inf and its count is the histogram's total count.
using Buckets = std::vector<std::pair<double, double>>;

// The q-quantile (0 <= q <= 1) by linear interpolation inside the bucket that holds the rank
// q * count; the first bucket's lower bound is 0. A rank in the +Inf bucket gives the largest
// finite bound. nullopt when the histogram is empty or has no +Inf bucket.
std::optional<double> BucketQuantile(const Buckets& buckets, double q);

struct LatencySummary {
  double count = 0;
  double sum = 0;  // seconds
  // nullopt while count is 0.
  std::optional<double> mean, p50, p90, p99;
};

struct RouteRequests {
  std::string route;
  double total = 0;
  double ok = 0;            // 2xx
  double client_error = 0;  // 4xx
  double server_error = 0;  // 5xx
};

struct WorkerMetrics {
  std::string url;
  std::optional<bool> healthy;
  std::string circuit;  // "closed", "open", "half_open", "" when not exported
  double inflight = 0;
  double running_requests = 0;
  double queued_requests = 0;
  std::optional<double> free_kv_blocks;
};

struct MetricsSummary {
  double requests_total = 0;
  std::vector<RouteRequests> routes;  // sorted by route
  double errors_total = 0;
  std::map<std::string, double> errors_by_kind;
  double retries = 0;
  double inflight = 0;
  double queue_depth = 0;
  LatencySummary ttft, tpot, e2e;
  std::vector<WorkerMetrics> workers;  // registered workers, sorted by url

  // {"requests":{"total":..,"by_route":[..]},"errors":{"total":..,"by_kind":{..}},"retries":..,
  //  "inflight":..,"queue_depth":..,"latency_seconds":{"ttft":{"count","mean","p50","p90",
  //  "p99"},"tpot":..,"e2e":..},"workers":[{"url","healthy","circuit","inflight",
  //  "running_requests","queued_requests","free_kv_blocks"}]}; unknown values are null.
  nlohmann::json ToJson() const;
  // Aligned tables for a terminal: totals, latency, requests by route, workers.
  std::string ToText() const;
};

// Summarizes the router's samples. InvalidArgument when a histogram's buckets are inconsistent
// (a bucket without a numeric `le`, counts that decrease).
absl::StatusOr<MetricsSummary> SummarizeRouterMetrics(const std::vector<Sample>& samples);

}  // namespace tandem::ctl

#endif  // TANDEM_TOOLS_TANDEMCTL_METRICS_SUMMARY_H_
