// Radix prefix cache over KV blocks: shared prompt prefixes are computed once and reused.
//
// The tree is block-granular (SGLang's RadixCache with page_size = block size): each node holds
// one full block, keyed by its `block_size` token ids, and the id of the KV block that stores
// those tokens' K and V. A sequence's prefix of k full blocks is a path of k nodes from the root,
// so a block's contents depend on the whole path above it, never on its own tokens alone.
// Partial blocks are never cached.
//
// References: the cache owns one BlockPool reference on every block it holds. MatchAndRef takes
// one more reference per matched block on behalf of the caller, who lists the blocks in its
// BlockTable and later drops them with BlockPool::Release. A block is *evictable* when it and
// every block below it are referenced by the cache alone (pool ref count == 1); Evict frees the
// least-recently-used evictable leaves first (a parent becomes a leaf once its children are gone)
// and never frees a block someone else references.
//
// Cost: the cache installs itself as the pool's BlockRefObserver, so it learns when a sequence
// drops its references without scanning. Per node it keeps whether some block in its subtree is
// referenced outside the cache; a reference change walks up only while that answer changes, so
// matching, inserting or releasing a k-block path costs O(k) amortised plus O(log n) for the LRU
// set. evictable_blocks() and cached_blocks() are O(1); Evict(n) is O(n log n). Memory is dense
// per pool block (about (block_size + 6) * 4 bytes each) plus a hash table entry per cached block.
//
// KV events: with an event log attached (SetEventLog), every block the tree gains or loses is
// reported by its chain hash (common/kv_block_hash.h) in the order the tree changed, so the log's
// stored set always equals the tree's blocks. Hashing costs one SHA-256 per newly cached block and
// happens only with a log attached.
//
// Thread-safety: none (thread-compatible); the scheduler thread owns the cache and its pool.
// Ownership: `pool` is not owned and must outlive the cache; at most one cache per pool. The
// event log is not owned and must outlive the cache.
#ifndef TANDEM_ENGINE_RADIX_CACHE_H_
#define TANDEM_ENGINE_RADIX_CACHE_H_

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/kv_event_log.h"
#include "engine/kv_cache.h"

namespace tandem::engine {

class RadixCache : private BlockRefObserver {
 public:
  // `pool` not owned, must outlive the cache. Aborts if `pool` is null or already observed by
  // another cache (a programming error, not input).
  explicit RadixCache(BlockPool* pool);
  // Drops the cache's references (blocks nobody else holds return to the pool) and detaches;
  // reports every cached block removed to the event log, if any.
  ~RadixCache() override;
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  struct Match {
    std::vector<int32_t> block_ids;  // in position order
    int64_t num_tokens = 0;          // block_ids.size() * block_size
  };
  // Longest cached prefix of `tokens` in whole blocks, at most `max_tokens` tokens (rounded down
  // to a block; <= 0 matches nothing). Takes one pool reference per matched block on behalf of
  // the caller (the caller puts them in its BlockTable and later drops them with
  // BlockPool::Release). Updates LRU and the hit statistics (lookup tokens = tokens.size(), hit
  // tokens = num_tokens). A caller that needs logits of the last prompt token passes
  // max_tokens = prompt_len - 1 so that at least one token is computed.
  Match MatchAndRef(std::span<const int32_t> tokens, int64_t max_tokens);
  // The number of blocks MatchAndRef(tokens, max_tokens) would match now, without taking
  // references or touching LRU order or statistics.
  int64_t PeekMatch(std::span<const int32_t> tokens, int64_t max_tokens) const;

  // Offers the full blocks of a finished (or prefilled) sequence: tokens[0, k*bs) stored in
  // block_ids[0, k) (k = min(block_ids.size(), tokens.size() / bs)). Blocks not yet cached are
  // added and AddRef'ed (the caller keeps its own reference). A block whose tokens are already
  // cached under another block id is not added (the caller's duplicate stays the caller's), and
  // insertion continues below the existing node. Returns the number of blocks newly cached.
  // Insertion stops at a block id the caller cannot own: out of range, free in the pool, or
  // already cached at another position (logged as an error; the blocks before it stay cached).
  int64_t Insert(std::span<const int32_t> tokens, std::span<const int32_t> block_ids);

  // What Evict could free right now. O(1).
  int64_t evictable_blocks() const { return evictable_; }
  // Frees up to n evictable blocks, LRU leaves first. Returns how many were freed.
  int64_t Evict(int64_t n);
  // Frees every evictable block (flush_cache); referenced blocks stay. Returns how many.
  int64_t Clear();
  // Blocks the tree holds (each with the cache's reference).
  int64_t cached_blocks() const { return cached_; }
  int32_t block_size() const { return block_size_; }

  // Reports stores and evictions to `log` from now on (nullptr: stop). Only while the cache is
  // empty (aborts otherwise: the log would miss blocks), and `log`'s block size must be the
  // pool's.
  void SetEventLog(KvEventLog* log);

  // Counters since construction, for metrics.
  struct Stats {
    int64_t lookups = 0, lookup_tokens = 0, hit_tokens = 0;
    int64_t inserted_blocks = 0, evicted_blocks = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  static constexpr int32_t kNone = -1;

  // One entry per pool block (index = block id), plus the root at index num_blocks.
  struct Node {
    int32_t parent = kNone;
    int32_t num_children = 0;
    int32_t locked_children = 0;  // children whose subtree holds a block referenced elsewhere
    bool cached = false;
    bool pinned = false;  // pool ref count >= 2: referenced outside the cache
    bool locked = false;  // pinned || locked_children > 0: not evictable
    uint64_t last_access = 0;
  };
  // A child edge: the parent node and the child's block of tokens. Keys stored in `children_`
  // view `tokens_`; lookups view the caller's tokens.
  struct EdgeKey {
    int32_t parent;
    std::span<const int32_t> tokens;  // block_size_ ids
    friend bool operator==(const EdgeKey& a, const EdgeKey& b) {
      return a.parent == b.parent &&
             std::equal(a.tokens.begin(), a.tokens.end(), b.tokens.begin(), b.tokens.end());
    }
    template <typename H>
    friend H AbslHashValue(H h, const EdgeKey& k) {
      return H::combine(H::combine_contiguous(std::move(h), k.tokens.data(), k.tokens.size()),
                        k.parent);
    }
  };

  void OnRefCountChanged(int32_t block, int32_t ref_count) override;
  std::span<const int32_t> BlockTokens(int32_t block) const {
    return {tokens_.data() + static_cast<size_t>(block) * block_size_,
            static_cast<size_t>(block_size_)};
  }
  bool IsEvictableLeaf(const Node& n) const { return !n.locked && n.num_children == 0; }
  // Adds `block` holding `tokens` below `parent`, last touched at `tick`.
  void AddNode(int32_t parent, int32_t block, std::span<const int32_t> tokens, uint64_t tick);
  // Removes an evictable leaf from the tree (the caller drops the cache's reference).
  void RemoveLeaf(int32_t block);
  void Touch(int32_t block, uint64_t tick);
  // Recomputes `block`'s locked state and walks up while ancestors' states change.
  void UpdateLock(int32_t block);

  // The chain hash of the block stored under `parent` with `tokens` (events only).
  uint64_t ChildHash(int32_t parent, std::span<const int32_t> tokens) const;

  BlockPool* const pool_;            // not owned
  KvEventLog* event_log_ = nullptr;  // not owned; null: no events
  std::vector<uint64_t> hashes_;     // [num_blocks] chain hash per cached block (events only)
  const int32_t block_size_;
  const int32_t root_;           // == pool_->num_blocks()
  std::vector<int32_t> tokens_;  // [num_blocks, block_size] token ids of cached blocks
  std::vector<Node> nodes_;      // [num_blocks + 1]
  absl::flat_hash_map<EdgeKey, int32_t> children_;  // edge -> child block id
  // Evictable leaves ordered by (last access, block id): begin() is the next victim.
  std::set<std::pair<uint64_t, int32_t>> evictable_leaves_;
  int64_t cached_ = 0;
  int64_t evictable_ = 0;
  uint64_t clock_ = 0;  // bumped once per MatchAndRef / Insert
  Stats stats_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_RADIX_CACHE_H_
