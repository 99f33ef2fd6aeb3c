#include "engine/radix_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"
#include "common/kv_block_hash.h"
#include "spdlog/spdlog.h"

namespace tandem::engine {
namespace {

BlockPool* CheckedPool(BlockPool* pool) {
  TANDEM_CHECK(pool != nullptr, "RadixCache needs a block pool");
  return pool;
}

}  // namespace

RadixCache::RadixCache(BlockPool* pool)
    : pool_(CheckedPool(pool)),
      block_size_(pool->block_size()),
      root_(pool->num_blocks()),
      tokens_(static_cast<size_t>(pool->num_blocks()) * static_cast<size_t>(pool->block_size())),
      nodes_(static_cast<size_t>(pool->num_blocks()) + 1) {
  TANDEM_CHECK_OK(pool_->SetRefObserver(this), "RadixCache observing its block pool");
  nodes_[root_].locked = true;  // the root holds no block and is never evicted
}

RadixCache::~RadixCache() {
  (void)pool_->SetRefObserver(nullptr);  // removing our own observer cannot fail
  std::vector<int32_t> held;
  held.reserve(static_cast<size_t>(cached_));
  for (int32_t b = 0; b < root_; ++b) {
    if (nodes_[b].cached) held.push_back(b);
  }
  if (absl::Status s = pool_->ReleaseBlocks(held); !s.ok()) {
    spdlog::error("radix cache: dropping its {} block references failed: {}", held.size(),
                  s.ToString());
  }
  if (event_log_ != nullptr) {
    std::vector<uint64_t> removed;
    removed.reserve(held.size());
    for (int32_t b : held) removed.push_back(hashes_[b]);
    event_log_->Removed(removed);
  }
}

void RadixCache::SetEventLog(KvEventLog* log) {
  TANDEM_CHECK(cached_ == 0, "a KV event log is attached only to an empty radix cache");
  TANDEM_CHECK(log == nullptr || log->block_size() == block_size_,
               "the KV event log's block size must be the pool's");
  event_log_ = log;
  if (log != nullptr) hashes_.assign(static_cast<size_t>(root_), 0);
}

uint64_t RadixCache::ChildHash(int32_t parent, std::span<const int32_t> tokens) const {
  return KvBlockHash(parent == root_ ? kKvBlockHashSeed : hashes_[parent], tokens);
}

RadixCache::Match RadixCache::MatchAndRef(std::span<const int32_t> tokens, int64_t max_tokens) {
  ++stats_.lookups;
  stats_.lookup_tokens += static_cast<int64_t>(tokens.size());
  Match m;
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
      block_size_;
  int32_t node = root_;
  for (int64_t i = 0; i < limit; ++i) {
    auto it = children_.find(EdgeKey{node, tokens.subspan(i * block_size_, block_size_)});
    if (it == children_.end()) break;
    node = it->second;
    m.block_ids.push_back(node);
  }
  if (m.block_ids.empty()) return m;
  if (absl::Status s = pool_->AddRef(m.block_ids); !s.ok()) {
    // Only possible if someone released the cache's own references: report a miss, not garbage.
    spdlog::error("radix cache: cannot reference matched blocks: {}", s.ToString());
    return Match{};
  }
  const uint64_t tick = ++clock_;
  for (int32_t b : m.block_ids) Touch(b, tick);
  m.num_tokens = static_cast<int64_t>(m.block_ids.size()) * block_size_;
  stats_.hit_tokens += m.num_tokens;
  return m;
}

int64_t RadixCache::PeekMatch(std::span<const int32_t> tokens, int64_t max_tokens) const {
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
      block_size_;
  int32_t node = root_;
  int64_t matched = 0;
  for (; matched < limit; ++matched) {
    auto it = children_.find(EdgeKey{node, tokens.subspan(matched * block_size_, block_size_)});
    if (it == children_.end()) break;
    node = it->second;
  }
  return matched;
}

int64_t RadixCache::Insert(std::span<const int32_t> tokens, std::span<const int32_t> block_ids) {
  const size_t k = std::min(block_ids.size(), tokens.size() / static_cast<size_t>(block_size_));
  const uint64_t tick = ++clock_;
  std::vector<int32_t> added;
  int32_t node = root_;
  for (size_t i = 0; i < k; ++i) {
    const std::span<const int32_t> key = tokens.subspan(i * block_size_, block_size_);
    if (auto it = children_.find(EdgeKey{node, key}); it != children_.end()) {
      node = it->second;  // already cached (maybe under another block id): continue below it
      Touch(node, tick);
      continue;
    }
    const int32_t b = block_ids[i];
    if (b < 0 || b >= root_ || pool_->ref_count(b) == 0 || nodes_[b].cached) {
      spdlog::error("radix cache: not caching block id {} at block position {}: {}", b, i,
                    b < 0 || b >= root_ ? "outside the pool"
                    : nodes_[b].cached  ? "already cached for another prefix"
                                        : "the block is free");
      break;
    }
    if (event_log_ != nullptr) hashes_[b] = ChildHash(node, key);
    AddNode(node, b, key, tick);
    added.push_back(b);
    node = b;
  }
  // New nodes start pinned (the caller holds a reference), so taking the cache's reference changes
  // no lock state. AddRef cannot fail: every block was checked to be in range and held. Nothing
  // added means no pool call, so the pool's version (and a scheduler's pending plan) is kept.
  if (added.empty()) return 0;
  if (absl::Status s = pool_->AddRef(added); !s.ok()) {
    spdlog::error("radix cache: cannot reference inserted blocks: {}", s.ToString());
  }
  stats_.inserted_blocks += static_cast<int64_t>(added.size());
  if (event_log_ != nullptr) {
    std::vector<uint64_t> stored;
    stored.reserve(added.size());
    for (int32_t b : added) stored.push_back(hashes_[b]);
    event_log_->Stored(stored);
  }
  return static_cast<int64_t>(added.size());
}

int64_t RadixCache::Evict(int64_t n) {
  std::vector<int32_t> freed;
  while (static_cast<int64_t>(freed.size()) < n && !evictable_leaves_.empty()) {
    const int32_t b = evictable_leaves_.begin()->second;
    RemoveLeaf(b);  // may turn its parent into the next evictable leaf
    freed.push_back(b);
  }
  if (freed.empty()) return 0;
  if (absl::Status s = pool_->ReleaseBlocks(freed); !s.ok()) {
    spdlog::error("radix cache: releasing {} evicted blocks failed: {}", freed.size(),
                  s.ToString());
  }
  stats_.evicted_blocks += static_cast<int64_t>(freed.size());
  if (event_log_ != nullptr) {
    std::vector<uint64_t> removed;
    removed.reserve(freed.size());
    for (int32_t b : freed) removed.push_back(hashes_[b]);
    event_log_->Removed(removed);
  }
  return static_cast<int64_t>(freed.size());
}

int64_t RadixCache::Clear() { return Evict(cached_); }

void RadixCache::OnRefCountChanged(int32_t block, int32_t ref_count) {
  if (block < 0 || block >= root_) return;
  Node& node = nodes_[block];
  if (!node.cached) return;
  if (ref_count == 0) {
    spdlog::error("radix cache: cached block {} was freed behind the cache's back", block);
  }
  const bool pinned = ref_count >= 2;
  if (pinned == node.pinned) return;
  node.pinned = pinned;
  UpdateLock(block);
}

void RadixCache::AddNode(int32_t parent, int32_t block, std::span<const int32_t> tokens,
                         uint64_t tick) {
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  Node& p = nodes_[parent];
  if (parent != root_ && IsEvictableLeaf(p)) evictable_leaves_.erase({p.last_access, parent});
  ++p.num_children;
  Node& node = nodes_[block];
  node = Node{};
  node.parent = parent;
  node.cached = true;
  node.pinned = pool_->ref_count(block) >= 1;  // the caller's reference; the cache's comes next
  node.last_access = tick;
  // Enter as an unlocked leaf, then let UpdateLock move it (and its ancestors) to the truth.
  node.locked = false;
  ++evictable_;
  evictable_leaves_.insert({tick, block});
  children_.emplace(EdgeKey{parent, BlockTokens(block)}, block);
  ++cached_;
  UpdateLock(block);
}

void RadixCache::RemoveLeaf(int32_t block) {
  Node& node = nodes_[block];
  evictable_leaves_.erase({node.last_access, block});
  children_.erase(EdgeKey{node.parent, BlockTokens(block)});
  node.cached = false;
  --cached_;
  --evictable_;
  Node& p = nodes_[node.parent];
  --p.num_children;  // an unlocked child never counted in p.locked_children
  if (node.parent != root_ && IsEvictableLeaf(p)) {
    evictable_leaves_.insert({p.last_access, node.parent});
  }
}

void RadixCache::Touch(int32_t block, uint64_t tick) {
  Node& node = nodes_[block];
  if (IsEvictableLeaf(node)) {
    evictable_leaves_.erase({node.last_access, block});
    evictable_leaves_.insert({tick, block});
  }
  node.last_access = tick;
}

void RadixCache::UpdateLock(int32_t block) {
  for (int32_t n = block; n != root_;) {
    Node& node = nodes_[n];
    const bool locked = node.pinned || node.locked_children > 0;
    if (locked == node.locked) return;
    node.locked = locked;
    if (locked) {
      --evictable_;
      if (node.num_children == 0) evictable_leaves_.erase({node.last_access, n});
    } else {
      ++evictable_;
      if (node.num_children == 0) evictable_leaves_.insert({node.last_access, n});
    }
    nodes_[node.parent].locked_children += locked ? 1 : -1;
    n = node.parent;
  }
}

}  // namespace tandem::engine
