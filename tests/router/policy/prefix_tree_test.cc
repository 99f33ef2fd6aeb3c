// PrefixTree: matching per tenant, splits, LRU eviction to a size, tenant removal and pruning.
#include "router/policy/prefix_tree.h"

#include <gtest/gtest.h>

namespace tandem::router {
namespace {

TEST(PrefixTreeTest, MatchesTheLongestPrefixPerCandidate) {
  PrefixTree tree;
  tree.Insert(std::vector<int32_t>{1, 2, 3, 4}, "a");
  tree.Insert(std::vector<int32_t>{1, 2, 9}, "b");
  EXPECT_EQ(tree.TenantTokens("a"), 4);
  EXPECT_EQ(tree.TenantTokens("b"), 3);
  EXPECT_EQ(tree.TotalTokens(), 7);
  auto m = tree.MatchPrefix(std::vector<int32_t>{1, 2, 3, 7}, {"a", "b"});
  EXPECT_EQ(m.tenant, "a");
  EXPECT_EQ(m.matched, 3);
  m = tree.MatchPrefix(std::vector<int32_t>{1, 2, 9, 9}, {"a", "b"});
  EXPECT_EQ(m.tenant, "b");
  EXPECT_EQ(m.matched, 3);
  // Only candidates count.
  m = tree.MatchPrefix(std::vector<int32_t>{1, 2, 3, 4}, {"b"});
  EXPECT_EQ(m.tenant, "b");
  EXPECT_EQ(m.matched, 2);
  m = tree.MatchPrefix(std::vector<int32_t>{5}, {"a", "b"});
  EXPECT_EQ(m.tenant, "");
  EXPECT_EQ(m.matched, 0);
  // Ties go to the most recent.
  tree.Insert(std::vector<int32_t>{1, 2}, "a");
  m = tree.MatchPrefix(std::vector<int32_t>{1, 2}, {"a", "b"});
  EXPECT_EQ(m.tenant, "a");
}

TEST(PrefixTreeTest, EvictsLeastRecentlyUsedLeavesFirst) {
  PrefixTree tree;
  tree.Insert(std::vector<int32_t>{1, 2, 3}, "a");  // oldest
  tree.Insert(std::vector<int32_t>{10, 11, 12}, "a");
  tree.Insert(std::vector<int32_t>{20, 21, 22}, "a");  // newest
  tree.Insert(std::vector<int32_t>{1, 2, 3}, "b");
  EXPECT_EQ(tree.EvictTenantToSize("a", 6), 3);
  EXPECT_EQ(tree.TenantTokens("a"), 6);
  EXPECT_EQ(tree.MatchPrefix(std::vector<int32_t>{1, 2, 3}, {"a"}).matched, 0);
  EXPECT_EQ(tree.MatchPrefix(std::vector<int32_t>{20, 21, 22}, {"a"}).matched, 3);
  // b's copy of the evicted prefix stays.
  EXPECT_EQ(tree.MatchPrefix(std::vector<int32_t>{1, 2, 3}, {"b"}).matched, 3);
  EXPECT_EQ(tree.EvictTenantToSize("a", 0), 6);
  EXPECT_EQ(tree.TenantTokens("a"), 0);
  EXPECT_EQ(tree.TotalTokens(), 3);
  EXPECT_EQ(tree.NodeCount(), 2);  // root + b's node
}

TEST(PrefixTreeTest, EvictionWalksUpFromLeavesThatShareAParent) {
  PrefixTree tree;
  tree.Insert(std::vector<int32_t>{1, 2, 3, 4}, "a");
  tree.Insert(std::vector<int32_t>{1, 2, 5, 6}, "a");  // splits {1,2} | {3,4}, {5,6}
  EXPECT_EQ(tree.TenantTokens("a"), 6);
  EXPECT_EQ(tree.NodeCount(), 4);
  EXPECT_EQ(tree.EvictTenantToSize("a", 2), 4);
  EXPECT_EQ(tree.MatchPrefix(std::vector<int32_t>{1, 2, 5, 6}, {"a"}).matched, 2);
  EXPECT_EQ(tree.EvictTenantToSize("a", 1), 2);
  EXPECT_EQ(tree.NodeCount(), 1);
}

TEST(PrefixTreeTest, RemoveTenantPrunesItsNodes) {
  PrefixTree tree;
  for (int i = 0; i < 50; ++i) {
    tree.Insert(std::vector<int32_t>{7, 8, i, i + 1}, "a");
  }
  tree.Insert(std::vector<int32_t>{7, 8, 100}, "b");
  tree.RemoveTenant("a");
  EXPECT_EQ(tree.TenantTokens("a"), 0);
  EXPECT_EQ(tree.TotalTokens(), 3);
  EXPECT_EQ(tree.MatchPrefix(std::vector<int32_t>{7, 8, 100}, {"a", "b"}).tenant, "b");
  tree.RemoveTenant("b");
  EXPECT_EQ(tree.NodeCount(), 1);
  EXPECT_TRUE(tree.Tenants().empty());
}

TEST(PrefixTreeTest, DeepTreeIsFreedWithoutRecursion) {
  PrefixTree tree;
  std::vector<int32_t> ids;
  for (int i = 0; i < 6000; ++i) {
    ids.push_back(i);
    if (i % 2 == 0) tree.Insert(ids, "a");  // every insert extends the path: a deep chain
  }
  EXPECT_EQ(tree.TenantTokens("a"), 5999);
}

}  // namespace
}  // namespace tandem::router
