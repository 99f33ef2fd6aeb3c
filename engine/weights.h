// Weights: the read-only parameters of a model, loaded from a Hugging Face directory
// (`model.safetensors` or the shards named by `model.safetensors.index.json`).
//
// Matrices are bf16 in the HF nn.Linear layout [out_features, in_features]. bf16 tensors are used
// in place: the pointers are views into the read-only memory mapping (no copy). fp16 and fp32
// tensors are converted to bf16 (round to nearest even) at load time into owned buffers
// (numerics.md). Vectors (norm weights, biases) are small and kept as fp32 copies of their bf16
// values (exact widening, after the same bf16 rounding for fp16/fp32 sources).
//
// Thread-safety: immutable after Load; safe to share between threads.
// Ownership: a Weights object owns the mappings and converted buffers its pointers refer to.
#ifndef TANDEM_ENGINE_WEIGHTS_H_
#define TANDEM_ENGINE_WEIGHTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/bf16.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace tandem::engine {

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  const bf16* wq = nullptr;      // [n_heads * head_dim, hidden]
  const bf16* wk = nullptr;      // [n_kv_heads * head_dim, hidden]
  const bf16* wv = nullptr;      // [n_kv_heads * head_dim, hidden]
  const bf16* wo = nullptr;      // [hidden, n_heads * head_dim]
  std::vector<float> bq;         // [n_heads * head_dim] (empty without attention_bias)
  std::vector<float> bk;         // [n_kv_heads * head_dim] (idem)
  std::vector<float> bv;         // [n_kv_heads * head_dim] (idem)
  std::vector<float> q_norm;     // [head_dim] (empty without qk_norm)
  std::vector<float> k_norm;     // [head_dim] (idem)
  std::vector<float> mlp_norm;   // [hidden]
  const bf16* w_gate = nullptr;  // [intermediate, hidden]
  const bf16* w_up = nullptr;    // [intermediate, hidden]
  const bf16* w_down = nullptr;  // [hidden, intermediate]
};

class Weights {
 public:
  // Loads every tensor `config` calls for from `model_dir`. Errors name the file and the tensor:
  // missing file or tensor (NotFound), wrong shape or unsupported dtype (InvalidArgument), corrupt
  // or truncated file (InvalidArgument / DataLoss), bad index JSON (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<Weights>> Load(const std::string& model_dir,
                                                       const ModelConfig& config);
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;

  const bf16* embed = nullptr;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  const bf16* lm_head = nullptr;  // [vocab, hidden]; == embed when tie_word_embeddings

  // Bytes of matrix weights one decode step reads (all layers + lm_head, embedding rows aside).
  int64_t matrix_bytes_per_step() const { return matrix_bytes_per_step_; }

 private:
  Weights() = default;
  class Loader;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::unique_ptr<bf16[]>> converted_;  // fp16/fp32 tensors rounded to bf16
  int64_t matrix_bytes_per_step_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_WEIGHTS_H_
