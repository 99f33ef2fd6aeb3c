// The load-only policies: round_robin, random, power_of_two (see policy.h), and the decisions
// counter every policy shares.
//
// Thread-safety: thread-safe. Random draws take a mutex held for a few nanoseconds.
#ifndef TANDEM_ROUTER_POLICY_SIMPLE_POLICIES_H_
#define TANDEM_ROUTER_POLICY_SIMPLE_POLICIES_H_

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "router/policy/policy.h"

namespace tandem::router {

// tandem_router_policy_decisions_total{policy,worker}; null when `metrics` is null.
CounterFamily* PolicyDecisions(MetricsRegistry* metrics);

// A worker's load as power_of_two sees it: inflight + polled running + queued.
int64_t PolledLoad(const Worker& worker);

class RoundRobinPolicy : public Policy {
 public:
  explicit RoundRobinPolicy(MetricsRegistry* metrics) : decisions_(PolicyDecisions(metrics)) {}
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "round_robin"; }

 private:
  CounterFamily* decisions_;
  std::atomic<uint64_t> next_{0};
};

class RandomPolicy : public Policy {
 public:
  RandomPolicy(uint64_t seed, MetricsRegistry* metrics);
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "random"; }

 private:
  CounterFamily* decisions_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

class PowerOfTwoPolicy : public Policy {
 public:
  PowerOfTwoPolicy(uint64_t seed, MetricsRegistry* metrics);
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "power_of_two"; }

 private:
  CounterFamily* decisions_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_SIMPLE_POLICIES_H_
