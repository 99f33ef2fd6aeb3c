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

// Workers chosen: tandem_router_policy_decisions_total{policy,worker} and sgl-router's
// sgl_router_policy_decisions_total of the same labels. Counts nothing without a registry.
class PolicyDecisions {
 public:
  explicit PolicyDecisions(MetricsRegistry* metrics);
  void Count(const std::string& policy, const WorkerPtr& chosen) const;

 private:
  CounterFamily* tandem_ = nullptr;
  CounterFamily* sgl_ = nullptr;
};

// A worker's load as power_of_two scores it (lower is lighter):
//   inflight + kv_pressure_weight * (total - free) / total
// `inflight` is the router's own count of legs on the worker: exact, and raised by BeginRequest as
// each request is placed, so a burst sees every earlier choice of the same burst. The KV term
// comes from the last polled report (0 before the first one, or when it names no blocks): a
// worker whose blocks are nearly all in use counts as up to kv_pressure_weight more legs. The
// polled running / queued counts are left out: they count the router's own legs a second time,
// up to --worker-load-check-interval late.
double LoadScore(int64_t inflight, const proto::LoadReport& load, double kv_pressure_weight);

class RoundRobinPolicy : public Policy {
 public:
  explicit RoundRobinPolicy(MetricsRegistry* metrics) : decisions_(metrics) {}
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "round_robin"; }

 private:
  PolicyDecisions decisions_;
  std::atomic<uint64_t> next_{0};
};

class RandomPolicy : public Policy {
 public:
  RandomPolicy(uint64_t seed, MetricsRegistry* metrics);
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "random"; }

 private:
  PolicyDecisions decisions_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

class PowerOfTwoPolicy : public Policy {
 public:
  PowerOfTwoPolicy(uint64_t seed, double kv_pressure_weight, MetricsRegistry* metrics);
  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  std::string name() const override { return "power_of_two"; }
  // The choice itself, over snapshots (only `inflight` and `load` are read): the index of the
  // lower-scoring of two distinct random entries (both when there are two; a tie goes to a random
  // one of them). `states` must be non-empty. Select runs it on its candidates; tests feed it.
  size_t Choose(const std::vector<WorkerState>& states);

 private:
  const double kv_pressure_weight_;
  PolicyDecisions decisions_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_SIMPLE_POLICIES_H_
