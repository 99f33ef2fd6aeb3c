// The policies: round robin order, seeded random spread, power_of_two preferring the lighter
// (in-flight legs and KV pressure; a burst spreads), cache_aware affinity / balance (a burst with
// one prefix spreads once over the thresholds) / eviction / removal, thread-safety, and
// MakePolicy errors.
// cache_aware affinity / balance / eviction / removal, thread-safety, and MakePolicy errors.
#include "router/policy/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "common/kv_block_hash.h"
#include "common/kv_event_log.h"
#include "common/manual_clock.h"
#include "router/policy/cache_aware.h"
#include "router/policy/kv_event_index.h"
#include "router/policy/simple_policies.h"

namespace tandem::router {
namespace {

// Workers are real registry entries (never probed: the registry is not started).
class PolicyTest : public ::testing::Test {
 protected:
  std::vector<WorkerPtr> Workers(int n) {
    std::vector<WorkerPtr> out;
    for (int i = 0; i < n; ++i) {
      auto w = registry_.Add("127.0.0.1:" + std::to_string(++last_port_), WorkerType::kRegular,
                             std::nullopt);
      EXPECT_TRUE(w.ok()) << w.status();
      out.push_back(*w);
    }
    return out;
  }
  std::unique_ptr<Policy> Make(const std::string& name, PolicyOptions o = {}) {
    auto p = MakePolicy(name, o, &metrics_);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(*p);
  }

  int last_port_ = 0;
  MetricsRegistry metrics_;
  WorkerRegistry registry_{RegistryOptions(), nullptr};
};

std::vector<int32_t> Ids(int32_t start, int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = start + i;
  return ids;
}

TEST_F(PolicyTest, CacheAwareFollowsKvEventsWhileSyncedAndFallsBackToTheTree) {
  auto workers = Workers(2);
  ManualClock clock;
  KvEventIndex index(size_t{1} << 22, std::chrono::seconds(5), clock);
  KvEventLog log0(1, 16, 64), log1(2, 16, 64);
  ASSERT_EQ(index.ApplySnapshot(workers[0]->url(), log0.Snapshot()), KvEventIndex::Apply::kApplied);
  ASSERT_EQ(index.ApplySnapshot(workers[1]->url(), log1.Snapshot()), KvEventIndex::Apply::kApplied);
  PolicyOptions o;
  o.eviction_interval = absl::ZeroDuration();
  o.kv_event_index = &index;
  auto policy = Make("cache_aware", o);
  const std::vector<int32_t> prompt = Ids(1000, 100);
  // Nothing cached anywhere: the worker with the fewest cached blocks (the first of equals).
  EXPECT_EQ(policy->Select(workers, {&prompt, nullptr}), workers[0]);
  // That request never reached worker 0's cache (its pending blocks expire unconfirmed). The tree
  // still points at worker 0, but worker 1's cache is what really holds the prompt.
  clock.Advance(std::chrono::seconds(5));
  log1.Stored(KvBlockHashChain(prompt, 16));
  ASSERT_EQ(index.ApplyEvents(workers[1]->url(), log1.EventsSince(0, 100)),
            KvEventIndex::Apply::kApplied);
  EXPECT_EQ(policy->Select(workers, {&prompt, nullptr}), workers[1]);
  // Worker 1 restarted: until it is synced again, the tree decides (counted below), which has
  // the prompt on both workers by now.
  KvEventLog restarted(3, 16, 64);
  EXPECT_EQ(index.ApplyEvents(workers[1]->url(), restarted.EventsSince(0, 100)),
            KvEventIndex::Apply::kNeedSnapshot);
  EXPECT_NE(policy->Select(workers, {&prompt, nullptr}), nullptr);
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("tandem_router_cache_aware_source_total{source=\"events\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tandem_router_cache_aware_source_total{source=\"tree\"} 1"),
            std::string::npos);
}

// A request with a prefix is in flight to worker 1 (pending there, not yet reported) while worker
// 0's cache holds only the prefix's first 2 blocks: the burst that follows goes to worker 1, where
// the whole prefix will be, and is predicted so; a prompt sharing only the start of the prefix is
// predicted that far.
TEST_F(PolicyTest, CacheAwareFollowsPlacementsStillInFlight) {
  auto workers = Workers(2);
  KvEventIndex index;
  KvEventLog log0(1, 16, 64), log1(2, 16, 64);
  const std::vector<int32_t> prefix = Ids(0, 128);
  log0.Stored(KvBlockHashChain(Ids(0, 32), 16));
  ASSERT_EQ(index.ApplySnapshot(workers[0]->url(), log0.Snapshot()), KvEventIndex::Apply::kApplied);
  ASSERT_EQ(index.ApplySnapshot(workers[1]->url(), log1.Snapshot()), KvEventIndex::Apply::kApplied);
  index.AddPending(workers[1]->url(), 16, KvBlockHashChain(prefix, 16));
  PolicyOptions o;
  o.eviction_interval = absl::ZeroDuration();
  o.cache_threshold = 0.1;  // 32 of 129 tokens on worker 0 would be enough
  o.kv_event_index = &index;
  auto policy = Make("cache_aware", o);
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(1000 + k);
    EXPECT_EQ(policy->Select(workers, {&prompt, nullptr}), workers[1]) << k;
    EXPECT_EQ(index.PredictCachedTokens(workers[1]->url(), prompt, 128), 128) << k;
    EXPECT_EQ(index.PredictCachedTokens(workers[0]->url(), prompt, 128), 32) << k;
  }
  std::vector<int32_t> half = Ids(0, 40);
  half.push_back(7);
  EXPECT_EQ(index.PredictCachedTokens(workers[1]->url(), half, 40), 32);
  EXPECT_EQ(index.Describe()[1].pending, 8u);  // the prompt's 8 full blocks, once
  // A new prefix goes to the worker the router has placed less on.
  const std::vector<int32_t> fresh = Ids(9000, 40);
  EXPECT_EQ(policy->Select(workers, {&fresh, nullptr}), workers[0]);
  EXPECT_NE(metrics_.Render().find("tandem_router_cache_aware_source_total{source=\"events\"} 5"),
            std::string::npos);
}

// A prefix every cache dropped goes back to the worker the tree placed it on, although the other
// holds fewer blocks: evicted everywhere, it is recomputed on one worker, not on each in turn.
TEST_F(PolicyTest, CacheAwareSendsAnEvictedPrefixBackToItsWorker) {
  auto workers = Workers(2);
  KvEventIndex index;
  KvEventLog log0(1, 16, 64), log1(2, 16, 64);
  const std::vector<int32_t> prompt = Ids(0, 129);
  const std::vector<uint64_t> chain = KvBlockHashChain(prompt, 16);
  log1.Stored(chain);
  log1.Stored(KvBlockHashChain(Ids(5000, 64), 16));  // and something else
  ASSERT_EQ(index.ApplySnapshot(workers[0]->url(), log0.Snapshot()), KvEventIndex::Apply::kApplied);
  ASSERT_EQ(index.ApplySnapshot(workers[1]->url(), log1.Snapshot()), KvEventIndex::Apply::kApplied);
  PolicyOptions o;
  o.eviction_interval = absl::ZeroDuration();
  o.kv_event_index = &index;
  auto policy = Make("cache_aware", o);
  EXPECT_EQ(policy->Select(workers, {&prompt, nullptr}), workers[1]);  // where it is cached
  log1.Removed(chain);                                                 // then evicted
  ASSERT_EQ(index.ApplyEvents(workers[1]->url(), log1.EventsSince(0, 100)),
            KvEventIndex::Apply::kApplied);
  std::vector<int32_t> again = prompt;
  again.back() = 7;
  EXPECT_EQ(index.PredictCachedTokens(workers[1]->url(), again, 128), 0);
  EXPECT_EQ(index.StoredBlocks(workers[1]->url()), 4u);  // worker 0 holds none
  EXPECT_EQ(policy->Select(workers, {&again, nullptr}), workers[1]);
  // A new prefix still spreads to the worker placed on less.
  const std::vector<int32_t> fresh = Ids(9000, 40);
  EXPECT_EQ(policy->Select(workers, {&fresh, nullptr}), workers[0]);
}

TEST_F(PolicyTest, MakePolicyRejectsUnknownNamesListingTheValidOnes) {
  auto p = MakePolicy("least_loaded", {}, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(p.status().message());
  EXPECT_NE(msg.find("least_loaded"), std::string::npos);
  for (const std::string& name : PolicyNames()) {
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    auto ok = MakePolicy(name, {}, nullptr);
    ASSERT_TRUE(ok.ok()) << name;
    EXPECT_EQ((*ok)->name(), name);
  }
  PolicyOptions bad;
  bad.cache_threshold = 1.5;
  EXPECT_FALSE(MakePolicy("cache_aware", bad, nullptr).ok());
}

TEST_F(PolicyTest, RoundRobinTakesEachInTurn) {
  auto workers = Workers(3);
  auto p = Make("round_robin");
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(p->Select(workers, {})->url(), workers[static_cast<size_t>(i % 3)]->url());
  }
  EXPECT_NE(metrics_.Render().find("tandem_router_policy_decisions_total{policy=\"round_robin\","
                                   "worker=\"127.0.0.1:1\"} 3"),
            std::string::npos);
  EXPECT_NE(metrics_.Render().find("sgl_router_policy_decisions_total{policy=\"round_robin\","
                                   "worker=\"127.0.0.1:1\"} 3"),
            std::string::npos);
}

TEST_F(PolicyTest, RandomWithASeedIsReproducibleAndSpread) {
  auto workers = Workers(4);
  PolicyOptions o;
  o.seed = 42;
  auto a = Make("random", o);
  auto b = Make("random", o);
  std::map<std::string, int> counts;
  for (int i = 0; i < 4000; ++i) {
    WorkerPtr x = a->Select(workers, {});
    EXPECT_EQ(x, b->Select(workers, {}));
    ++counts[x->url()];
  }
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [url, n] : counts) {
    EXPECT_GT(n, 800) << url;  // 1000 expected each; far outside chance otherwise
    EXPECT_LT(n, 1200) << url;
  }
}

TEST_F(PolicyTest, PowerOfTwoPrefersTheLighter) {
  auto workers = Workers(2);
  for (int i = 0; i < 5; ++i) workers[0]->BeginRequest();
  auto p = Make("power_of_two");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(p->Select(workers, {}), workers[1]);
  for (int i = 0; i < 10; ++i) workers[1]->BeginRequest();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(p->Select(workers, {}), workers[0]);
  // With more candidates it never picks the single heaviest one (it always meets a lighter).
  auto three = Workers(3);
  for (int i = 0; i < 3; ++i) three[1]->BeginRequest();
  for (int i = 0; i < 100; ++i) EXPECT_NE(p->Select(three, {}), three[1]);
  EXPECT_EQ(p->Select({workers[0]}, {}), workers[0]);
}

proto::LoadReport KvReport(int64_t free, int64_t total) {
  proto::LoadReport load;
  load.set_free_kv_blocks(free);
  load.set_total_kv_blocks(total);
  return load;
}

TEST(LoadScoreTest, InflightPlusTheUsedShareOfKvTimesTheWeight) {
  EXPECT_DOUBLE_EQ(LoadScore(3, proto::LoadReport(), 8), 3);  // no report yet: in-flight only
  EXPECT_DOUBLE_EQ(LoadScore(3, KvReport(100, 100), 8), 3);   // all free
  EXPECT_DOUBLE_EQ(LoadScore(3, KvReport(25, 100), 8), 9);    // 3/4 used: +6
  EXPECT_DOUBLE_EQ(LoadScore(0, KvReport(0, 100), 8), 8);     // full
  EXPECT_DOUBLE_EQ(LoadScore(0, KvReport(150, 100), 8), 0);   // a bad report is clamped
  EXPECT_DOUBLE_EQ(LoadScore(2, KvReport(0, 100), 0), 2);     // weight 0: in-flight only
}

// A burst: every choice is counted at once (the dispatcher's BeginRequest), the polled reports
// stay as they were. Returns how many of `n` choices each state got.
std::vector<int> Burst(PowerOfTwoPolicy& p, std::vector<WorkerState> states, int n) {
  std::vector<int> got(states.size(), 0);
  for (int i = 0; i < n; ++i) {
    size_t c = p.Choose(states);
    ++states[c].inflight;
    ++got[c];
  }
  return got;
}

TEST(PowerOfTwoChooseTest, ABurstOf48SplitsEvenlyOverTwoEqualWorkers) {
  PowerOfTwoPolicy p(/*seed=*/7, /*kv_pressure_weight=*/8, nullptr);
  std::vector<WorkerState> states(2);
  for (WorkerState& s : states) s.load = KvReport(90, 100);
  std::vector<int> got = Burst(p, states, 48);
  EXPECT_EQ(got[0], 24);
  EXPECT_EQ(got[1], 24);
  // Unequal in-flight counts at the start: the burst first evens them out.
  states[0].inflight = 10;
  got = Burst(p, states, 48);
  EXPECT_EQ(got[0], 19);
  EXPECT_EQ(got[1], 29);
}

TEST(PowerOfTwoChooseTest, AWorkerWithLittleFreeKvGetsFewer) {
  PowerOfTwoPolicy p(/*seed=*/7, /*kv_pressure_weight=*/8, nullptr);
  std::vector<WorkerState> states(2);
  states[0].load = KvReport(10, 100);  // 90% used: counts as 7.2 more legs
  states[1].load = KvReport(100, 100);
  std::vector<int> got = Burst(p, states, 48);
  EXPECT_EQ(got[0] + got[1], 48);
  EXPECT_GE(got[0], 19);  // 48 = 2k + 7.2 +- 1
  EXPECT_LE(got[0], 21);
  // A full worker is still chosen once the other's real legs outweigh its pressure.
  states[0].load = KvReport(0, 100);
  got = Burst(p, states, 4);
  EXPECT_EQ(got[0], 0);
  got = Burst(p, states, 48);
  EXPECT_GT(got[0], 0);
}

TEST(PowerOfTwoChooseTest, ManyWorkersStayWithinAFewLegsOfEachOther) {
  PowerOfTwoPolicy p(/*seed=*/11, /*kv_pressure_weight=*/8, nullptr);
  std::vector<int> got = Burst(p, std::vector<WorkerState>(8), 800);
  auto [lo, hi] = std::minmax_element(got.begin(), got.end());
  EXPECT_LE(*hi - *lo, 10) << "power of two choices keeps the spread small";
  EXPECT_EQ(p.Choose(std::vector<WorkerState>(1)), 0u);
}

TEST_F(PolicyTest, PowerOfTwoSpreadsABurstAndPicksOnlyAmongCandidates) {
  auto workers = Workers(3);
  // Unprobed workers are not healthy, so the registry offers none of them to a policy.
  EXPECT_TRUE(registry_.Available(WorkerType::kRegular).empty());
  auto p = Make("power_of_two");
  EXPECT_EQ(p->Select({}, {}), nullptr);
  // The third worker stands for one that is unhealthy: idle, but never a candidate.
  std::vector<WorkerPtr> candidates = {workers[0], workers[1]};
  std::map<WorkerPtr, int> got;
  for (int i = 0; i < 48; ++i) {
    WorkerPtr w = p->Select(candidates, {});
    w->BeginRequest();
    ++got[w];
  }
  EXPECT_EQ(got[workers[0]], 24);
  EXPECT_EQ(got[workers[1]], 24);
  EXPECT_EQ(got.count(workers[2]), 0u);
  for (const WorkerPtr& w : candidates) {
    while (w->inflight() > 0) w->EndRequest(true);
  }
}

TEST_F(PolicyTest, CacheAwareSendsARepeatedPrefixToTheSameWorker) {
  auto workers = Workers(3);
  auto p = Make("cache_aware");
  std::vector<int32_t> a = Ids(1000, 64), b = Ids(5000, 64), c = Ids(9000, 64);
  WorkerPtr wa = p->Select(workers, {&a, nullptr});
  WorkerPtr wb = p->Select(workers, {&b, nullptr});
  WorkerPtr wc = p->Select(workers, {&c, nullptr});
  // New prefixes go to the worker with the smallest tree: all three are used.
  EXPECT_NE(wa, wb);
  EXPECT_NE(wb, wc);
  EXPECT_NE(wa, wc);
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> longer = a;
    longer.push_back(77 + i);  // same prefix, different tail
    EXPECT_EQ(p->Select(workers, {&longer, nullptr}), wa);
    EXPECT_EQ(p->Select(workers, {&b, nullptr}), wb);
  }
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("tandem_router_cache_aware_matched_tokens_total"), std::string::npos);
  // sgl-router's names: three new prefixes missed, the ten repeats hit.
  EXPECT_NE(text.find("sgl_router_cache_misses_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_cache_hits_total 10\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_policy_decisions_total{policy=\"cache_aware\",worker=\"" +
                      wa->url() + "\"} 6"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sgl_router_load_balancing_events_total 0\n"), std::string::npos);
  // Text without ids works too (its bytes are the tokens).
  std::string prompt = "the same long prompt text, twice";
  WorkerPtr t = p->Select(workers, {nullptr, &prompt});
  EXPECT_EQ(p->Select(workers, {nullptr, &prompt}), t);
}

TEST_F(PolicyTest, CacheAwareImbalanceOverridesAffinity) {
  auto workers = Workers(2);
  PolicyOptions o;
  o.balance_abs_threshold = 4;
  o.balance_rel_threshold = 1.5;
  auto p = Make("cache_aware", o);
  std::vector<int32_t> a = Ids(1, 32);
  WorkerPtr home = p->Select(workers, {&a, nullptr});
  WorkerPtr other = home == workers[0] ? workers[1] : workers[0];
  for (int i = 0; i < 4; ++i) home->BeginRequest();  // diff 4: not over the abs threshold
  EXPECT_EQ(p->Select(workers, {&a, nullptr}), home);
  home->BeginRequest();  // diff 5 > 4 and 5 > 0 * 1.5: imbalanced
  EXPECT_EQ(p->Select(workers, {&a, nullptr}), other);
  // sgl-router's names: the imbalanced choice is a load balancing event with the loads' range,
  // neither a hit nor a miss.
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("sgl_router_load_balancing_events_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_max_load 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_min_load 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_cache_misses_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sgl_router_cache_hits_total 1\n"), std::string::npos) << text;
}

// The balance check reads the router's in-flight counts, which each choice raises at once: a
// burst sharing one prefix stays on its worker only until the thresholds are crossed.
TEST_F(PolicyTest, CacheAwareBurstWithOnePrefixSpillsOverOnceImbalanced) {
  auto workers = Workers(2);
  PolicyOptions o;
  o.balance_abs_threshold = 8;
  o.balance_rel_threshold = 1.5;
  auto p = Make("cache_aware", o);
  std::vector<int32_t> a = Ids(1, 32);
  std::map<WorkerPtr, int> got;
  for (int i = 0; i < 48; ++i) {
    WorkerPtr w = p->Select(workers, {&a, nullptr});
    w->BeginRequest();
    ++got[w];
  }
  EXPECT_EQ(got.size(), 2u);
  for (const auto& [w, n] : got) {
    EXPECT_GE(n, 24 - 5) << w->url();  // within the abs threshold of an even split
    EXPECT_LE(n, 24 + 5) << w->url();
    while (w->inflight() > 0) w->EndRequest(true);
  }
}

TEST_F(PolicyTest, CacheAwareTreeIsBoundedAfterEviction) {
  auto workers = Workers(2);
  PolicyOptions o;
  o.max_tree_size = 500;
  o.eviction_interval = absl::ZeroDuration();  // evict on Select only
  auto p = MakePolicy("cache_aware", o, nullptr);
  ASSERT_TRUE(p.ok());
  auto* policy = static_cast<CacheAwarePolicy*>(p->get());
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> ids = Ids(i * 1000, 50);
    policy->Select(workers, {&ids, nullptr});
    for (const WorkerPtr& w : workers) EXPECT_LE(policy->TreeTokens(w->url()), 500);
  }
  EXPECT_GT(policy->TotalTreeTokens(), 0);
  EXPECT_LE(policy->TotalTreeTokens(), 1000);
  // The most recent prefix survived eviction: it still routes to its worker.
  std::vector<int32_t> last = Ids(199 * 1000, 50);
  WorkerPtr w = policy->Select(workers, {&last, nullptr});
  EXPECT_EQ(policy->Select(workers, {&last, nullptr}), w);
}

TEST_F(PolicyTest, CacheAwareForgetsARemovedWorker) {
  auto workers = Workers(2);
  auto p = MakePolicy("cache_aware", {}, nullptr);
  auto* policy = static_cast<CacheAwarePolicy*>(p->get());
  std::vector<int32_t> a = Ids(1, 40);
  WorkerPtr home = policy->Select(workers, {&a, nullptr});
  EXPECT_EQ(policy->TreeTokens(home->url()), 40);
  policy->OnWorkerRemoved(home->url());
  EXPECT_EQ(policy->TreeTokens(home->url()), 0);
  EXPECT_EQ(policy->TotalTreeTokens(), 0);
}

TEST_F(PolicyTest, ConcurrentSelectFromFourThreads) {
  auto workers = Workers(4);
  for (const std::string& name : PolicyNames()) {
    PolicyOptions o;
    o.max_tree_size = 2000;
    o.eviction_interval = absl::Seconds(1);
    auto p = Make(name, o);
    std::vector<std::thread> threads;
    std::atomic<int> picked{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 500; ++i) {
          std::vector<int32_t> ids = Ids((i % 37) * 100, 20 + t);
          WorkerPtr w = p->Select(workers, {&ids, nullptr});
          if (w != nullptr) picked.fetch_add(1);
          w->BeginRequest();
          w->EndRequest(true);
          if (i == 250 && t == 0) p->OnWorkerRemoved(workers[3]->url());
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(picked.load(), 2000) << name;
  }
}

}  // namespace
}  // namespace tandem::router
