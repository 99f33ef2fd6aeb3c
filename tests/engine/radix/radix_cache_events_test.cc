// RadixCache with a KV event log attached: every store and eviction is reported by chain hash,
// and the log's stored set always equals the tree.
#include <algorithm>
#include <numeric>
#include <vector>

#include "common/kv_block_hash.h"
#include "common/kv_event_log.h"
#include "engine/kv_cache.h"
#include "engine/radix_cache.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> Tokens(int n, int start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Allocates blocks for `tokens`, offers them to the cache and drops the sequence's references.
void CacheSequence(BlockPool& pool, RadixCache& cache, const std::vector<int32_t>& tokens) {
  BlockTable table;
  RadixCache::Match m = cache.MatchAndRef(tokens, static_cast<int64_t>(tokens.size()));
  table.block_ids = m.block_ids;
  table.num_tokens = m.num_tokens;
  auto plan = pool.PlanAppend({{&table, static_cast<int64_t>(tokens.size()) - m.num_tokens}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(pool.Commit(*plan).ok());
  cache.Insert(tokens, table.block_ids);
  ASSERT_TRUE(pool.Release(&table).ok());
}

std::vector<uint64_t> Sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(RadixCacheEventsTest, StoresAreReportedByChainHashInOrder) {
  BlockPool pool(16, kBs);
  KvEventLog log(1, kBs, 1024);  // outlives the cache
  RadixCache cache(&pool);
  cache.SetEventLog(&log);
  const std::vector<int32_t> a = Tokens(10, 0);  // 2 full blocks
  CacheSequence(pool, cache, a);
  std::vector<int32_t> b = a;
  b.resize(12);
  b[8] = 500;  // shares a's first two blocks, adds a third
  CacheSequence(pool, cache, b);
  const KvEventBatch batch = log.EventsSince(0, 100);
  const std::vector<uint64_t> chain = KvBlockHashChain(b, kBs);
  ASSERT_EQ(batch.events.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(batch.events[i].seq, i + 1);
    EXPECT_EQ(batch.events[i].kind, KvBlockEvent::Kind::kStored);
    EXPECT_EQ(batch.events[i].block_hash, chain[i]);  // parents before children
  }
}

TEST(RadixCacheEventsTest, EvictionAndClearAreReflected) {
  BlockPool pool(16, kBs);
  KvEventLog log(1, kBs, 1024);
  {
    RadixCache cache(&pool);
    cache.SetEventLog(&log);
    CacheSequence(pool, cache, Tokens(12, 0));
    CacheSequence(pool, cache, Tokens(8, 100));
    EXPECT_EQ(log.stored_blocks(), 5u);
    ASSERT_EQ(cache.Evict(2), 2);
    EXPECT_EQ(log.stored_blocks(), 3u);
    const KvEventBatch batch = log.EventsSince(5, 100);
    ASSERT_EQ(batch.events.size(), 2u);
    EXPECT_EQ(batch.events[0].kind, KvBlockEvent::Kind::kRemoved);
    // What the log holds is exactly what the cache still matches.
    std::vector<uint64_t> live;
    for (const auto& seq : {Tokens(12, 0), Tokens(8, 100)}) {
      RadixCache::Match m = cache.MatchAndRef(seq, 100);
      const auto chain = KvBlockHashChain(seq, kBs, static_cast<int64_t>(m.block_ids.size()));
      live.insert(live.end(), chain.begin(), chain.end());
      BlockTable t;
      t.block_ids = m.block_ids;
      t.num_tokens = m.num_tokens;
      ASSERT_TRUE(pool.Release(&t).ok());
    }
    EXPECT_EQ(Sorted(live), Sorted(log.Snapshot().block_hashes));
    cache.Clear();
    EXPECT_EQ(log.stored_blocks(), 0u);
    CacheSequence(pool, cache, Tokens(8, 0));
  }
  // Destroying the cache reports its blocks gone.
  EXPECT_EQ(log.stored_blocks(), 0u);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCacheEventsDeathTest, AttachingToANonEmptyCacheAborts) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  CacheSequence(pool, cache, Tokens(8, 0));
  KvEventLog log(1, kBs, 16);
  EXPECT_DEATH(cache.SetEventLog(&log), "empty radix cache");
}

}  // namespace
}  // namespace tandem::engine
