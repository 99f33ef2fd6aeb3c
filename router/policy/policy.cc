#include "router/policy/policy.h"

#include <algorithm>
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

}  // namespace

PolicyDecisions::PolicyDecisions(MetricsRegistry* metrics) {
  if (metrics == nullptr) return;
  tandem_ = &metrics->AddCounter("tandem_router_policy_decisions_total",
                                 "Workers chosen, by policy and worker", {"policy", "worker"});
  sgl_ = &metrics->AddCounter("sgl_router_policy_decisions_total",
                              "Total routing policy decisions by policy and worker",
                              {"policy", "worker"});
}

void PolicyDecisions::Count(const std::string& policy, const WorkerPtr& chosen) const {
  if (tandem_ == nullptr || chosen == nullptr) return;
  tandem_->WithLabels({policy, chosen->url()}).Increment();
  sgl_->WithLabels({policy, chosen->url()}).Increment();
}

double LoadScore(int64_t inflight, const proto::LoadReport& load, double kv_pressure_weight) {
  double score = static_cast<double>(inflight);
  const int64_t total = load.total_kv_blocks();
  if (total > 0) {
    const int64_t used = std::clamp<int64_t>(total - load.free_kv_blocks(), 0, total);
    score += kv_pressure_weight * static_cast<double>(used) / static_cast<double>(total);
  }
  return score;
}

WorkerPtr RoundRobinPolicy::Select(const std::vector<WorkerPtr>& candidates,
                                   const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  WorkerPtr chosen = candidates[n % candidates.size()];
  decisions_.Count(name(), chosen);
  return chosen;
}

RandomPolicy::RandomPolicy(uint64_t seed, MetricsRegistry* metrics)
    : decisions_(metrics), rng_(SeedOrClock(seed)) {}

WorkerPtr RandomPolicy::Select(const std::vector<WorkerPtr>& candidates,
                               const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  size_t i;
  {
    absl::MutexLock lock(&mu_);
    i = std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_);
  }
  decisions_.Count(name(), candidates[i]);
  return candidates[i];
}

PowerOfTwoPolicy::PowerOfTwoPolicy(uint64_t seed, double kv_pressure_weight,
                                   MetricsRegistry* metrics)
    : kv_pressure_weight_(kv_pressure_weight), decisions_(metrics), rng_(SeedOrClock(seed)) {}

size_t PowerOfTwoPolicy::Choose(const std::vector<WorkerState>& states) {
  if (states.size() < 2) return 0;
  size_t a, b;
  {
    absl::MutexLock lock(&mu_);
    a = std::uniform_int_distribution<size_t>(0, states.size() - 1)(rng_);
    b = std::uniform_int_distribution<size_t>(0, states.size() - 2)(rng_);
  }
  if (b >= a) ++b;  // two distinct entries (with two: both, in random order)
  auto score = [&](size_t i) {
    return LoadScore(states[i].inflight, states[i].load, kv_pressure_weight_);
  };
  return score(b) < score(a) ? b : a;  // a tie goes to the first draw: random
}

WorkerPtr PowerOfTwoPolicy::Select(const std::vector<WorkerPtr>& candidates,
                                   const PolicyRequest& /*r*/) {
  if (candidates.empty()) return nullptr;
  std::vector<WorkerState> states(candidates.size());
  if (candidates.size() > 1) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      states[i].inflight = candidates[i]->inflight();
      states[i].load = candidates[i]->load();
    }
  }
  WorkerPtr chosen = candidates[Choose(states)];
  decisions_.Count(name(), chosen);
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
  if (name == "power_of_two") {
    if (options.kv_pressure_weight < 0) {
      return absl::InvalidArgumentError(absl::StrCat("power_of_two: kv_pressure_weight ",
                                                     options.kv_pressure_weight, " is negative"));
    }
    return std::make_unique<PowerOfTwoPolicy>(options.seed, options.kv_pressure_weight, metrics);
  }
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
        options.eviction_interval < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "cache_aware: balance_abs_threshold must be >= 0, balance_rel_threshold >= 1 and "
          "eviction_interval >= 0");
    }
    return std::make_unique<CacheAwarePolicy>(options, metrics);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown policy \"", name, "\"; valid policies: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace tandem::router
