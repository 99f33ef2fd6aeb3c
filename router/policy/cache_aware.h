// CacheAwarePolicy: SGLang router's cache-aware routing, over token ids.
//
// For each request:
//   1. If the candidates' loads (inflight) are imbalanced — max - min > balance_abs_threshold and
//      max > min * balance_rel_threshold — pick the least loaded (cache affinity yields).
//   2. Else match the prompt against the prefix tree: if the best candidate's matched share
//      (matched / prompt tokens) exceeds cache_threshold, pick it; otherwise pick the candidate
//      storing the fewest tokens (spreads new prefixes over the workers).
//   3. Record the prompt in the chosen worker's part of the tree.
// Each worker's part of the tree is kept at most max_tree_size tokens by evicting its least
// recently used leaves: on Select when a worker goes over, and every eviction_interval on a
// thread the policy owns (so the tree shrinks back after bursts, as SGLang's does).
// A request without token ids uses the bytes of its text as tokens.
// With a KV event index (PolicyOptions::kv_event_index) and token ids, step 2 first uses what the
// workers' radix caches really hold when the index is synced for every candidate: if the best
// candidate's predicted cached tokens exceed cache_threshold of the prompt, it is chosen. Below
// that, the tree's match decides as above (a prefix the caches dropped goes back to the worker it
// went to, so that it is not recomputed on each worker in turn), and a new prefix goes to the
// worker the tree stores the fewest tokens for. Otherwise (an unsynced worker, text only) the
// tree alone decides. The tree is kept up to date either way. Every placement of a prompt with
// token ids on a synced worker is recorded in the index as pending there
// (KvEventIndex::AddPending), so the requests of a burst sharing a prefix see it before the
// worker reports it. At debug level each decision is logged with its predicted cached tokens.
// Metrics: tandem_router_cache_aware_source_total{source="events"|"tree"}.
//
// Thread-safety: thread-safe (one mutex around the tree; Select does no I/O).
#ifndef TANDEM_ROUTER_POLICY_CACHE_AWARE_H_
#define TANDEM_ROUTER_POLICY_CACHE_AWARE_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/steady_cond_var.h"
#include "router/policy/policy.h"
#include "router/policy/prefix_tree.h"
#include "router/policy/simple_policies.h"

namespace tandem::router {

class CacheAwarePolicy : public Policy {
 public:
  // `metrics` may be null.
  CacheAwarePolicy(const PolicyOptions& options, MetricsRegistry* metrics);
  ~CacheAwarePolicy() override;
  CacheAwarePolicy(const CacheAwarePolicy&) = delete;
  CacheAwarePolicy& operator=(const CacheAwarePolicy&) = delete;

  WorkerPtr Select(const std::vector<WorkerPtr>& candidates, const PolicyRequest& r) override;
  void OnWorkerRemoved(const std::string& url) override;
  std::string name() const override { return "cache_aware"; }

  // Evicts every worker's part of the tree down to max_tree_size (the timer runs this).
  void EvictNow();
  // Tokens stored for `url` / for all workers (for tests and metrics).
  int64_t TreeTokens(const std::string& url) const;
  int64_t TotalTreeTokens() const;

 private:
  void EvictionLoop();

  const PolicyOptions options_;
  Counter* matched_tokens_ = nullptr;
  Counter* request_tokens_ = nullptr;
  Gauge* tree_tokens_ = nullptr;
  PolicyDecisions decisions_;
  Counter* from_events_ = nullptr;
  Counter* from_tree_ = nullptr;
  // sgl-router's: a prefix matched over cache_threshold (hit) or not (miss); the loads were
  // imbalanced, so the least loaded worker was taken (load balancing event, and its range).
  Counter* sgl_cache_hits_ = nullptr;
  Counter* sgl_cache_misses_ = nullptr;
  Counter* sgl_balancing_events_ = nullptr;
  Gauge* sgl_max_load_ = nullptr;
  Gauge* sgl_min_load_ = nullptr;

  mutable absl::Mutex mu_;
  PrefixTree tree_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  SteadyCondVar stop_cv_;
  std::thread evictor_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_CACHE_AWARE_H_
