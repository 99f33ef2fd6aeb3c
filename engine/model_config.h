// ModelConfig: the architecture hyper-parameters of a Hugging Face decoder-only model, read from
// its `config.json`. Supported `model_type`s: llama, qwen2, qwen3 (docs/engine.md "Model core").
//
// A plain value type (copyable, immutable after parsing); thread-compatible.
// Derived defaults follow Hugging Face: head_dim = hidden_size / num_attention_heads unless given
// (qwen3 always gives it), num_key_value_heads = num_attention_heads unless given, qwen2 always has
// q/k/v biases, llama has them only with `attention_bias: true`, qwen3 and qwen3_moe have q/k
// RMSNorm. qwen3_moe replaces the MLP of its sparse layers by a mixture of experts (MoeConfig).
#ifndef TANDEM_ENGINE_MODEL_CONFIG_H_
#define TANDEM_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine {

// `rope_scaling` of config.json. kNone when absent or null.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;                  // llama3 only
  float high_freq_factor = 4.0f;                 // llama3 only
  int64_t original_max_position_embeddings = 0;  // llama3 only
};

// The mixture-of-experts settings of a qwen3_moe config.json (Hugging Face Qwen3MoeConfig).
// Layer l is sparse when num_experts > 0, l is not in mlp_only_layers and
// (l + 1) % decoder_sparse_step == 0; the other layers keep the dense MLP of intermediate_size.
// Routing: softmax over all experts in fp32, the top num_experts_per_tok, renormalised to sum 1
// over those when norm_topk_prob (docs/numerics.md "Mixture of experts").
struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // HF's default
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

struct ModelConfig {
  std::string model_type;  // "llama", "qwen2", "qwen3" or "qwen3_moe"
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE (qwen3)
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;  // -1: none
  // The checkpoint is compressed-tensors W8A8 int8 (`quantization_config` with quant_method
  // "compressed-tensors", format "int-quantized", int8 weights symmetric per channel, input
  // activations int8 symmetric dynamic per token, only `lm_head` ignored): each decoder linear
  // layer's `weight` is int8 with a `weight_scale` [out, 1] beside it (docs/numerics.md). `ignore`
  // may also name the MoE router gates ("re:.*mlp.gate$" or "model.layers.N.mlp.gate"), which stay
  // floating in any case. Any other quantization_config is rejected (InvalidArgument naming the
  // field).
  bool int8_checkpoint = false;
  MoeConfig moe;  // qwen3_moe only

  // True when layer l's MLP is a mixture of experts (MoeConfig).
  bool IsMoeLayer(int64_t l) const;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }

  // Parses config.json text; `source` names the file in error messages. Errors: malformed JSON,
  // missing or mistyped field, non-positive sizes, heads not divisible by kv heads, unsupported
  // model_type or rope_scaling type (InvalidArgument, message names source and field/value).
  static absl::StatusOr<ModelConfig> FromJsonText(const std::string& text,
                                                  const std::string& source);
  // Reads and parses `path` (NotFound if it cannot be read).
  static absl::StatusOr<ModelConfig> FromFile(const std::string& path);
};

// RoPE inverse frequencies [head_dim / 2], computed in fp32 as Hugging Face does, with the config's
// rope_scaling applied (docs/numerics.md).
std::vector<float> RopeInvFrequencies(const ModelConfig& config);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_CONFIG_H_
