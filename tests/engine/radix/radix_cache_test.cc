// RadixCache: hit lengths, duplicates, reference counts, LRU eviction, Clear, stats, scale.
#include "engine/radix_cache.h"

#include <numeric>
#include <vector>

#include "engine/kv_cache.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

constexpr int32_t kBs = 4;

// A sequence the way the scheduler holds it: a block table starting with the cache's match.
struct Seq {
  std::vector<int32_t> tokens;
  BlockTable table;
};

// Matches `tokens` (up to max_tokens) and allocates blocks for the rest of them.
Seq Start(BlockPool& pool, RadixCache& cache, std::vector<int32_t> tokens,
          int64_t max_tokens = INT64_MAX) {
  Seq s;
  s.tokens = std::move(tokens);
  RadixCache::Match m = cache.MatchAndRef(s.tokens, max_tokens);
  s.table.block_ids = m.block_ids;
  s.table.num_tokens = m.num_tokens;
  auto plan = pool.PlanAppend({{&s.table, static_cast<int64_t>(s.tokens.size()) - m.num_tokens}});
  EXPECT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(pool.Commit(*plan).ok());
  return s;
}

int64_t Finish(BlockPool& pool, RadixCache& cache, Seq& s) {
  const int64_t added = cache.Insert(s.tokens, s.table.block_ids);
  EXPECT_TRUE(pool.Release(&s.table).ok());
  return added;
}

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(RadixCacheTest, PeekMatchCountsWhatAMatchWouldTakeWithoutTakingIt) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 10));
  EXPECT_EQ(Finish(pool, cache, a), 2);
  const std::vector<int32_t> query = Concat(Range(0, 8), Range(50, 4));
  EXPECT_EQ(cache.PeekMatch(query, 12), 2);
  EXPECT_EQ(cache.PeekMatch(query, 7), 1);  // rounded down to a block
  EXPECT_EQ(cache.PeekMatch(Range(1, 8), 8), 0);
  EXPECT_EQ(cache.stats().lookups, 1);     // a's own MatchAndRef only
  EXPECT_EQ(cache.evictable_blocks(), 2);  // no references taken
  RadixCache::Match m = cache.MatchAndRef(query, 12);
  EXPECT_EQ(m.num_tokens, 8);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  EXPECT_TRUE(pool.ReleaseBlocks(m.block_ids).ok());
}

TEST(RadixCacheTest, EmptyCacheMisses) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  RadixCache::Match m = cache.MatchAndRef(Range(0, 12), 12);
  EXPECT_TRUE(m.block_ids.empty());
  EXPECT_EQ(m.num_tokens, 0);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  EXPECT_EQ(cache.Evict(5), 0);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(cache.block_size(), kBs);
}

TEST(RadixCacheTest, HitLengths) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 14));  // 3 full blocks + 2 tokens in a 4th
  const std::vector<int32_t> a_blocks = a.table.block_ids;
  ASSERT_EQ(a_blocks.size(), 4u);
  EXPECT_EQ(Finish(pool, cache, a), 3);  // the partial block is not cached
  EXPECT_EQ(cache.cached_blocks(), 3);
  EXPECT_EQ(pool.num_free(), 13);

  auto hit = [&](const std::vector<int32_t>& tokens, int64_t max_tokens) {
    RadixCache::Match m = cache.MatchAndRef(tokens, max_tokens);
    EXPECT_EQ(m.num_tokens, static_cast<int64_t>(m.block_ids.size()) * kBs);
    for (size_t i = 0; i < m.block_ids.size(); ++i) EXPECT_EQ(m.block_ids[i], a_blocks[i]);
    EXPECT_TRUE(pool.ReleaseBlocks(m.block_ids).ok());
    return m.num_tokens;
  };
  EXPECT_EQ(hit(Range(0, 14), 14), 12);
  EXPECT_EQ(hit(Range(0, 20), 100), 12);  // longer than what is cached
  EXPECT_EQ(hit(Range(0, 12), 12), 12);   // exactly the cached blocks
  EXPECT_EQ(hit(Range(0, 11), 11), 8);    // partial blocks never match
  EXPECT_EQ(hit(Range(0, 12), 11), 8);    // prompt_len - 1: the last block is recomputed
  EXPECT_EQ(hit(Range(0, 14), 9), 8);     // cap rounded down to a block
  EXPECT_EQ(hit(Range(0, 14), 3), 0);
  EXPECT_EQ(hit(Range(0, 14), 0), 0);
  EXPECT_EQ(hit(Range(0, 14), -5), 0);
  EXPECT_EQ(hit({}, 10), 0);
  std::vector<int32_t> diverge = Range(0, 14);
  diverge[6] = 99;  // mid second block
  EXPECT_EQ(hit(diverge, 14), 4);
  diverge[1] = 99;  // in the first block
  EXPECT_EQ(hit(diverge, 14), 0);
  // Same block contents at another position do not match: keys are paths, not blocks.
  EXPECT_EQ(hit(Concat(Range(4, 4), Range(0, 8)), 12), 0);
  EXPECT_EQ(pool.num_free(), 13);
  for (int32_t b : a_blocks) {
    if (b != a_blocks.back()) {
      EXPECT_EQ(pool.ref_count(b), 1);
    }
  }
}

TEST(RadixCacheTest, ReferenceCountsAcrossMatchInsertRelease) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 8));
  const std::vector<int32_t> blocks = a.table.block_ids;
  EXPECT_EQ(cache.Insert(a.tokens, a.table.block_ids), 2);  // prefilled, still running
  for (int32_t b : blocks) EXPECT_EQ(pool.ref_count(b), 2);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  ASSERT_TRUE(pool.Release(&a.table).ok());
  for (int32_t b : blocks) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(cache.evictable_blocks(), 2);

  Seq b = Start(pool, cache, Range(0, 10));  // hits both, allocates one
  EXPECT_EQ(b.table.block_ids.size(), 3u);
  EXPECT_EQ(b.table.block_ids[0], blocks[0]);
  EXPECT_EQ(b.table.block_ids[1], blocks[1]);
  for (int32_t x : blocks) EXPECT_EQ(pool.ref_count(x), 2);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  Seq c = Start(pool, cache, Range(0, 6));  // hits the first only
  EXPECT_EQ(pool.ref_count(blocks[0]), 3);
  EXPECT_EQ(pool.ref_count(blocks[1]), 2);
  ASSERT_TRUE(pool.Release(&b.table).ok());
  // blocks[1] is free of sequences, but blocks[0] is still used by c: only the leaf can go.
  EXPECT_EQ(cache.evictable_blocks(), 1);
  ASSERT_TRUE(pool.Release(&c.table).ok());
  EXPECT_EQ(cache.evictable_blocks(), 2);
  EXPECT_EQ(pool.num_free(), 6);
  EXPECT_EQ(cache.Clear(), 2);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(RadixCacheTest, DuplicateBlocksStayTheCallers) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  // Two sequences with the same prompt prefilled side by side (no hit for the second).
  Seq a = Start(pool, cache, Range(0, 8));
  Seq b = Start(pool, cache, Range(0, 12));
  const std::vector<int32_t> a_blocks = a.table.block_ids;
  const std::vector<int32_t> b_blocks = b.table.block_ids;
  EXPECT_EQ(Finish(pool, cache, a), 2);
  EXPECT_EQ(cache.Insert(b.tokens, b.table.block_ids), 1);  // only the third block is new
  EXPECT_EQ(pool.ref_count(b_blocks[0]), 1);                // duplicates: the caller's alone
  EXPECT_EQ(pool.ref_count(b_blocks[1]), 1);
  EXPECT_EQ(pool.ref_count(b_blocks[2]), 2);
  EXPECT_EQ(cache.cached_blocks(), 3);
  // Inserting again adds nothing.
  EXPECT_EQ(cache.Insert(b.tokens, b.table.block_ids), 0);
  EXPECT_EQ(cache.Insert(a.tokens, b.table.block_ids), 0);
  ASSERT_TRUE(pool.Release(&b.table).ok());
  EXPECT_EQ(pool.num_free(), 16 - 3);  // b's duplicates went back to the pool
  RadixCache::Match m = cache.MatchAndRef(Range(0, 12), 12);
  EXPECT_EQ(m.block_ids, (std::vector<int32_t>{a_blocks[0], a_blocks[1], b_blocks[2]}));
  ASSERT_TRUE(pool.ReleaseBlocks(m.block_ids).ok());
  EXPECT_EQ(cache.stats().inserted_blocks, 3);
}

TEST(RadixCacheTest, InsertBounds) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 16));  // 4 blocks
  // Fewer block ids than full token blocks, and fewer full token blocks than ids.
  EXPECT_EQ(cache.Insert(a.tokens, std::span<const int32_t>(a.table.block_ids).first(1)), 1);
  EXPECT_EQ(cache.Insert(std::span<const int32_t>(a.tokens).first(11), a.table.block_ids), 1);
  EXPECT_EQ(cache.cached_blocks(), 2);
  EXPECT_EQ(cache.Insert({}, a.table.block_ids), 0);
  EXPECT_EQ(cache.Insert(a.tokens, {}), 0);
  ASSERT_TRUE(pool.Release(&a.table).ok());
  EXPECT_EQ(cache.Clear(), 2);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCacheTest, InsertStopsAtBlocksTheCallerCannotOwn) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 12));
  const std::vector<int32_t> ids = a.table.block_ids;
  // Out of range at position 1: position 0 is cached, nothing after.
  EXPECT_EQ(cache.Insert(a.tokens, std::vector<int32_t>{ids[0], 99, ids[2]}), 1);
  EXPECT_EQ(cache.cached_blocks(), 1);
  // A free block.
  const int32_t free_block = 15;
  ASSERT_EQ(pool.ref_count(free_block), 0);
  EXPECT_EQ(cache.Insert(a.tokens, std::vector<int32_t>{ids[0], free_block, ids[2]}), 0);
  EXPECT_EQ(pool.ref_count(free_block), 0);
  // A block already cached for another prefix (ids[0] under a different path).
  EXPECT_EQ(cache.Insert(a.tokens, std::vector<int32_t>{ids[0], ids[0], ids[2]}), 0);
  EXPECT_EQ(pool.ref_count(ids[0]), 2);
  EXPECT_EQ(cache.Insert(Range(50, 8), std::vector<int32_t>{ids[0], ids[1]}), 0);
  EXPECT_EQ(pool.ref_count(ids[0]), 2);
  EXPECT_EQ(pool.ref_count(ids[1]), 1);
  EXPECT_EQ(cache.cached_blocks(), 1);
  EXPECT_EQ(cache.Insert(a.tokens, ids), 2);  // the correct call still works
  EXPECT_EQ(Finish(pool, cache, a), 0);
  EXPECT_EQ(cache.Clear(), 3);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCacheTest, EvictsLeastRecentlyUsedFirst) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq x = Start(pool, cache, Range(0, 4));
  Seq y = Start(pool, cache, Range(10, 4));
  Seq z = Start(pool, cache, Range(20, 4));
  const int32_t bx = x.table.block_ids[0], by = y.table.block_ids[0], bz = z.table.block_ids[0];
  Finish(pool, cache, x);
  Finish(pool, cache, y);
  Finish(pool, cache, z);
  Seq x2 = Start(pool, cache, Range(0, 4));  // touches x
  ASSERT_TRUE(pool.Release(&x2.table).ok());
  EXPECT_EQ(cache.evictable_blocks(), 3);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(by), 0);
  EXPECT_EQ(pool.ref_count(bz), 1);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(bz), 0);
  EXPECT_EQ(pool.ref_count(bx), 1);
  EXPECT_EQ(cache.Evict(5), 1);
  EXPECT_EQ(pool.ref_count(bx), 0);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(RadixCacheTest, EvictsLeavesBeforeParents) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq pc = Start(pool, cache, Range(0, 8));  // P -> C
  const int32_t p = pc.table.block_ids[0], c = pc.table.block_ids[1];
  Finish(pool, cache, pc);
  Seq q = Start(pool, cache, Range(50, 4));  // Q, more recent than P and C
  const int32_t bq = q.table.block_ids[0];
  Finish(pool, cache, q);
  EXPECT_EQ(cache.Evict(1), 1);  // C: the oldest leaf (P is as old but not a leaf)
  EXPECT_EQ(pool.ref_count(c), 0);
  EXPECT_EQ(pool.ref_count(p), 1);
  EXPECT_EQ(cache.Evict(1), 1);  // P became a leaf and is older than Q
  EXPECT_EQ(pool.ref_count(p), 0);
  EXPECT_EQ(pool.ref_count(bq), 1);

  // Two branches under one parent: the parent outlives both.
  Seq a = Start(pool, cache, Concat(Range(0, 4), Range(30, 4)));
  Seq b = Start(pool, cache, Concat(Range(0, 4), Range(40, 4)));
  const int32_t pa = a.table.block_ids[0], la = a.table.block_ids[1];
  const int32_t lb = b.table.block_ids[1];
  Finish(pool, cache, a);
  Finish(pool, cache, b);               // b's copy of the parent block is a duplicate and goes back
  EXPECT_EQ(cache.cached_blocks(), 4);  // Q, P, A, B
  Seq q2 = Start(pool, cache, Range(50, 4));  // Q most recent now
  ASSERT_TRUE(pool.Release(&q2.table).ok());
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(la), 0);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(lb), 0);
  EXPECT_EQ(pool.ref_count(pa), 1);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(pa), 0);
  EXPECT_EQ(pool.ref_count(bq), 1);
  EXPECT_EQ(cache.stats().evicted_blocks, 5);
}

TEST(RadixCacheTest, NeverEvictsReferencedBlocks) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 12));
  const std::vector<int32_t> ids = a.table.block_ids;
  Finish(pool, cache, a);
  Seq b = Start(pool, cache, Range(0, 12), 11);  // holds the first two, recomputes the third
  ASSERT_EQ(b.table.block_ids.size(), 3u);
  EXPECT_EQ(cache.evictable_blocks(), 1);
  EXPECT_EQ(cache.Evict(100), 1);  // only the unreferenced leaf
  EXPECT_EQ(pool.ref_count(ids[2]), 0);
  EXPECT_EQ(pool.ref_count(ids[0]), 2);
  EXPECT_EQ(pool.ref_count(ids[1]), 2);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  EXPECT_EQ(cache.Evict(100), 0);
  EXPECT_EQ(cache.Clear(), 0);
  EXPECT_EQ(cache.cached_blocks(), 2);
  ASSERT_TRUE(pool.Release(&b.table).ok());
  EXPECT_EQ(cache.evictable_blocks(), 2);
  EXPECT_EQ(cache.Clear(), 2);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(RadixCacheTest, CacheOnlyParentWithReferencedChildStays) {
  BlockPool pool(8, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 4));
  const int32_t parent = a.table.block_ids[0];
  Finish(pool, cache, a);
  // b computed the same first block itself (no match asked), then a new second block.
  Seq b;
  b.tokens = Range(0, 8);
  ASSERT_TRUE(pool.Commit(*pool.PlanAppend({{&b.table, 8}})).ok());
  EXPECT_EQ(cache.Insert(b.tokens, b.table.block_ids), 1);  // child cached under `parent`
  const int32_t child = b.table.block_ids[1];
  EXPECT_EQ(pool.ref_count(parent), 1);  // the cache's alone
  EXPECT_EQ(pool.ref_count(child), 2);   // b still uses it
  EXPECT_EQ(cache.evictable_blocks(), 0);
  EXPECT_EQ(cache.Evict(10), 0);
  EXPECT_EQ(cache.Clear(), 0);
  EXPECT_EQ(pool.ref_count(parent), 1);
  ASSERT_TRUE(pool.Release(&b.table).ok());
  EXPECT_EQ(cache.evictable_blocks(), 2);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.ref_count(child), 0);
  EXPECT_EQ(pool.ref_count(parent), 1);
  EXPECT_EQ(cache.Evict(1), 1);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(RadixCacheTest, ClearFreesOnlyUnreferenced) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 8));
  Seq b = Start(pool, cache, Range(100, 12));
  Finish(pool, cache, a);
  cache.Insert(b.tokens, b.table.block_ids);  // b keeps running
  EXPECT_EQ(cache.cached_blocks(), 5);
  EXPECT_EQ(cache.Clear(), 2);
  EXPECT_EQ(cache.cached_blocks(), 3);
  EXPECT_EQ(cache.MatchAndRef(Range(0, 8), 8).num_tokens, 0);  // a's prefix is gone
  RadixCache::Match m = cache.MatchAndRef(Range(100, 12), 12);
  EXPECT_EQ(m.block_ids, b.table.block_ids);
  ASSERT_TRUE(pool.ReleaseBlocks(m.block_ids).ok());
  ASSERT_TRUE(pool.Release(&b.table).ok());
  EXPECT_EQ(cache.Clear(), 3);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCacheTest, Stats) {
  BlockPool pool(16, kBs);
  RadixCache cache(&pool);
  Seq a = Start(pool, cache, Range(0, 10));    // lookup 10, hit 0
  Finish(pool, cache, a);                      // inserts 2
  Seq b = Start(pool, cache, Range(0, 13));    // lookup 13, hit 8
  Seq c = Start(pool, cache, Range(0, 8), 7);  // lookup 8, hit 4
  const RadixCache::Stats& s = cache.stats();
  EXPECT_EQ(s.lookups, 3);
  EXPECT_EQ(s.lookup_tokens, 31);
  EXPECT_EQ(s.hit_tokens, 12);
  EXPECT_EQ(s.inserted_blocks, 2);
  EXPECT_EQ(s.evicted_blocks, 0);
  ASSERT_TRUE(pool.Release(&b.table).ok());
  ASSERT_TRUE(pool.Release(&c.table).ok());
  cache.Clear();
  EXPECT_EQ(cache.stats().evicted_blocks, 2);
}

TEST(RadixCacheTest, DestructorReturnsBlocks) {
  BlockPool pool(16, kBs);
  Seq keep;
  {
    RadixCache cache(&pool);
    Seq a = Start(pool, cache, Range(0, 8));
    Finish(pool, cache, a);
    keep = Start(pool, cache, Range(0, 12));  // references the cached blocks
    cache.Insert(keep.tokens, keep.table.block_ids);
    EXPECT_EQ(pool.num_free(), 13);
  }
  // The cache's references are gone; the sequence's stay until it releases them.
  for (int32_t b : keep.table.block_ids) EXPECT_EQ(pool.ref_count(b), 1);
  ASSERT_TRUE(pool.Release(&keep.table).ok());
  EXPECT_EQ(pool.num_free(), 16);
  RadixCache again(&pool);  // the pool's observer slot is free again
  EXPECT_EQ(again.cached_blocks(), 0);
}

TEST(RadixCacheDeathTest, SecondCacheOnOnePoolAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(4, kBs);
  RadixCache cache(&pool);
  EXPECT_DEATH({ RadixCache other(&pool); }, "already has a reference observer");
}

// Long paths and many blocks: every operation walks a path once, so this stays fast; a quadratic
// walk would make it time out rather than fail an assertion on time.
TEST(RadixCacheTest, HundredsOfThousandsOfBlocks) {
  constexpr int32_t kBlocks = 200000, kBlockSize = 16;
  BlockPool pool(kBlocks, kBlockSize);
  RadixCache cache(&pool);
  // One 64k-block sequence (a 1M-token chain), then 2000 short branches off a shared prefix.
  Seq longest;
  longest.tokens = Range(0, 65536 * kBlockSize);
  ASSERT_TRUE(pool.Commit(*pool.PlanAppend({{&longest.table, 65536 * kBlockSize}})).ok());
  EXPECT_EQ(cache.Insert(longest.tokens, longest.table.block_ids), 65536);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  ASSERT_TRUE(pool.Release(&longest.table).ok());
  EXPECT_EQ(cache.evictable_blocks(), 65536);
  RadixCache::Match m = cache.MatchAndRef(longest.tokens, INT64_MAX);
  EXPECT_EQ(m.num_tokens, 65536 * kBlockSize);
  EXPECT_EQ(cache.evictable_blocks(), 0);
  ASSERT_TRUE(pool.ReleaseBlocks(m.block_ids).ok());
  const std::vector<int32_t> shared = Range(0, 64 * kBlockSize);  // a 64-block system prompt
  for (int32_t i = 0; i < 2000; ++i) {
    Seq s = Start(pool, cache, Concat(shared, Range(10000000 + i * 1000, 32 * kBlockSize)));
    ASSERT_EQ(s.table.block_ids.size(), 96u);
    Finish(pool, cache, s);
  }
  EXPECT_EQ(cache.cached_blocks(), 65536 + 2000 * 32);
  EXPECT_EQ(cache.evictable_blocks(), cache.cached_blocks());
  EXPECT_EQ(cache.Evict(100000), 100000);
  EXPECT_EQ(cache.Clear(), 65536 + 64000 - 100000);
  EXPECT_EQ(pool.num_free(), kBlocks);
}

}  // namespace
}  // namespace tandem::engine
