// Policy: how the router picks a worker for a request among the available ones (SGLang router's
// --policy / --prefill-policy / --decode-policy).
//
//   ASSIGN_OR_RETURN(auto policy, MakePolicy("cache_aware", options, &metrics));
//   WorkerPtr w = policy->Select(registry.Available(WorkerType::kRegular), {&ids, &text});
//   w->BeginRequest();   // the caller counts the request against the worker at once
//
// Policies:
//   round_robin   candidates in turn.
//   random        uniformly at random (seeded by PolicyOptions::seed).
//   power_of_two  two distinct random candidates (with two workers: both); the one with the lower
//                 LoadScore (simple_policies.h): the router's in-flight legs on it plus a
//                 KV-pressure term from its last load report. Ties go to a random one of the two.
//                 The default for decode workers in PD mode under --policy cache_aware
//                 (router_options.h).
//   cache_aware   SGLang's cache-aware routing over token ids (policy/cache_aware.h).
//
// Metrics: tandem_router_policy_decisions_total{policy,worker}; cache_aware also
// tandem_router_cache_aware_matched_tokens_total and
// tandem_router_cache_aware_request_tokens_total.
//
// Thread-safety: Select and OnWorkerRemoved may be called from any thread at once; Select never
// blocks on I/O. The MetricsRegistry (may be null) must outlive the policy.
#ifndef TANDEM_ROUTER_POLICY_POLICY_H_
#define TANDEM_ROUTER_POLICY_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {

class KvEventIndex;

// What a policy may look at in a request. Either pointer may be null.
struct PolicyRequest {
  const std::vector<int32_t>* input_ids = nullptr;
  const std::string* text = nullptr;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Picks one of `candidates` (non-empty, all Available()). Must not block. Returns null only
  // when `candidates` is empty.
  virtual WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) = 0;
  // Told when a worker is removed (cache_aware forgets its tree).
  virtual void OnWorkerRemoved(const std::string& url) { (void)url; }
  virtual std::string name() const = 0;
};

struct PolicyOptions {
  double cache_threshold = 0.3;
  int balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  int64_t max_tree_size = int64_t{1} << 26;  // cache_aware: tokens stored per worker
  absl::Duration eviction_interval =
      absl::Seconds(120);  // zero: evict only on Select when over size
  uint64_t seed = 0;       // random / power_of_two; 0: seeded from the clock
  // power_of_two: how many in-flight legs a worker with every KV block in use counts as, on top
  // of its real ones (scaled by the used share of its blocks). 8 lets a nearly full worker get
  // about 8 fewer of a burst than an empty one, without starving it while it has room.
  double kv_pressure_weight = 8.0;
  // cache_aware: the workers' KV events (docs/router.md "KV events"); not owned, must outlive the
  // policy, which also records its placements there as pending. Null: the prefix tree alone.
  KvEventIndex* kv_event_index = nullptr;
};

// The policy names MakePolicy accepts.
const std::vector<std::string>& PolicyNames();

// "round_robin" | "random" | "power_of_two" | "cache_aware"; InvalidArgument names unknown ones
// and lists the valid ones.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const std::string& name,
                                                   const PolicyOptions& options,
                                                   MetricsRegistry* metrics);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_POLICY_H_
