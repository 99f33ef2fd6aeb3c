// Model: a decoder-only transformer (Llama / Qwen2 / Qwen3 / Qwen3-MoE) forward pass over a paged
// KV cache. Qwen3-MoE's sparse layers run their mixture of experts in moe.h.
//
// Reads top to bottom like llama2.c: ModelConfig (hyper-parameters), Weights (read-only, in huge
// pages), RunState (per-batch activations, preallocated and grown only between batches), and
// Forward. One Forward call runs a batch that mixes prompt chunks and decode tokens: for each
// sequence, the tokens of this step, the absolute position of the first one, its block table, and
// whether the logits of its last token are wanted. The new tokens' K/V are written into the cache
// (K after RoPE, bf16) and every token attends over all cached positions of its sequence.
//
// Numerics follow docs/numerics.md; a token's logits are bit-identical whether it is computed
// alone, in any batch, in any prefill chunking, or with any thread count (on one SIMD path).
//
// Thread-safety: a Model is not reentrant (one Forward at a time: RunState is shared); it uses its
// own ThreadPool inside Forward. Weights are immutable and could be shared.
// Ownership: the Model owns weights, thread pool and run state; the caller owns the KV cache
// storage and block tables (the engine's scheduler manages them with BlockPool).
#ifndef TANDEM_ENGINE_MODEL_H_
#define TANDEM_ENGINE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace tandem::engine {

// One sequence's part of a batch.
struct SequenceInput {
  std::span<const int32_t> tokens;     // this step's tokens (>= 1)
  int64_t start_pos = 0;               // absolute position of tokens[0]
  std::span<const int32_t> block_ids;  // must cover positions [0, start_pos + tokens.size())
  bool want_logits = false;            // logits of the last token of this step
  // Also the logits of tokens[i] for i in [score_begin, score_end) (prompt logprobs), before
  // the last token's row. score_end <= tokens.size(), and < it with want_logits.
  int64_t score_begin = 0;
  int64_t score_end = 0;
};

// Called once per layer, after that layer's K/V for the whole batch is in the cache (before the
// layer's attention). Runs on the Forward thread; must not call back into the Model.
using LayerKvCallback = std::function<void(int64_t layer)>;

// How the decoder's linear layers compute. kW8A8: per-channel int8 weights (quantized at load
// from a floating checkpoint) and per-token int8 activations (docs/numerics.md); an int8
// checkpoint (ModelConfig::int8_checkpoint) runs W8A8 whatever this says.
enum class Quantization { kNone, kW8A8 };

// Parses a --quantization value: "" or "none" (kNone), "w8a8" or SGLang's "w8a8_int8" (kW8A8).
absl::StatusOr<Quantization> ParseQuantization(std::string_view name);

struct ModelOptions {
  int threads = 1;
  bool profile = false;  // accumulate per-phase wall time into Model::profile()
  Quantization quantization = Quantization::kNone;
};

// Wall time per phase of Forward, summed over calls (seconds), when ModelOptions::profile is set.
// For benchmarks: says where a step's time goes without a profiler.
struct ForwardProfile {
  double qkv_proj = 0;          // q/k/v matmuls
  double rope_kv = 0;           // bias, q/k norm, RoPE, K/V write to the cache
  double attention = 0;         // paged attention
  double o_proj = 0;            // o matmul
  double mlp_gate_up = 0;       // gate and up matmuls
  double mlp_act = 0;           // SiLU * up
  double mlp_down = 0;          // down matmul
  double moe = 0;               // mixture-of-experts layers' MLP: routing, experts, combine
  int64_t moe_expert_runs = 0;  // experts run, summed over the mixture-of-experts layers
  double norms = 0;             // RMSNorms, residual adds, embedding
  double lm_head = 0;           // final norm + lm_head matmul
  int64_t calls = 0;
  double total() const {
    return qkv_proj + rope_kv + attention + o_proj + mlp_gate_up + mlp_act + mlp_down + moe +
           norms + lm_head;
  }
};

class Model {
 public:
  // Loads config.json and the weights from `model_dir`. Errors name the file (and tensor).
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& model_dir,
                                                     const ModelOptions& options);
  // Builds from an already parsed config and loaded weights.
  Model(ModelConfig config, std::unique_ptr<Weights> weights, const ModelOptions& options);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const Weights& weights() const { return *weights_; }
  ThreadPool* pool() { return &pool_; }
  const ForwardProfile& profile() const { return profile_; }
  void ResetProfile() { profile_ = ForwardProfile(); }

  // Creates KV storage shaped for this model.
  absl::StatusOr<std::unique_ptr<KvCacheStorage>> CreateKvCache(int64_t num_blocks,
                                                                int64_t block_size) const;

  // Runs the batch. On success returns the logits of the sequences with want_logits, in batch
  // order: [n_wanted, vocab] fp32, valid until the next Forward. A sequence's score rows
  // (score_begin..score_end) come right before its want_logits row. Errors (InvalidArgument,
  // nothing written to the cache): empty batch or sequence, token id out of range, negative start,
  // a position beyond max_position_embeddings, a block table that does not cover the positions or
  // names a block outside the cache, a cache shaped for another model.
  absl::StatusOr<std::span<const float>> Forward(const std::vector<SequenceInput>& batch,
                                                 KvCacheStorage* cache,
                                                 const LayerKvCallback& on_layer_kv = nullptr);

 private:
  struct RunState;
  absl::Status Validate(const std::vector<SequenceInput>& batch, const KvCacheStorage& cache) const;
  void Layer(int64_t l, int64_t n_tokens, KvCacheStorage* cache, const LayerKvCallback& cb);
  // y [T, n] = x [T, k] (ldx) times the layer matrix: bf16 `w` in `layout` when set, else `w8`.
  void Linear(const bf16* x, int64_t ldx, int64_t T, int64_t k, const bf16* w, WeightLayout layout,
              const Int8Matrix& w8, int64_t n, float* y);

  ModelConfig config_;
  std::unique_ptr<Weights> weights_;
  ThreadPool pool_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  std::unique_ptr<RunState> rs_;
  bool profiling_ = false;
  ForwardProfile profile_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_H_
