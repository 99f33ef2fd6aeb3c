// The router's KV event index predicts exactly the prefix a worker's radix cache reuses: a real
// BlockPool + RadixCache publishing to a KvEventLog, a KvEventIndex fed from it, and a stream of
// requests with shared prefixes under KV pressure (so evictions happen). And with the router's
// placements pending (KvEventIndex::AddPending) while it reads the events only every few
// requests, the prediction still equals the reuse of a worker that prefills requests in turn,
// where the events alone predict less. In process, no sockets.
#include <random>
#include <vector>

#include "common/kv_block_hash.h"
#include "common/kv_event_log.h"
#include "engine/kv_cache.h"
#include "engine/radix_cache.h"
#include "gtest/gtest.h"
#include "router/policy/kv_event_index.h"

namespace tandem::router {
namespace {

TEST(KvEventAgreementTest, PredictedCachedTokensEqualWhatTheCacheReuses) {
  constexpr int32_t kBs = 16;
  const std::string url = "http://prefill-0";
  engine::BlockPool pool(/*num_blocks=*/96, kBs);
  KvEventLog log(/*incarnation=*/42, kBs, /*capacity=*/64);  // small: forces gaps too
  engine::RadixCache cache(&pool);
  cache.SetEventLog(&log);
  KvEventIndex index;

  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prefixes;
  for (int g = 0; g < 6; ++g) {
    std::vector<int32_t> p(static_cast<size_t>(128 + 16 * g));
    for (auto& t : p) t = static_cast<int32_t>(rng() % 1000);
    prefixes.push_back(std::move(p));
  }
  int requests = 0, agreed = 0, hits = 0;
  for (int i = 0; i < 300; ++i) {
    // The router's side: catch up (snapshot on gap), then predict.
    if (!index.Synced(url) || index.ApplyEvents(url, log.EventsSince(index.NextSeq(url), 1000)) ==
                                  KvEventIndex::Apply::kNeedSnapshot) {
      ASSERT_EQ(index.ApplySnapshot(url, log.Snapshot()), KvEventIndex::Apply::kApplied);
      ASSERT_EQ(index.ApplyEvents(url, log.EventsSince(index.NextSeq(url), 1000)),
                KvEventIndex::Apply::kApplied);
    }
    std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
    const size_t suffix = 1 + rng() % 40;
    for (size_t k = 0; k < suffix; ++k) prompt.push_back(static_cast<int32_t>(rng() % 1000));
    const int64_t max_tokens = static_cast<int64_t>(prompt.size()) - 1;
    const std::optional<int64_t> predicted = index.PredictCachedTokens(url, prompt, max_tokens);
    ASSERT_TRUE(predicted.has_value());

    // The worker's side, as the scheduler does it: match, make room by evicting, prefill, cache.
    engine::RadixCache::Match m = cache.MatchAndRef(prompt, max_tokens);
    ++requests;
    agreed += *predicted == m.num_tokens ? 1 : 0;
    hits += m.num_tokens > 0 ? 1 : 0;
    engine::BlockTable table;
    table.block_ids = m.block_ids;
    table.num_tokens = m.num_tokens;
    const int64_t need = pool.BlocksFor(static_cast<int64_t>(prompt.size())) -
                         static_cast<int64_t>(table.block_ids.size());
    if (need > pool.num_free()) cache.Evict(need - pool.num_free());
    auto plan = pool.PlanAppend({{&table, static_cast<int64_t>(prompt.size()) - m.num_tokens}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(pool.Commit(*plan).ok());
    cache.Insert(prompt, table.block_ids);
    ASSERT_TRUE(pool.Release(&table).ok());
  }
  EXPECT_EQ(agreed, requests);
  EXPECT_GT(hits, requests / 2);               // the workload really reuses prefixes
  EXPECT_GT(cache.stats().evicted_blocks, 0);  // and really evicts
  EXPECT_GT(log.dropped_events(), 0u);         // and the small log really dropped events
}

TEST(KvEventAgreementTest, PendingPlacementsPredictWhileTheEventsLag) {
  constexpr int32_t kBs = 16;
  const std::string url = "http://prefill-0";
  engine::BlockPool pool(/*num_blocks=*/4096, kBs);  // room for everything: no evictions
  KvEventLog log(/*incarnation=*/42, kBs, /*capacity=*/4096);
  engine::RadixCache cache(&pool);
  cache.SetEventLog(&log);
  KvEventIndex index;        // with the router's placements
  KvEventIndex events_only;  // the events alone
  for (KvEventIndex* i : {&index, &events_only}) {
    ASSERT_EQ(i->ApplySnapshot(url, log.Snapshot()), KvEventIndex::Apply::kApplied);
  }
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prefixes;
  for (int g = 0; g < 12; ++g) {
    std::vector<int32_t> p(static_cast<size_t>(64 + 16 * (g % 5)));
    for (auto& t : p) t = static_cast<int32_t>(rng() % 1000);
    prefixes.push_back(std::move(p));
  }
  int requests = 0, agreed = 0, agreed_events_only = 0, hits = 0;
  for (int i = 0; i < 300; ++i) {
    if (i % 5 == 0) {  // the router reads the events only now and then
      for (KvEventIndex* x : {&index, &events_only}) {
        ASSERT_EQ(x->ApplyEvents(url, log.EventsSince(x->NextSeq(url), 4096)),
                  KvEventIndex::Apply::kApplied);
      }
    }
    std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
    const size_t suffix = 1 + rng() % 40;
    for (size_t k = 0; k < suffix; ++k) prompt.push_back(static_cast<int32_t>(rng() % 1000));
    const int64_t max_tokens = static_cast<int64_t>(prompt.size()) - 1;
    const std::optional<int64_t> predicted = index.PredictCachedTokens(url, prompt, max_tokens);
    const std::optional<int64_t> from_events =
        events_only.PredictCachedTokens(url, prompt, max_tokens);
    ASSERT_TRUE(predicted.has_value() && from_events.has_value());
    index.AddPending(url, kBs, KvBlockHashChain(prompt, kBs));  // the router sends it there

    // The worker prefills it before the next one is admitted, caching its full blocks.
    engine::RadixCache::Match m = cache.MatchAndRef(prompt, max_tokens);
    ++requests;
    agreed += *predicted == m.num_tokens ? 1 : 0;
    agreed_events_only += *from_events == m.num_tokens ? 1 : 0;
    hits += m.num_tokens > 0 ? 1 : 0;
    engine::BlockTable table;
    table.block_ids = m.block_ids;
    table.num_tokens = m.num_tokens;
    auto plan = pool.PlanAppend({{&table, static_cast<int64_t>(prompt.size()) - m.num_tokens}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(pool.Commit(*plan).ok());
    cache.Insert(prompt, table.block_ids);
    ASSERT_TRUE(pool.Release(&table).ok());
  }
  EXPECT_EQ(agreed, requests);
  EXPECT_LT(agreed_events_only, requests);  // the lag the overlay covers
  EXPECT_GT(hits, requests / 2);
  ASSERT_EQ(index.ApplyEvents(url, log.EventsSince(index.NextSeq(url), 4096)),
            KvEventIndex::Apply::kApplied);
  EXPECT_EQ(index.Describe()[0].pending, 0u) << "confirmed placements must not stay pending";
}

}  // namespace
}  // namespace tandem::router
