// Randomized property test: RadixCache against a simple model (a map from token prefixes to
// blocks, with naive O(n^2) evictability and LRU), interleaving match, insert, release, evict and
// clear the way a scheduler does, and checking the pool and the cache after every operation.
#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/radix_cache.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

// The cache as a naive model: the key of a node is the full token prefix ending with its block.
class Model {
 public:
  Model(const BlockPool* pool, int32_t bs) : pool_(pool), bs_(bs) {}

  std::vector<int32_t> Match(const std::vector<int32_t>& tokens, int64_t max_tokens) {
    std::vector<int32_t> blocks;
    const int64_t limit =
        std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
        bs_;
    for (int64_t i = 1; i <= limit; ++i) {
      auto it = nodes_.find(Prefix(tokens, i));
      if (it == nodes_.end()) break;
      blocks.push_back(it->second.block);
    }
    if (!blocks.empty()) {
      ++tick_;
      for (size_t i = 1; i <= blocks.size(); ++i) nodes_[Prefix(tokens, i)].last = tick_;
    }
    return blocks;
  }

  int64_t Insert(const std::vector<int32_t>& tokens, const std::vector<int32_t>& blocks) {
    ++tick_;
    const size_t k = std::min(blocks.size(), tokens.size() / bs_);
    int64_t added = 0;
    for (size_t i = 1; i <= k; ++i) {
      auto key = Prefix(tokens, i);
      if (auto it = nodes_.find(key); it != nodes_.end()) {
        it->second.last = tick_;
        continue;
      }
      const int32_t b = blocks[i - 1];
      if (b < 0 || b >= pool_->num_blocks() || pool_->ref_count(b) == 0 || Holds(b)) break;
      nodes_[key] = {b, tick_};
      ++added;
    }
    return added;
  }

  bool Holds(int32_t block) const {
    for (const auto& [key, n] : nodes_) {
      if (n.block == block) return true;
    }
    return false;
  }
  size_t size() const { return nodes_.size(); }

  int64_t EvictableCount() const {
    int64_t n = 0;
    for (const auto& [key, node] : nodes_) n += Evictable(key) ? 1 : 0;
    return n;
  }

  // The blocks Evict(n) must free, in order; removes them from the model.
  std::vector<int32_t> Evict(int64_t n) {
    std::vector<int32_t> victims;
    while (static_cast<int64_t>(victims.size()) < n) {
      auto best = nodes_.end();
      for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
        if (!Evictable(it->first) || HasChild(it->first)) continue;
        if (best == nodes_.end() || std::make_pair(it->second.last, it->second.block) <
                                        std::make_pair(best->second.last, best->second.block)) {
          best = it;
        }
      }
      if (best == nodes_.end()) break;
      victims.push_back(best->second.block);
      nodes_.erase(best);
    }
    return victims;
  }

 private:
  struct Node {
    int32_t block = -1;
    uint64_t last = 0;
  };
  std::vector<int32_t> Prefix(const std::vector<int32_t>& tokens, size_t blocks) const {
    return {tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(blocks * bs_)};
  }
  static bool IsStrictPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  bool HasChild(const std::vector<int32_t>& key) const {
    for (const auto& [other, n] : nodes_) {
      if (IsStrictPrefix(key, other)) return true;
    }
    return false;
  }
  // Referenced by the cache alone, and so is every block below it.
  bool Evictable(const std::vector<int32_t>& key) const {
    for (const auto& [other, n] : nodes_) {
      if ((other == key || IsStrictPrefix(key, other)) && pool_->ref_count(n.block) != 1) {
        return false;
      }
    }
    return true;
  }

  const BlockPool* pool_;
  size_t bs_;
  std::map<std::vector<int32_t>, Node> nodes_;
  uint64_t tick_ = 0;
};

struct Seq {
  std::vector<int32_t> tokens;
  BlockTable table;
};

class PropertyRun {
 public:
  PropertyRun(uint32_t seed, int32_t num_blocks, int32_t bs)
      : rng_(seed), pool_(num_blocks, bs), cache_(&pool_), model_(&pool_, bs), bs_(bs) {}

  void Run(int steps) {
    for (int step = 0; step < steps && !::testing::Test::HasFailure(); ++step) {
      const int op = Uniform(0, 99);
      if (op < 35) {
        StartSequence();
      } else if (op < 55) {
        if (!live_.empty()) InsertRunning(PickLive());
      } else if (op < 80) {
        if (!live_.empty()) FinishOrAbort(PickLive(), Uniform(0, 3) != 0);
      } else if (op < 95) {
        Evict(Uniform(0, 4));
      } else {
        Evict(INT64_MAX);  // Clear, or: evictable_blocks is what Evict(inf) frees
      }
      Check(step);
    }
    while (!live_.empty()) {
      FinishOrAbort(0, true);
      Check(-1);
    }
    Evict(INT64_MAX);
    EXPECT_EQ(cache_.cached_blocks(), 0);
    EXPECT_EQ(pool_.num_free(), pool_.num_blocks());
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  size_t PickLive() { return static_cast<size_t>(Uniform(0, static_cast<int>(live_.size()) - 1)); }

  // Prompts over a tiny alphabet, often reusing one of a few shared prefixes, so that hits,
  // divergence inside blocks and duplicate blocks all happen.
  std::vector<int32_t> Prompt() {
    std::vector<int32_t> t;
    if (Uniform(0, 2) != 0) {
      const int which = Uniform(0, 2);
      const int len = Uniform(1, 4 * bs_);
      for (int i = 0; i < len; ++i) t.push_back((which * 7 + i * 3) % 5);
    }
    const int tail = Uniform(0, 3 * bs_);
    for (int i = 0; i < tail; ++i) t.push_back(Uniform(0, 2));
    return t;
  }

  void StartSequence() {
    Seq s;
    s.tokens = Prompt();
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const int64_t max_tokens = Uniform(0, 4) == 0 ? Uniform(-2, static_cast<int>(len)) : len - 1;
    RadixCache::Match m = cache_.MatchAndRef(s.tokens, max_tokens);
    const std::vector<int32_t> expect = model_.Match(s.tokens, max_tokens);
    ASSERT_EQ(m.block_ids, expect);
    ASSERT_EQ(m.num_tokens, static_cast<int64_t>(expect.size()) * bs_);
    s.table.block_ids = m.block_ids;
    s.table.num_tokens = m.num_tokens;
    const int64_t rest = len - m.num_tokens + Uniform(0, bs_);  // some decode room too
    auto plan = pool_.PlanAppend({{&s.table, rest}});
    if (!plan.ok()) {
      ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
      const int64_t need = pool_.BlocksFor(s.table.num_tokens + rest) -
                           static_cast<int64_t>(s.table.block_ids.size()) - pool_.num_free();
      Evict(need);
      plan = pool_.PlanAppend({{&s.table, rest}});
    }
    if (!plan.ok()) {  // still no room: reject, returning the matched references
      ASSERT_TRUE(pool_.Release(&s.table).ok());
      return;
    }
    ASSERT_TRUE(pool_.Commit(*plan).ok());
    live_.push_back(std::move(s));
  }

  void InsertRunning(size_t i) {
    Seq& s = live_[i];
    const int64_t expect = model_.Insert(s.tokens, s.table.block_ids);
    ASSERT_EQ(cache_.Insert(s.tokens, s.table.block_ids), expect);
  }

  void FinishOrAbort(size_t i, bool insert) {
    if (insert) InsertRunning(i);
    ASSERT_TRUE(pool_.Release(&live_[i].table).ok());
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void Evict(int64_t n) {
    const int64_t evictable = cache_.evictable_blocks();
    const std::vector<int32_t> victims = model_.Evict(n);
    ASSERT_EQ(cache_.Evict(n), static_cast<int64_t>(victims.size()));
    if (n == INT64_MAX) {
      ASSERT_EQ(static_cast<int64_t>(victims.size()), evictable);
    }
    for (int32_t b : victims) ASSERT_EQ(pool_.ref_count(b), 0) << "block " << b;
  }

  void Check(int step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<int32_t> expected_refs(static_cast<size_t>(pool_.num_blocks()), 0);
    for (const Seq& s : live_) {
      for (int32_t b : s.table.block_ids) ++expected_refs[static_cast<size_t>(b)];
    }
    int32_t used = 0;
    for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
      if (model_.Holds(b)) ++expected_refs[static_cast<size_t>(b)];
      ASSERT_EQ(pool_.ref_count(b), expected_refs[static_cast<size_t>(b)]) << "block " << b;
      used += pool_.ref_count(b) > 0 ? 1 : 0;
    }
    ASSERT_EQ(pool_.num_free() + used, pool_.num_blocks());
    ASSERT_EQ(cache_.cached_blocks(), static_cast<int64_t>(model_.size()));
    ASSERT_EQ(cache_.evictable_blocks(), model_.EvictableCount());
  }

  std::mt19937 rng_;
  BlockPool pool_;
  RadixCache cache_;
  Model model_;
  int32_t bs_;
  std::vector<Seq> live_;
};

TEST(RadixCachePropertyTest, MatchesModelUnderRandomOperations) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    PropertyRun run(seed, /*num_blocks=*/48, /*bs=*/2);
    run.Run(1500);
  }
}

TEST(RadixCachePropertyTest, LargerBlocksTightPool) {
  for (uint32_t seed : {11u, 12u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    PropertyRun run(seed, /*num_blocks=*/16, /*bs=*/3);
    run.Run(1500);
  }
}

}  // namespace
}  // namespace tandem::engine
