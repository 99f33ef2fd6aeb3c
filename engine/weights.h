// Weights: the read-only parameters of a model, loaded from a Hugging Face directory
// (`model.safetensors` or the shards named by `model.safetensors.index.json`).
//
// Matrices are bf16 [out_features, in_features] (the HF nn.Linear shape), stored in the layout the
// matmul path of this process reads fastest (PreferredWeightLayout, matmul.h: rows interleaved in
// groups of four on the vector paths, else the HF row layout, or oneDNN's blocked layout under
// TANDEM_GEMM=onednn, which replaces the others rather than adding a copy; each matrix's layout
// is beside it),
// copied at load time into one anonymous, 2 MiB aligned buffer offered for transparent huge
// pages (HugePageBuffer):
// decode streams every matrix once per step, and streaming a read-only file mapping of 4 KiB
// pages costs a TLB miss and a prefetcher restart every 4 KiB. bf16 tensors are copied
// bit for bit; fp16 and fp32 tensors are converted to bf16 (round to nearest even,
// docs/numerics.md). The buffer holds each layer's q, k, v rows back to back and its gate and up
// rows back to back, so each group is one matrix (wqkv, w_gate_up) that one matmul call streams in
// a single pass. Vectors (norm weights, biases) are small and kept as fp32 copies of their bf16
// values (exact widening, after the same bf16 rounding for fp16/fp32 sources).
//
// Memory: after Load, what is resident is the buffer (resident_bytes(): all matrices, embedding
// included, once; a tied lm_head is not stored twice) and the small vectors. The safetensors
// files are unmapped before Load returns, and each tensor's file pages are dropped from this
// process (MADV_DONTNEED) as soon as it is copied, so loading never holds the file and the copy
// resident together beyond one tensor; the file stays in the kernel's page cache, which the
// kernel can reclaim.
//
// W8A8 int8 (docs/numerics.md): with `w8a8` requested or a compressed-tensors int8 checkpoint
// (ModelConfig::int8_checkpoint), the decoder's linear layers (wqkv, wo, w_gate_up, w_down) are
// stored instead as packed int8 matrices (Int8Matrix, matmul_int8.h) in the same buffer, their
// per-row scales and sums in vectors beside it, and the bf16 pointers of those matrices are null.
// A bf16/fp16/fp32 checkpoint is quantized at load, per output channel; an int8 checkpoint's
// `weight` and `weight_scale` are used as they are. The embedding and lm_head stay bf16, and so do
// the mixture-of-experts routers; the experts are int8 like the dense MLP.
//
// Thread-safety: immutable after Load; safe to share between threads.
// Ownership: a Weights object owns the buffer its pointers refer to.
#ifndef TANDEM_ENGINE_WEIGHTS_H_
#define TANDEM_ENGINE_WEIGHTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/bf16.h"
#include "engine/kernels/huge_page_buffer.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_int8.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace tandem::engine {

// One expert of a mixture-of-experts layer (qwen3_moe): a SiLU-gated MLP of
// moe_intermediate_size, its gate and up rows fused as in the dense MLP. bf16, or int8 under W8A8
// (then the bf16 pointers are null).
struct ExpertWeights {
  const bf16* w_gate_up = nullptr;  // [2 * moe_intermediate, hidden]: w_gate; w_up
  const bf16* w_up = nullptr;       // [moe_intermediate, hidden] (follows w_gate_up's gate rows)
  WeightLayout w_gate_up_layout = WeightLayout::kRows;
  const bf16* w_down = nullptr;  // [hidden, moe_intermediate]
  WeightLayout w_down_layout = WeightLayout::kRows;
  Int8Matrix w_gate_up_i8;
  Int8Matrix w_down_i8;
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  // A fused matrix's members share its layout (every member's rows are whole groups).
  const bf16* wqkv = nullptr;  // [(n_heads + 2 * n_kv_heads) * head_dim, hidden]: wq; wk; wv
  WeightLayout wqkv_layout = WeightLayout::kRows;
  // The members after the first of a fused matrix in WeightLayout::kOnednn are not addressable
  // on their own (its blocks span members): wk, wv, w_up are null then.
  const bf16* wq = nullptr;  // [n_heads * head_dim, hidden] (== wqkv)
  const bf16* wk = nullptr;  // [n_kv_heads * head_dim, hidden] (follows wq)
  const bf16* wv = nullptr;  // [n_kv_heads * head_dim, hidden] (follows wk)
  const bf16* wo = nullptr;  // [hidden, n_heads * head_dim]
  WeightLayout wo_layout = WeightLayout::kRows;
  std::vector<float> bq;            // [n_heads * head_dim] (empty without attention_bias)
  std::vector<float> bk;            // [n_kv_heads * head_dim] (idem)
  std::vector<float> bv;            // [n_kv_heads * head_dim] (idem)
  std::vector<float> q_norm;        // [head_dim] (empty without qk_norm)
  std::vector<float> k_norm;        // [head_dim] (idem)
  std::vector<float> mlp_norm;      // [hidden]
  const bf16* w_gate_up = nullptr;  // [2 * intermediate, hidden]: w_gate; w_up
  WeightLayout w_gate_up_layout = WeightLayout::kRows;
  const bf16* w_gate = nullptr;  // [intermediate, hidden] (== w_gate_up)
  const bf16* w_up = nullptr;    // [intermediate, hidden] (follows w_gate)
  const bf16* w_down = nullptr;  // [hidden, intermediate]
  WeightLayout w_down_layout = WeightLayout::kRows;
  // W8A8 only (Weights::int8()): the same matrices in int8, fused the same way.
  Int8Matrix wqkv_i8;
  Int8Matrix wo_i8;
  Int8Matrix w_gate_up_i8;
  Int8Matrix w_down_i8;
  // Mixture-of-experts layers (ModelConfig::IsMoeLayer) instead of the dense MLP above: the router
  // `mlp.gate` (bf16 even under W8A8) and the experts `mlp.experts.E`.
  const bf16* router = nullptr;  // [num_experts, hidden]
  WeightLayout router_layout = WeightLayout::kRows;
  std::vector<ExpertWeights> experts;
};

class Weights {
 public:
  // Loads every tensor `config` calls for from `model_dir`. Errors name the file and the tensor:
  // missing file or tensor (NotFound), wrong shape or unsupported dtype (InvalidArgument), corrupt
  // or truncated file (InvalidArgument / DataLoss), bad index JSON (InvalidArgument).
  // `w8a8` quantizes a bf16/fp16/fp32 checkpoint's linear layers at load; an int8 checkpoint is
  // int8 either way. Int8 tensors must be I8 with a BF16/F16/F32 `weight_scale` of [out, 1] or
  // [out] (InvalidArgument otherwise).
  static absl::StatusOr<std::unique_ptr<Weights>> Load(const std::string& model_dir,
                                                       const ModelConfig& config,
                                                       bool w8a8 = false);
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;

  const bf16* embed = nullptr;  // [vocab, hidden]; rows read with CopyWeightRow
  WeightLayout embed_layout = WeightLayout::kRows;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  const bf16* lm_head = nullptr;  // [vocab, hidden]; == embed when tie_word_embeddings
  WeightLayout lm_head_layout = WeightLayout::kRows;

  // True when the linear layers are int8 (the *_i8 matrices of each layer are set).
  bool int8() const { return int8_; }

  // Bytes of matrix weights one decode step reads (all layers + lm_head, embedding rows aside);
  // with mixture-of-experts layers, every expert of them.
  int64_t matrix_bytes_per_step() const { return matrix_bytes_per_step_; }
  // Bytes of matrix weights one token reads: as above, but with only num_experts_per_tok experts
  // of each mixture-of-experts layer (the active weights; == matrix_bytes_per_step() when dense).
  int64_t active_matrix_bytes_per_token() const { return active_matrix_bytes_per_token_; }
  // Bytes of the matrix buffer (resident after Load) and how many of them are huge pages now.
  int64_t resident_bytes() const { return static_cast<int64_t>(matrices_.size()); }
  // The matrix buffer itself (resident_bytes() long), e.g. for timing a plain read of it.
  const uint8_t* matrix_data() const { return matrices_.data(); }
  int64_t huge_page_bytes() const { return matrices_.huge_page_bytes(); }

 private:
  Weights() = default;
  class Loader;
  HugePageBuffer matrices_;
  std::vector<float> int8_scales_;  // every int8 matrix's row scales, back to back
  std::vector<int32_t> int8_sums_;  // and their row sums
  bool int8_ = false;
  int64_t matrix_bytes_per_step_ = 0;
  int64_t active_matrix_bytes_per_token_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_WEIGHTS_H_
