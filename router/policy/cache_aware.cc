#include "router/policy/cache_aware.h"

#include <algorithm>
#include <optional>
#include <span>

#include "absl/strings/str_join.h"
#include "common/kv_block_hash.h"
#include "router/policy/kv_event_index.h"
#include "router/policy/simple_policies.h"
#include "spdlog/spdlog.h"

namespace tandem::router {

CacheAwarePolicy::CacheAwarePolicy(const PolicyOptions& options, MetricsRegistry* metrics)
    : options_(options), decisions_(metrics) {
  if (metrics != nullptr) {
    matched_tokens_ =
        &metrics
             ->AddCounter("tandem_router_cache_aware_matched_tokens_total",
                          "Prompt tokens the cache_aware tree matched on the chosen worker")
             .Get();
    request_tokens_ = &metrics
                           ->AddCounter("tandem_router_cache_aware_request_tokens_total",
                                        "Prompt tokens routed by cache_aware")
                           .Get();
    CounterFamily& source =
        metrics->AddCounter("tandem_router_cache_aware_source_total",
                            "cache_aware decisions by what they matched prompts against: the "
                            "workers' KV events or the router's prefix tree",
                            {"source"});
    from_events_ = &source.WithLabels({"events"});
    from_tree_ = &source.WithLabels({"tree"});
    tree_tokens_ = &metrics
                        ->AddGauge("tandem_router_cache_aware_tree_tokens",
                                   "Tokens stored in the cache_aware tree, all workers")
                        .Get();
    sgl_cache_hits_ = &metrics->AddCounter("sgl_router_cache_hits_total", "Total cache hits").Get();
    sgl_cache_misses_ =
        &metrics->AddCounter("sgl_router_cache_misses_total", "Total cache misses").Get();
    sgl_balancing_events_ = &metrics
                                 ->AddCounter("sgl_router_load_balancing_events_total",
                                              "Total load balancing trigger events")
                                 .Get();
    sgl_max_load_ = &metrics->AddGauge("sgl_router_max_load", "Maximum worker load").Get();
    sgl_min_load_ = &metrics->AddGauge("sgl_router_min_load", "Minimum worker load").Get();
  }
  if (options_.eviction_interval > absl::ZeroDuration())
    evictor_ = std::thread([this] { EvictionLoop(); });
}

CacheAwarePolicy::~CacheAwarePolicy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (evictor_.joinable()) evictor_.join();
}

void CacheAwarePolicy::EvictionLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    stop_cv_.WaitFor(&mu_, absl::ToChronoNanoseconds(options_.eviction_interval));
    if (stopping_) break;
    for (const std::string& tenant : tree_.Tenants()) {
      tree_.EvictTenantToSize(tenant, options_.max_tree_size);
    }
    if (tree_tokens_ != nullptr) tree_tokens_->Set(static_cast<double>(tree_.TotalTokens()));
  }
}

void CacheAwarePolicy::EvictNow() {
  absl::MutexLock lock(&mu_);
  for (const std::string& tenant : tree_.Tenants()) {
    tree_.EvictTenantToSize(tenant, options_.max_tree_size);
  }
  if (tree_tokens_ != nullptr) tree_tokens_->Set(static_cast<double>(tree_.TotalTokens()));
}

WorkerPtr CacheAwarePolicy::Select(const std::vector<WorkerPtr>& candidates,
                                   const PolicyRequest& r) {
  if (candidates.empty()) return nullptr;
  std::vector<int32_t> from_text;
  std::span<const int32_t> tokens;
  if (r.input_ids != nullptr && !r.input_ids->empty()) {
    tokens = *r.input_ids;
  } else if (r.text != nullptr) {
    from_text.assign(r.text->begin(), r.text->end());
    for (int32_t& t : from_text) t &= 0xff;
    tokens = from_text;
  }

  // Loads are read once, outside the tree's lock.
  std::vector<int64_t> loads(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) loads[i] = candidates[i]->inflight();
  auto [min_it, max_it] = std::minmax_element(loads.begin(), loads.end());
  bool imbalanced =
      *max_it - *min_it > options_.balance_abs_threshold &&
      static_cast<double>(*max_it) > static_cast<double>(*min_it) * options_.balance_rel_threshold;

  // The workers' own caches, when the index knows every candidate (outside the tree's lock: the
  // index has its own). The prompt is hashed once per block size (one SHA-256 per block); the
  // full chain is also what is recorded as pending on the chosen worker below.
  struct Predicted {
    int64_t tokens = 0;
    int32_t block_size = 0;
    const std::vector<uint64_t>* chain = nullptr;
  };
  struct Chain {
    int32_t block_size;
    std::vector<uint64_t> hashes;
  };
  std::vector<Chain> chains;  // a handful at most: one per block size among the candidates
  chains.reserve(candidates.size());
  std::vector<Predicted> predicted;
  KvEventIndex* const index = options_.kv_event_index;
  const bool with_ids = r.input_ids != nullptr && !r.input_ids->empty();
  if (index != nullptr && with_ids) {
    const int64_t max_tokens = static_cast<int64_t>(tokens.size()) - 1;  // as the worker matches
    for (const WorkerPtr& w : candidates) {
      Predicted p;
      p.block_size = index->BlockSize(w->url());
      if (p.block_size < 1) {  // not synced
        predicted.clear();
        break;
      }
      auto c = std::find_if(chains.begin(), chains.end(),
                            [&](const Chain& k) { return k.block_size == p.block_size; });
      if (c == chains.end()) {
        chains.push_back({p.block_size, KvBlockHashChain(tokens, p.block_size)});
        c = chains.end() - 1;
      }
      p.chain = &c->hashes;
      const size_t usable = static_cast<size_t>(std::max<int64_t>(max_tokens, 0) / p.block_size);
      std::optional<int64_t> m = index->MatchedBlocks(
          w->url(), p.block_size,
          std::span<const uint64_t>(c->hashes).first(std::min(usable, c->hashes.size())));
      if (!m.has_value()) {
        predicted.clear();
        break;
      }
      p.tokens = *m * p.block_size;
      predicted.push_back(p);
    }
  }
  const bool from_events = !predicted.empty();

  WorkerPtr chosen;
  bool cache_hit = false;
  int64_t matched = 0;
  const Predicted* chosen_events = nullptr;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> urls;
    urls.reserve(candidates.size());
    for (const WorkerPtr& w : candidates) urls.push_back(w->url());
    PrefixTree::Match match = tree_.MatchPrefix(tokens, urls);
    if (imbalanced) {
      chosen = candidates[static_cast<size_t>(min_it - loads.begin())];
    } else {
      auto share = [&](int64_t n) {
        return tokens.empty() ? 0.0 : static_cast<double>(n) / static_cast<double>(tokens.size());
      };
      if (from_events) {  // the best predicted match
        size_t best = 0;
        for (size_t i = 1; i < predicted.size(); ++i) {
          if (predicted[i].tokens > predicted[best].tokens) best = i;
        }
        if (share(predicted[best].tokens) > options_.cache_threshold) chosen = candidates[best];
        cache_hit = chosen != nullptr;
      }
      // Else the tree's match: without events, or with events for a prefix cached nowhere now but
      // placed before (its cache dropped it), so that a prefix evicted everywhere is recomputed
      // on the worker it went to, not on each in turn.
      if (chosen == nullptr && share(match.matched) > options_.cache_threshold) {
        for (const WorkerPtr& w : candidates) {
          if (w->url() == match.tenant) chosen = w;
        }
        cache_hit = chosen != nullptr;
      }
      if (chosen == nullptr) {  // a new prefix: the worker the tree stores the fewest tokens for
        int64_t fewest = 0;
        for (const WorkerPtr& w : candidates) {
          const int64_t stored = tree_.TenantTokens(w->url());
          if (chosen == nullptr || stored < fewest) {
            chosen = w;
            fewest = stored;
          }
        }
      }
    }
    if (from_events) {
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (candidates[i] != chosen) continue;
        matched = predicted[i].tokens;
        chosen_events = &predicted[i];
      }
    } else if (chosen->url() == match.tenant) {
      matched = match.matched;
    }
    tree_.Insert(tokens, chosen->url());
    if (tree_.TenantTokens(chosen->url()) > options_.max_tree_size) {
      tree_.EvictTenantToSize(chosen->url(), options_.max_tree_size);
    }
    if (tree_tokens_ != nullptr) tree_tokens_->Set(static_cast<double>(tree_.TotalTokens()));
  }
  // The chosen worker will hold the prompt's full blocks once it has prefilled it: pending there
  // until its events confirm them.
  if (index != nullptr && with_ids) {
    if (chosen_events != nullptr) {
      index->AddPending(chosen->url(), chosen_events->block_size, *chosen_events->chain);
    } else if (const int32_t bs = index->BlockSize(chosen->url()); bs > 0) {
      index->AddPending(chosen->url(), bs, KvBlockHashChain(tokens, bs));
    }
  }
  // One line per decision at debug level: what the worker is expected to reuse, the prompt named
  // by its first and last 8 tokens (bench/cache_aware_hit_rate.sh compares it with the
  // cached_tokens answered).
  if (spdlog::should_log(spdlog::level::debug)) {
    const size_t ends = std::min<size_t>(tokens.size(), 8);
    spdlog::debug("cache_aware: prompt_tokens={} head={} tail={} worker={} source={} predicted={}",
                  tokens.size(), absl::StrJoin(tokens.first(ends), ","),
                  absl::StrJoin(tokens.last(ends), ","), chosen->url(),
                  from_events ? "events" : "tree", matched);
  }
  decisions_.Count(name(), chosen);
  if (from_events_ != nullptr) (from_events ? from_events_ : from_tree_)->Increment();
  if (sgl_cache_hits_ != nullptr) {
    if (imbalanced) {
      sgl_balancing_events_->Increment();
      sgl_max_load_->Set(static_cast<double>(*max_it));
      sgl_min_load_->Set(static_cast<double>(*min_it));
    } else {
      (cache_hit ? sgl_cache_hits_ : sgl_cache_misses_)->Increment();
    }
  }
  if (matched_tokens_ != nullptr) {
    matched_tokens_->Increment(static_cast<double>(matched));
    request_tokens_->Increment(static_cast<double>(tokens.size()));
  }
  return chosen;
}

void CacheAwarePolicy::OnWorkerRemoved(const std::string& url) {
  absl::MutexLock lock(&mu_);
  tree_.RemoveTenant(url);
  if (tree_tokens_ != nullptr) tree_tokens_->Set(static_cast<double>(tree_.TotalTokens()));
}

int64_t CacheAwarePolicy::TreeTokens(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  return tree_.TenantTokens(url);
}

int64_t CacheAwarePolicy::TotalTreeTokens() const {
  absl::MutexLock lock(&mu_);
  return tree_.TotalTokens();
}

}  // namespace tandem::router
