#include "engine/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace tandem::engine {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
  // A configuration error, not input.
  TANDEM_CHECK(num_blocks >= 1 && block_size >= 1,
               absl::StrCat("BlockPool: num_blocks (", num_blocks, ") and block_size (", block_size,
                            ") must be >= 1"));
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_list_.reserve(static_cast<size_t>(num_blocks));
  // LIFO: block 0 is handed out first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

absl::Status BlockPool::CheckOwned(const std::vector<int32_t>& blocks) const {
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks()) {
      return absl::InvalidArgumentError(
          absl::StrCat("block id ", b, " outside the pool of ", num_blocks(), " blocks"));
    }
    if (ref_counts_[b] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b, " is free"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BlockPool::Plan> BlockPool::PlanAppend(
    const std::vector<AppendRequest>& requests) const {
  Plan plan;
  plan.requests = requests;
  plan.version = version_;
  std::unordered_set<const BlockTable*> seen;
  for (const AppendRequest& r : requests) {
    if (r.table == nullptr) return absl::InvalidArgumentError("append request without a table");
    if (r.num_new_tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative token count ", r.num_new_tokens, " in append request"));
    }
    if (!seen.insert(r.table).second) {
      return absl::InvalidArgumentError("the same block table appears twice in one batch");
    }
    const int64_t have = static_cast<int64_t>(r.table->block_ids.size());
    if (r.table->num_tokens < 0 || have < BlocksFor(r.table->num_tokens)) {
      return absl::InvalidArgumentError(
          absl::StrCat("block table holds ", have, " blocks for ", r.table->num_tokens, " tokens"));
    }
    const int64_t need = BlocksFor(r.table->num_tokens + r.num_new_tokens);
    const int64_t extra = std::max<int64_t>(0, need - have);
    plan.new_blocks.push_back(static_cast<int32_t>(std::min<int64_t>(extra, INT32_MAX)));
    plan.total_new_blocks += extra;
  }
  if (plan.total_new_blocks > num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: batch needs ",
                                                     plan.total_new_blocks, " new blocks, ",
                                                     num_free(), " free of ", num_blocks()));
  }
  return plan;
}

absl::Status BlockPool::Commit(const Plan& plan) {
  if (plan.version != version_) {
    return absl::FailedPreconditionError("KV allocation plan is stale: the pool changed");
  }
  if (plan.total_new_blocks > num_free()) {  // cannot happen for a fresh plan; be safe
    return absl::FailedPreconditionError("KV allocation plan does not fit");
  }
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    BlockTable* t = plan.requests[i].table;
    for (int32_t k = 0; k < plan.new_blocks[i]; ++k) {
      const int32_t b = free_list_.back();
      free_list_.pop_back();
      ref_counts_[b] = 1;
      t->block_ids.push_back(b);
      Notify(b);
    }
    t->num_tokens += plan.requests[i].num_new_tokens;
  }
  ++version_;
  return absl::OkStatus();
}

absl::Status BlockPool::AddRef(const std::vector<int32_t>& blocks) {
  if (absl::Status s = CheckOwned(blocks); !s.ok()) return s;
  for (int32_t b : blocks) ++ref_counts_[b];
  ++version_;
  for (int32_t b : blocks) Notify(b);
  return absl::OkStatus();
}

absl::Status BlockPool::Release(BlockTable* table) {
  if (table == nullptr) return absl::InvalidArgumentError("Release of a null table");
  if (absl::Status s = CheckOwned(table->block_ids); !s.ok()) return s;
  // A table listing one block twice would drive its count below what it owns.
  std::unordered_set<int32_t> uniq(table->block_ids.begin(), table->block_ids.end());
  if (uniq.size() != table->block_ids.size()) {
    return absl::InvalidArgumentError("block table lists a block twice");
  }
  for (int32_t b : table->block_ids) {
    if (--ref_counts_[b] == 0) free_list_.push_back(b);
  }
  for (int32_t b : table->block_ids) Notify(b);
  table->block_ids.clear();
  table->num_tokens = 0;
  ++version_;
  return absl::OkStatus();
}

absl::Status BlockPool::ReleaseBlocks(std::span<const int32_t> blocks) {
  if (blocks.empty()) return absl::OkStatus();  // no mutation: outstanding plans stay valid
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t b = blocks[i];
    absl::Status error;
    if (b < 0 || b >= num_blocks()) {
      error = absl::InvalidArgumentError(
          absl::StrCat("block id ", b, " outside the pool of ", num_blocks(), " blocks"));
    } else if (ref_counts_[b] == 0) {
      error = absl::InvalidArgumentError(
          absl::StrCat("block ", b, " is free (or listed more times than it has references)"));
    }
    if (!error.ok()) {
      // Undo entries [0, i) newest first: walking back, the state after entry j is restored, so a
      // zero count at j means entry j pushed the block, and it is the last push left.
      for (size_t j = i; j-- > 0;) {
        if (ref_counts_[blocks[j]] == 0) free_list_.pop_back();
        ++ref_counts_[blocks[j]];
      }
      return error;
    }
    if (--ref_counts_[b] == 0) free_list_.push_back(b);
  }
  ++version_;
  for (int32_t b : blocks) Notify(b);
  return absl::OkStatus();
}

absl::Status BlockPool::SetRefObserver(BlockRefObserver* observer) {
  if (observer != nullptr && observer_ != nullptr && observer_ != observer) {
    return absl::FailedPreconditionError("the block pool already has a reference observer");
  }
  observer_ = observer;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvCacheStorage>> KvCacheStorage::Create(int64_t num_layers,
                                                                       int64_t num_blocks,
                                                                       int64_t block_size,
                                                                       int64_t num_kv_heads,
                                                                       int64_t head_dim) {
  for (int64_t v : {num_layers, num_blocks, block_size, num_kv_heads, head_dim}) {
    if (v <= 0 || v > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(absl::StrCat("KV cache dimension out of range: ", v));
    }
  }
  const int64_t block_bytes = BlockBytes(block_size, num_kv_heads, head_dim);
  if (block_bytes > (int64_t{1} << 40) / num_blocks ||
      block_bytes * num_blocks > (int64_t{1} << 46) / num_layers) {
    return absl::InvalidArgumentError("KV cache size overflows");
  }
  std::unique_ptr<KvCacheStorage> s(new KvCacheStorage());
  s->num_layers_ = num_layers;
  s->num_blocks_ = num_blocks;
  s->block_size_ = block_size;
  s->num_kv_heads_ = num_kv_heads;
  s->head_dim_ = head_dim;
  s->block_bytes_ = block_bytes;
  // 2 MiB pages where the kernel allows them: attention reads K/V rows of blocks scattered over
  // the whole mapping, and with 4 KiB pages nearly every block costs a TLB miss.
  absl::StatusOr<HugePageBuffer> memory =
      HugePageBuffer::Allocate(static_cast<size_t>(s->total_bytes()));
  if (!memory.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", s->total_bytes(), " bytes for the KV cache: ", memory.status().message()));
  }
  s->memory_ = *std::move(memory);
  return s;
}

KvCacheStorage::~KvCacheStorage() = default;

}  // namespace tandem::engine
