#include "router/policy/policy.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/policy/cache_aware.h"
#include "router/policy/simple_policies.h"

namespace tandem::router {
namespace {

uint64_t SeedOrClock(uint64_t seed) {
  if (seed != 0) return seed;
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         std::random_device{}();
}

void Count(CounterFamily* decisions, const std::string& policy, const WorkerPtr& chosen) {
  if (decisions != nullptr && chosen != nullptr) {
    decisions->WithLabels({policy, chosen->url()}).Increment();
  }
}

}  // namespace

CounterFamily* PolicyDecisions(MetricsRegistry* metrics) {
  if (metrics == nullptr) return nullptr;
  return &metrics->AddCounter("tandem_router_policy_decisions_total",
                              "Workers chosen, by policy and worker", {"policy", "worker"});
}

int64_t PolledLoad(const Worker& worker) {
  proto::LoadReport load = worker.load();
  return worker.inflight() + load.running_requests() + load.queued_requests();
}

WorkerPtr RoundRobinPolicy::Select(const std::vector<WorkerPtr>& candidates,
                                   const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  WorkerPtr chosen = candidates[n % candidates.size()];
  Count(decisions_, name(), chosen);
  return chosen;
}

RandomPolicy::RandomPolicy(uint64_t seed, MetricsRegistry* metrics)
    : decisions_(PolicyDecisions(metrics)), rng_(SeedOrClock(seed)) {}

WorkerPtr RandomPolicy::Select(const std::vector<WorkerPtr>& candidates,
                               const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  size_t i;
  {
    absl::MutexLock lock(&mu_);
    i = std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_);
  }
  Count(decisions_, name(), candidates[i]);
  return candidates[i];
}

PowerOfTwoPolicy::PowerOfTwoPolicy(uint64_t seed, MetricsRegistry* metrics)
    : decisions_(PolicyDecisions(metrics)), rng_(SeedOrClock(seed)) {}

WorkerPtr PowerOfTwoPolicy::Select(const std::vector<WorkerPtr>& candidates,
                                   const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  WorkerPtr chosen = candidates[0];
  if (candidates.size() > 1) {
    size_t a, b;
    {
      absl::MutexLock lock(&mu_);
      a = std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_);
      b = std::uniform_int_distribution<size_t>(0, candidates.size() - 2)(rng_);
    }
    if (b >= a) ++b;  // two distinct candidates
    chosen =
        PolledLoad(*candidates[b]) < PolledLoad(*candidates[a]) ? candidates[b] : candidates[a];
  }
  Count(decisions_, name(), chosen);
  return chosen;
}

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"round_robin", "random", "power_of_two",
                                                 "cache_aware"};
  return names;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const std::string& name,
                                                   const PolicyOptions& options,
                                                   MetricsRegistry* metrics) {
  if (name == "round_robin") return std::make_unique<RoundRobinPolicy>(metrics);
  if (name == "random") return std::make_unique<RandomPolicy>(options.seed, metrics);
  if (name == "power_of_two") return std::make_unique<PowerOfTwoPolicy>(options.seed, metrics);
  if (name == "cache_aware") {
    if (options.cache_threshold < 0 || options.cache_threshold > 1) {
      return absl::InvalidArgumentError(absl::StrCat("cache_aware: cache_threshold ",
                                                     options.cache_threshold, " is not in [0, 1]"));
    }
    if (options.max_tree_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache_aware: max_tree_size ", options.max_tree_size, " must be >= 1"));
    }
    if (options.balance_abs_threshold < 0 || options.balance_rel_threshold < 1 ||
        options.eviction_interval_secs < 0) {
      return absl::InvalidArgumentError(
          "cache_aware: balance_abs_threshold must be >= 0, balance_rel_threshold >= 1 and "
          "eviction_interval_secs >= 0");
    }
    return std::make_unique<CacheAwarePolicy>(options, metrics);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown policy \"", name, "\"; valid policies: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace tandem::router
