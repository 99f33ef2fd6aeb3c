// Mixture of experts (qwen3_moe): the MLP of a sparse layer, routing every token of a batch to
// its top-k experts and running each expert once over the tokens routed to it.
//
// Per call (one layer, one batch of T tokens, input xb = bf16(rmsnorm(x)) as for the dense MLP):
//   1. router logits [T, num_experts] = xb times the layer's bf16 `mlp.gate` (fp32 accumulation);
//   2. per token: softmax over all experts in fp32, the top num_experts_per_tok by probability
//      (the lower expert index first on equal probabilities), renormalised over those to sum 1
//      when norm_topk_prob (RouteToken);
//   3. the (token, rank) pairs grouped by expert, tokens in batch order within an expert; each
//      expert with tokens runs its gate/up matmul, SiLU * up (rounded to bf16) and down matmul
//      once over its gathered rows (bf16 or W8A8 int8, as the dense MLP); the experts with at
//      most kMoeSharedDispatchMaxRows rows (every expert at decode batch 1) share one pool
//      dispatch for their gate/up matmuls and one for their downs, each thread running its share
//      of their weight rows back to back;
//   4. per token, out = sum over ranks k = 0, 1, ... of weight_k * expert_k(x) in fp32, in rank
//      order starting from 0 (not in the order experts ran).
// Every step gives a token's result from its own row only (the matmuls' rows are independent of
// the other rows of a call, matmul.h / matmul_int8.h), so a token's output is bit-identical
// whatever else shares its batch, whatever the grouping and the thread count (docs/numerics.md
// "Mixture of experts").
//
// Thread-safety: MoeScratch belongs to one Model (one Forward at a time); MoeForward uses `pool`
// for its parallel parts. Weights are only read.
#ifndef TANDEM_ENGINE_MOE_H_
#define TANDEM_ENGINE_MOE_H_

#include <cstdint>
#include <vector>

#include "engine/kernels/bf16.h"
#include "engine/kernels/thread_pool.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace tandem::engine {

// Experts with at most this many rows in a call run in the shared dispatches (step 3 above): at
// decode, where an expert's rows are few and its weights are read once, a dispatch per matrix
// costs more than each thread converting the few rows of x itself; larger groups (prefill) split
// each matmul over the threads.
inline constexpr int64_t kMoeSharedDispatchMaxRows = 8;

// Activations of the mixture-of-experts layers of one batch, sized by Reserve (at the start of a
// Forward, never inside the layer loop).
struct MoeScratch {
  int64_t capacity = 0;               // tokens
  std::vector<float> router;          // [T, num_experts] logits, then probabilities
  std::vector<int32_t> expert;        // [T, k] chosen experts in rank order
  std::vector<float> weight;          // [T, k] their routing weights
  std::vector<int32_t> row;           // [T, k] the pair's row among the gathered rows
  std::vector<int64_t> expert_begin;  // [num_experts + 1] first gathered row of each expert
  std::vector<int64_t> expert_next;   // [num_experts] next free row while grouping
  std::vector<int32_t> row_token;     // [T k] token of each gathered row
  std::vector<int32_t> shared;        // experts run in the shared dispatches (capacity num_experts)
  std::vector<bf16> x;                // [T k, hidden] gathered inputs
  std::vector<float> gate_up;         // [T k, 2 moe_intermediate]
  std::vector<bf16> act;              // [T k, moe_intermediate]
  std::vector<float> down;            // [T k, hidden]

  // Grows the buffers to `tokens` tokens of `c` (a no-op for a dense model or a smaller batch).
  void Reserve(const ModelConfig& c, int64_t tokens);
};

// Routes one token: probs [num_experts] holds the router logits on entry and the softmax
// probabilities on return; writes the top `k` experts (descending probability, lower index first
// on ties) and their weights (renormalised over the k when `normalize`).
void RouteToken(float* probs, int64_t num_experts, int64_t k, bool normalize, int32_t* experts,
                float* weights);

// out [T, hidden] (row stride hidden) = the mixture of experts of layer `w` applied to xb
// [T, hidden] (row stride ldx). w must be a mixture-of-experts layer of `c`. Returns how many
// experts ran (had at least one token).
int64_t MoeForward(const ModelConfig& c, const LayerWeights& w, const bf16* xb, int64_t ldx,
                   int64_t T, MoeScratch* s, ThreadPool* pool, float* out);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MOE_H_
