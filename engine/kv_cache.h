// Paged KV cache: block metadata (BlockPool, BlockTable) and the layer-major bf16 storage.
//
// Metadata and storage are separate on purpose: BlockPool is tensor-free bookkeeping (free list,
// reference counts, per-sequence block tables) that tests drive exhaustively, and KvCacheStorage is
// plain memory the model and the KV transfer engine address by byte offset.
//
// Allocation is "plan, then commit": PlanAppend computes which sequences need how many new blocks
// and checks that they fit, changing nothing; Commit applies a plan. A batch that cannot fit is
// rejected by PlanAppend and leaves the pool exactly as it was. A plan is only valid against the
// pool state it was computed from: any mutation in between makes Commit fail with
// FailedPrecondition (checked with a version counter), and still changes nothing.
//
// Reference counts: a block is owned by every table that lists it (prefix sharing shares blocks
// between tables with AddRef); Release drops a table's references and returns blocks whose count
// reaches zero to the free list. num_free() + (blocks with count > 0) == num_blocks() always.
//
// Thread-safety: none (thread-compatible). The engine's scheduler owns a pool and calls it from one
// thread; storage bytes of distinct blocks may be written concurrently.
#ifndef TANDEM_ENGINE_KV_CACHE_H_
#define TANDEM_ENGINE_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/bf16.h"
#include "engine/kernels/huge_page_buffer.h"

namespace tandem::engine {

inline constexpr int kDefaultKvBlockSize = 16;

// The blocks holding one sequence's KV, in position order: token at position p lives in
// block_ids[p / block_size], slot p % block_size. num_tokens counts positions with KV written or
// reserved by a committed plan.
struct BlockTable {
  std::vector<int32_t> block_ids;
  int64_t num_tokens = 0;
};

// Told about every change of a block's reference count, after it happened, so that an owner of
// references (the radix prefix cache) learns when other holders drop theirs without scanning.
class BlockRefObserver {
 public:
  virtual ~BlockRefObserver() = default;
  // `block`'s count is now `ref_count`. Called from inside BlockPool's mutating methods, once per
  // listed block (a block listed twice is reported twice, with its final count both times). The
  // observer must not call the pool's mutating methods.
  virtual void OnRefCountChanged(int32_t block, int32_t ref_count) = 0;
};

class BlockPool {
 public:
  // num_blocks >= 1, block_size >= 1 (aborts otherwise: configuration, not input).
  BlockPool(int32_t num_blocks, int32_t block_size = kDefaultKvBlockSize);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }
  // Blocks a sequence of `num_tokens` positions occupies.
  int64_t BlocksFor(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // One sequence's growth in a batch.
  struct AppendRequest {
    BlockTable* table = nullptr;  // not owned; must outlive Commit
    int64_t num_new_tokens = 0;   // >= 0
  };
  struct Plan {
    std::vector<AppendRequest> requests;
    std::vector<int32_t> new_blocks;  // per request: blocks to allocate
    int64_t total_new_blocks = 0;
    uint64_t version = 0;
  };
  // Checks that every request's new tokens fit once the needed blocks are added. Changes nothing.
  // Errors: ResourceExhausted (not enough free blocks: says how many are needed and free),
  // InvalidArgument (null table, negative count, a table listing more blocks than it needs, the
  // same table twice, or a block id outside the pool).
  absl::StatusOr<Plan> PlanAppend(const std::vector<AppendRequest>& requests) const;
  // Applies a plan from PlanAppend: takes blocks off the free list (ref count 1), appends them to
  // the tables and advances num_tokens. FailedPrecondition if the pool changed since planning.
  absl::Status Commit(const Plan& plan);

  // Adds a reference to each block of `blocks` (prefix sharing). InvalidArgument, changing
  // nothing, if a block is out of range or free.
  absl::Status AddRef(const std::vector<int32_t>& blocks);
  // Drops the table's reference on each of its blocks, frees those reaching zero, and clears the
  // table. InvalidArgument, changing nothing, if a block is out of range or already free.
  absl::Status Release(BlockTable* table);
  // Drops one reference per entry of `blocks` (a block listed twice loses two) and frees those
  // reaching zero: the inverse of AddRef for references not kept in a BlockTable.
  // InvalidArgument, changing nothing, if a block is out of range or would drop below zero.
  absl::Status ReleaseBlocks(std::span<const int32_t> blocks);

  // Installs `observer` (not owned; must stay valid until replaced by nullptr) to hear about every
  // reference count change. At most one observer: FailedPrecondition if another one is installed.
  // nullptr removes the current observer.
  absl::Status SetRefObserver(BlockRefObserver* observer);

 private:
  absl::Status CheckOwned(const std::vector<int32_t>& blocks) const;
  void Notify(int32_t block) const {
    if (observer_ != nullptr) observer_->OnRefCountChanged(block, ref_counts_[block]);
  }
  int32_t block_size_;
  BlockRefObserver* observer_ = nullptr;  // not owned
  std::vector<int32_t> ref_counts_;       // [num_blocks]
  std::vector<int32_t> free_list_;        // LIFO of free block ids
  uint64_t version_ = 0;                  // bumped by every mutation
};

// Storage for K and V of every layer, bf16, one contiguous region per layer ("layer-major"):
//
//   layer l region:  base() + l * layer_bytes()
//   block b:         layer region + b * block_bytes()
//   K of block b:    block + 0                      [block_size, n_kv_heads, head_dim] bf16
//   V of block b:    block + block_bytes() / 2      [block_size, n_kv_heads, head_dim] bf16
//   token slot s, kv head h, element d within K (or V): ((s * n_kv_heads + h) * head_dim + d) * 2
//
// So a layer is [num_blocks, 2 (K, V), block_size, n_kv_heads, head_dim] bf16, block_bytes() =
// 2 * block_size * n_kv_heads * head_dim * 2 and layer_bytes() = num_blocks * block_bytes().
// The KV transfer engine ships layer l of block b as the byte range
// [LayerOffset(l) + b * block_bytes(), + block_bytes()) as soon as layer l is computed.
// K is stored after RoPE; both are rounded to bf16 (docs/numerics.md).
//
// Thread-safety: the memory is plain; callers coordinate who writes which block.
// Ownership: owns one zero-initialised anonymous mapping, 2 MiB aligned and backed by huge pages
// where the kernel allows (kernels/huge_page_buffer.h).
class KvCacheStorage {
 public:
  // Errors: InvalidArgument on non-positive dimensions or a size overflow, ResourceExhausted if
  // the memory cannot be mapped.
  static absl::StatusOr<std::unique_ptr<KvCacheStorage>> Create(int64_t num_layers,
                                                                int64_t num_blocks,
                                                                int64_t block_size,
                                                                int64_t num_kv_heads,
                                                                int64_t head_dim);
  ~KvCacheStorage();
  KvCacheStorage(const KvCacheStorage&) = delete;
  KvCacheStorage& operator=(const KvCacheStorage&) = delete;

  // Bytes per block per layer for the given shape (what Create would use).
  static int64_t BlockBytes(int64_t block_size, int64_t num_kv_heads, int64_t head_dim) {
    return 2 * block_size * num_kv_heads * head_dim * static_cast<int64_t>(sizeof(bf16));
  }

  int64_t num_layers() const { return num_layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t layer_bytes() const { return block_bytes_ * num_blocks_; }
  int64_t total_bytes() const { return layer_bytes() * num_layers_; }
  int64_t LayerOffset(int64_t layer) const { return layer * layer_bytes(); }
  uint8_t* base() { return memory_.data(); }
  const uint8_t* base() const { return memory_.data(); }

  // [n_kv_heads, head_dim] of token slot `slot` in block `block` of `layer`.
  bf16* K(int64_t layer, int64_t block, int64_t slot) { return Row(layer, block, slot, 0); }
  bf16* V(int64_t layer, int64_t block, int64_t slot) { return Row(layer, block, slot, 1); }
  const bf16* K(int64_t layer, int64_t block, int64_t slot) const {
    return const_cast<KvCacheStorage*>(this)->Row(layer, block, slot, 0);
  }
  const bf16* V(int64_t layer, int64_t block, int64_t slot) const {
    return const_cast<KvCacheStorage*>(this)->Row(layer, block, slot, 1);
  }

 private:
  KvCacheStorage() = default;
  bf16* Row(int64_t layer, int64_t block, int64_t slot, int kv) {
    return reinterpret_cast<bf16*>(memory_.data() + LayerOffset(layer) + block * block_bytes_ +
                                   kv * (block_bytes_ / 2)) +
           slot * num_kv_heads_ * head_dim_;
  }
  int64_t num_layers_ = 0, num_blocks_ = 0, block_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  int64_t block_bytes_ = 0;
  HugePageBuffer memory_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_CACHE_H_
