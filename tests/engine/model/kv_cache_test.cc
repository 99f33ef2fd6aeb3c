#include "engine/kv_cache.h"

#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(BlockPoolTest, PlanChangesNothingAndCommitApplies) {
  BlockPool pool(8, 4);
  BlockTable a, b;
  auto plan = pool.PlanAppend({{&a, 5}, {&b, 4}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->total_new_blocks, 3);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_TRUE(a.block_ids.empty());
  ASSERT_TRUE(pool.Commit(*plan).ok());
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(a.block_ids.size(), 2u);
  EXPECT_EQ(a.num_tokens, 5);
  EXPECT_EQ(b.block_ids.size(), 1u);
  // Appending within the last block needs no new block.
  auto p2 = pool.PlanAppend({{&a, 3}});
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->total_new_blocks, 0);
  ASSERT_TRUE(pool.Commit(*p2).ok());
  EXPECT_EQ(a.num_tokens, 8);
  EXPECT_EQ(pool.num_free(), 5);
}

TEST(BlockPoolTest, RejectedBatchLeavesPoolUntouched) {
  BlockPool pool(4, 16);
  BlockTable a, b;
  ASSERT_TRUE(pool.Commit(*pool.PlanAppend({{&a, 40}})).ok());  // 3 blocks
  auto plan = pool.PlanAppend({{&a, 10}, {&b, 20}});            // needs 1 + 2 > 1 free
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(plan.status().message()).find("needs 3 new blocks, 1 free"),
            std::string::npos)
      << plan.status();
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(a.num_tokens, 40);
  EXPECT_TRUE(b.block_ids.empty());
}

TEST(BlockPoolTest, StalePlanIsRefused) {
  BlockPool pool(4, 2);
  BlockTable a, b;
  auto plan = pool.PlanAppend({{&a, 2}});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(pool.Commit(*pool.PlanAppend({{&b, 2}})).ok());
  auto s = pool.Commit(*plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(a.block_ids.empty());
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(BlockPoolTest, InvalidRequests) {
  BlockPool pool(4, 2);
  BlockTable a;
  EXPECT_FALSE(pool.PlanAppend({{nullptr, 1}}).ok());
  EXPECT_FALSE(pool.PlanAppend({{&a, -1}}).ok());
  EXPECT_FALSE(pool.PlanAppend({{&a, 1}, {&a, 1}}).ok());
  BlockTable bogus;
  bogus.num_tokens = 5;  // claims tokens without blocks
  EXPECT_FALSE(pool.PlanAppend({{&bogus, 1}}).ok());
  BlockTable foreign;
  foreign.block_ids = {7};
  EXPECT_FALSE(pool.Release(&foreign).ok());
  BlockTable free_block;
  free_block.block_ids = {0};
  EXPECT_FALSE(pool.Release(&free_block).ok());
  EXPECT_FALSE(pool.AddRef({0}).ok());
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPoolTest, RefCountsShareBlocks) {
  BlockPool pool(4, 2);
  BlockTable a;
  ASSERT_TRUE(pool.Commit(*pool.PlanAppend({{&a, 4}})).ok());
  BlockTable b;
  b.block_ids = a.block_ids;  // shared prefix
  b.num_tokens = 4;
  ASSERT_TRUE(pool.AddRef(b.block_ids).ok());
  EXPECT_EQ(pool.ref_count(a.block_ids[0]), 2);
  ASSERT_TRUE(pool.Release(&a).ok());
  EXPECT_EQ(pool.num_free(), 2);  // still referenced by b
  ASSERT_TRUE(pool.Release(&b).ok());
  EXPECT_EQ(pool.num_free(), 4);
}

// Random plans, commits, shares and releases checked against a simple model of ownership after
// every step: block accounting stays exact and no block is ever owned by two tables unless shared.
TEST(BlockPoolTest, RandomizedAccountingIsExact) {
  for (int block_size : {1, 3, 16}) {
    std::mt19937 rng(block_size);
    BlockPool pool(37, block_size);
    std::vector<BlockTable> tables(6);
    for (int step = 0; step < 4000; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 6) {
        std::vector<BlockPool::AppendRequest> reqs;
        std::vector<int64_t> before_tokens;
        std::vector<size_t> before_blocks;
        for (auto& t : tables) {
          if (rng() % 2 != 0) reqs.push_back({&t, static_cast<int64_t>(rng() % 40)});
        }
        for (auto& t : tables) {
          before_tokens.push_back(t.num_tokens);
          before_blocks.push_back(t.block_ids.size());
        }
        const int32_t free_before = pool.num_free();
        auto plan = pool.PlanAppend(reqs);
        if (!plan.ok()) {
          ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
        } else {
          ASSERT_TRUE(pool.Commit(*plan).ok());
          ASSERT_EQ(pool.num_free(), free_before - plan->total_new_blocks);
        }
        for (size_t i = 0; i < tables.size(); ++i) {
          if (!plan.ok()) {
            ASSERT_EQ(tables[i].num_tokens, before_tokens[i]);
            ASSERT_EQ(tables[i].block_ids.size(), before_blocks[i]);
          }
          ASSERT_GE(static_cast<int64_t>(tables[i].block_ids.size()),
                    pool.BlocksFor(tables[i].num_tokens));
        }
      } else if (op < 8) {
        BlockTable& t = tables[rng() % tables.size()];
        ASSERT_TRUE(pool.Release(&t).ok());
      } else {
        // Share: copy a table's full blocks into an empty one.
        BlockTable& src = tables[rng() % tables.size()];
        BlockTable& dst = tables[rng() % tables.size()];
        if (&src == &dst || !dst.block_ids.empty() || src.block_ids.empty()) continue;
        const int64_t full = src.num_tokens / block_size;
        std::vector<int32_t> shared(src.block_ids.begin(), src.block_ids.begin() + full);
        ASSERT_TRUE(pool.AddRef(shared).ok());
        dst.block_ids = shared;
        dst.num_tokens = full * block_size;
      }
      // Invariant: ref counts equal the number of tables listing each block.
      std::map<int32_t, int> owners;
      for (const auto& t : tables) {
        std::set<int32_t> uniq(t.block_ids.begin(), t.block_ids.end());
        ASSERT_EQ(uniq.size(), t.block_ids.size());
        for (int32_t b : t.block_ids) ++owners[b];
      }
      int used = 0;
      for (int32_t b = 0; b < pool.num_blocks(); ++b) {
        const int expect = owners.count(b) ? owners[b] : 0;
        ASSERT_EQ(pool.ref_count(b), expect) << "block " << b << " step " << step;
        used += expect > 0;
      }
      ASSERT_EQ(pool.num_free() + used, pool.num_blocks());
    }
    for (auto& t : tables) ASSERT_TRUE(pool.Release(&t).ok());
    EXPECT_EQ(pool.num_free(), pool.num_blocks());
  }
}

TEST(KvCacheStorageTest, LayoutMatchesTheDocumentedOffsets) {
  auto s = KvCacheStorage::Create(3, 5, 4, 2, 8);
  ASSERT_TRUE(s.ok()) << s.status();
  KvCacheStorage& kv = **s;
  EXPECT_EQ(kv.block_bytes(), 2 * 4 * 2 * 8 * 2);
  EXPECT_EQ(kv.layer_bytes(), 5 * kv.block_bytes());
  EXPECT_EQ(kv.total_bytes(), 3 * kv.layer_bytes());
  const uint8_t* base = kv.base();
  auto off = [&](const bf16* p) { return reinterpret_cast<const uint8_t*>(p) - base; };
  // layer 2, block 3, slot 1: K then V half a block later.
  EXPECT_EQ(off(kv.K(2, 3, 1)), 2 * kv.layer_bytes() + 3 * kv.block_bytes() + 1 * 2 * 8 * 2);
  EXPECT_EQ(off(kv.V(2, 3, 1)), off(kv.K(2, 3, 1)) + kv.block_bytes() / 2);
  EXPECT_EQ(kv.LayerOffset(1), kv.layer_bytes());
  // Writable everywhere, zero-initialised.
  EXPECT_EQ(kv.V(2, 4, 3)[2 * 8 - 1], 0);
  kv.V(2, 4, 3)[2 * 8 - 1] = 7;
  EXPECT_EQ(base[kv.total_bytes() - 2], 7);
  EXPECT_FALSE(KvCacheStorage::Create(0, 5, 4, 2, 8).ok());
  EXPECT_FALSE(KvCacheStorage::Create(1 << 20, 1 << 20, 1 << 10, 8, 128).ok());
}

}  // namespace
}  // namespace tandem::engine
