// BlockPool::ReleaseBlocks and the reference observer, which the radix cache relies on.
#include <utility>
#include <vector>

#include "engine/kv_cache.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

BlockTable Allocate(BlockPool& pool, int64_t tokens) {
  BlockTable t;
  auto plan = pool.PlanAppend({{&t, tokens}});
  EXPECT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(pool.Commit(*plan).ok());
  return t;
}

class RecordingObserver : public BlockRefObserver {
 public:
  void OnRefCountChanged(int32_t block, int32_t ref_count) override {
    events.emplace_back(block, ref_count);
  }
  std::vector<std::pair<int32_t, int32_t>> events;
};

TEST(BlockPoolReleaseBlocksTest, DropsOneReferencePerEntry) {
  BlockPool pool(4, 2);
  BlockTable t = Allocate(pool, 4);  // blocks 0, 1
  ASSERT_TRUE(pool.AddRef({0, 0, 1}).ok());
  EXPECT_EQ(pool.ref_count(0), 3);
  ASSERT_TRUE(pool.ReleaseBlocks(std::vector<int32_t>{0, 0}).ok());
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.ReleaseBlocks(std::vector<int32_t>{1}).ok());
  EXPECT_EQ(pool.ref_count(1), 1);
  ASSERT_TRUE(pool.Release(&t).ok());
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPoolReleaseBlocksTest, BadEntryChangesNothing) {
  BlockPool pool(4, 2);
  BlockTable t = Allocate(pool, 4);  // blocks 0, 1 with one reference each
  const int32_t free_before = pool.num_free();
  // Block 0 listed twice but referenced once: the second entry fails, the first is undone.
  absl::Status s = pool.ReleaseBlocks(std::vector<int32_t>{1, 0, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block 0 is free"), std::string::npos) << s;
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_free(), free_before);
  s = pool.ReleaseBlocks(std::vector<int32_t>{0, 9});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block id 9 outside the pool of 4"), std::string::npos) << s;
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ReleaseBlocks(std::vector<int32_t>{-1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.ReleaseBlocks(std::vector<int32_t>{3}).code(),  // free block
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.num_free(), free_before);
  // The free list is intact: the next allocations hand out exactly the free blocks.
  BlockTable u = Allocate(pool, 4);
  EXPECT_EQ(u.block_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(pool.ReleaseBlocks({}).ok());
}

TEST(BlockPoolReleaseBlocksTest, EmptyListKeepsPlansValid) {
  BlockPool pool(4, 2);
  BlockTable t;
  auto plan = pool.PlanAppend({{&t, 2}});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(pool.ReleaseBlocks({}).ok());
  EXPECT_TRUE(pool.Commit(*plan).ok());
}

TEST(BlockPoolObserverTest, HearsEveryChange) {
  BlockPool pool(4, 2);
  RecordingObserver obs;
  ASSERT_TRUE(pool.SetRefObserver(&obs).ok());
  BlockTable t = Allocate(pool, 3);  // blocks 0, 1
  EXPECT_EQ(obs.events, (std::vector<std::pair<int32_t, int32_t>>{{0, 1}, {1, 1}}));
  obs.events.clear();
  ASSERT_TRUE(pool.AddRef({1, 1}).ok());
  EXPECT_EQ(obs.events, (std::vector<std::pair<int32_t, int32_t>>{{1, 3}, {1, 3}}));
  obs.events.clear();
  ASSERT_TRUE(pool.ReleaseBlocks(std::vector<int32_t>{1}).ok());
  EXPECT_EQ(obs.events, (std::vector<std::pair<int32_t, int32_t>>{{1, 2}}));
  obs.events.clear();
  ASSERT_TRUE(pool.Release(&t).ok());
  EXPECT_EQ(obs.events, (std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {1, 1}}));
  obs.events.clear();
  // Failed calls change nothing and report nothing.
  EXPECT_FALSE(pool.AddRef({3}).ok());
  EXPECT_FALSE(pool.ReleaseBlocks(std::vector<int32_t>{0}).ok());
  EXPECT_TRUE(obs.events.empty());
  // Detached: silent.
  ASSERT_TRUE(pool.SetRefObserver(nullptr).ok());
  ASSERT_TRUE(pool.ReleaseBlocks(std::vector<int32_t>{1}).ok());
  EXPECT_TRUE(obs.events.empty());
}

TEST(BlockPoolObserverTest, OnlyOneObserver) {
  BlockPool pool(2, 2);
  RecordingObserver a, b;
  ASSERT_TRUE(pool.SetRefObserver(&a).ok());
  EXPECT_TRUE(pool.SetRefObserver(&a).ok());  // idempotent
  EXPECT_EQ(pool.SetRefObserver(&b).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pool.SetRefObserver(nullptr).ok());
  EXPECT_TRUE(pool.SetRefObserver(&b).ok());
}

}  // namespace
}  // namespace tandem::engine
