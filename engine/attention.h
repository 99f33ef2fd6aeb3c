// Causal grouped-query attention over the paged KV cache (docs/numerics.md).
//
// For token t of a batch at absolute position pos[t], query head h attends over the keys at
// positions 0..pos[t] of its own sequence, read (bf16 -> fp32) from the layer's cache blocks
// listed in its block table; KV head = h / (n_heads / n_kv_heads). q stays fp32. Scores are
// q.k * 1/sqrt(head_dim); softmax in fp32 with max subtraction; output = sum_j p_j v_j.
// Every reduction runs in position order with a fixed lane structure, so a token's output
// depends only on its q and the cached K/V of its sequence: never on the other tokens of the
// batch, on chunking, or on the thread count (work is split over (token, kv head) pairs).
//
// Memory is O(context) per thread (one row of scores per query head of a group), never
// O(context^2). Thread-safe for distinct outputs; the cache is only read.
#ifndef TANDEM_ENGINE_ATTENTION_H_
#define TANDEM_ENGINE_ATTENTION_H_

#include <cstdint>

#include "engine/kernels/thread_pool.h"
#include "engine/kv_cache.h"

namespace tandem::engine {

struct AttentionBatch {
  int64_t n_tokens = 0;
  const float* q = nullptr;            // [n_tokens, n_heads * head_dim], row stride q_stride
  int64_t q_stride = 0;                // floats between tokens' q rows; 0: n_heads * head_dim
  const int64_t* positions = nullptr;  // [n_tokens] absolute positions
  const int32_t* const* block_tables = nullptr;  // [n_tokens] -> that token's sequence's block ids
  float* out = nullptr;                          // [n_tokens, n_heads * head_dim]
};

// Requires the K/V of every attended position to be in `cache` (the caller writes the batch's
// own K/V first) and each block table to cover pos[t] (DCHECKed; the model validates inputs).
void PagedAttention(const KvCacheStorage& cache, int64_t layer, int64_t n_heads,
                    const AttentionBatch& batch, ThreadPool* pool);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ATTENTION_H_
