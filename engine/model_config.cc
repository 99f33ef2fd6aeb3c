#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

using nlohmann::json;

std::string Dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Reads an integer field; `required` fields must exist. Absent optional fields keep *out.
absl::Status GetInt(const json& j, const std::string& source, const char* key, bool required,
                    int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Invalid(source, absl::StrCat("missing field '", key, "'"));
    return absl::OkStatus();
  }
  if (!it->is_number_integer()) {
    return Invalid(source, absl::StrCat("field '", key, "' must be an integer, got ", Dump(*it)));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetFloat(const json& j, const std::string& source, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return Invalid(source, absl::StrCat("field '", key, "' must be a number, got ", Dump(*it)));
  }
  *out = static_cast<float>(it->get<double>());
  if (!std::isfinite(*out)) return Invalid(source, absl::StrCat("field '", key, "' not finite"));
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const std::string& source, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return Invalid(source, absl::StrCat("field '", key, "' must be a boolean, got ", Dump(*it)));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

// `eos_token_id` is an integer or a list of integers in HF configs.
absl::Status GetTokenIds(const json& j, const std::string& source, const char* key,
                         std::vector<int32_t>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  auto bad = [&] {
    return Invalid(source,
                   absl::StrCat("field '", key, "' must be a token id or a list of token ids, got ",
                                Dump(*it)));
  };
  if (it->is_number_integer()) {
    if (it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) return bad();
    out->push_back(static_cast<int32_t>(it->get<int64_t>()));
    return absl::OkStatus();
  }
  if (!it->is_array()) return bad();
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return bad();
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ParseRopeScaling(const json& j, const std::string& source, RopeScaling* out) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return Invalid(source, "field 'rope_scaling' must be an object or null");
  const json& rs = *it;
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = rs.find(key);
    if (t != rs.end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  if (type.empty()) return Invalid(source, "rope_scaling has no string 'rope_type' or 'type'");
  if (type == "default") return absl::OkStatus();
  if (type != "linear" && type != "llama3") {
    return Invalid(source, absl::StrCat("unsupported rope_scaling type '", type,
                                        "' (supported: linear, llama3)"));
  }
  out->type = type == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kLlama3;
  const std::string ctx = source + " rope_scaling";
  RETURN_IF_ERROR(GetFloat(rs, ctx, "factor", &out->factor));
  if (!(out->factor > 0.0f)) return Invalid(ctx, "factor must be positive");
  if (out->type == RopeScaling::Type::kLlama3) {
    RETURN_IF_ERROR(GetFloat(rs, ctx, "low_freq_factor", &out->low_freq_factor));
    RETURN_IF_ERROR(GetFloat(rs, ctx, "high_freq_factor", &out->high_freq_factor));
    RETURN_IF_ERROR(GetInt(rs, ctx, "original_max_position_embeddings", true,
                           &out->original_max_position_embeddings));
    if (!(out->high_freq_factor > out->low_freq_factor) || !(out->low_freq_factor > 0.0f) ||
        out->original_max_position_embeddings <= 0) {
      return Invalid(ctx,
                     "llama3 needs 0 < low_freq_factor < high_freq_factor and "
                     "original_max_position_embeddings > 0");
    }
  }
  return absl::OkStatus();
}

// Checks one of a config group's `weights` / `input_activations` against W8A8 int8: 8-bit int,
// symmetric, the given strategy, dynamic as given.
absl::Status CheckInt8Args(const json& args, const std::string& ctx, const char* strategy,
                           bool dynamic) {
  if (!args.is_object()) return Invalid(ctx, "missing (W8A8 int8 needs it)");
  auto field = [&](const char* key) { return args.contains(key) ? args[key] : json(); };
  const bool ok = field("num_bits") == json(8) && field("type") == json("int") &&
                  field("symmetric") == json(true) && field("strategy") == json(strategy) &&
                  (field("dynamic").is_null() ? !dynamic : field("dynamic") == json(dynamic));
  if (!ok) {
    return Invalid(ctx, absl::StrCat("unsupported scheme ", Dump(args),
                                     " (supported: num_bits 8, type int, symmetric, strategy ",
                                     strategy, ", dynamic ", dynamic ? "true" : "false", ")"));
  }
  return absl::OkStatus();
}

// An `ignore` entry naming MoE router gates: "re:.*mlp.gate$" or "model.layers.<N>.mlp.gate".
bool IsRouterGateName(const json& name) {
  if (!name.is_string()) return false;
  const std::string s = name.get<std::string>();
  if (s == "re:.*mlp.gate$") return true;
  const std::string prefix = "model.layers.", suffix = ".mlp.gate";
  if (s.size() <= prefix.size() + suffix.size() || s.rfind(prefix, 0) != 0 ||
      s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string index = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
  return std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// The qwen3_moe fields (MoeConfig), checked against the layer count.
absl::Status ParseMoe(const json& j, const std::string& source, int64_t num_layers, MoeConfig* m) {
  RETURN_IF_ERROR(GetInt(j, source, "num_experts", true, &m->num_experts));
  RETURN_IF_ERROR(GetInt(j, source, "num_experts_per_tok", true, &m->num_experts_per_tok));
  RETURN_IF_ERROR(GetInt(j, source, "moe_intermediate_size", true, &m->moe_intermediate_size));
  RETURN_IF_ERROR(GetBool(j, source, "norm_topk_prob", &m->norm_topk_prob));
  RETURN_IF_ERROR(GetInt(j, source, "decoder_sparse_step", false, &m->decoder_sparse_step));
  if (m->num_experts <= 0 || m->num_experts > 4096) {
    return Invalid(source, absl::StrCat("num_experts must be in [1, 4096], got ", m->num_experts));
  }
  if (m->num_experts_per_tok <= 0 || m->num_experts_per_tok > m->num_experts) {
    return Invalid(source, absl::StrCat("num_experts_per_tok must be in [1, num_experts = ",
                                        m->num_experts, "], got ", m->num_experts_per_tok));
  }
  if (m->moe_intermediate_size <= 0 || m->moe_intermediate_size > (int64_t{1} << 24)) {
    return Invalid(source,
                   absl::StrCat("moe_intermediate_size out of range: ", m->moe_intermediate_size));
  }
  if (m->decoder_sparse_step <= 0) {
    return Invalid(
        source, absl::StrCat("decoder_sparse_step must be positive, got ", m->decoder_sparse_step));
  }
  auto it = j.find("mlp_only_layers");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array()) return Invalid(source, "field 'mlp_only_layers' must be a list");
    for (const json& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= num_layers) {
        return Invalid(source, absl::StrCat("mlp_only_layers entry ", Dump(v),
                                            " is not a layer index below ", num_layers));
      }
      m->mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

// quantization_config: absent or null, or compressed-tensors W8A8 int8 (model_config.h).
absl::Status ParseQuantization(const json& j, const std::string& source, bool* int8) {
  *int8 = false;
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const std::string ctx = source + " quantization_config";
  if (!it->is_object()) return Invalid(source, "field 'quantization_config' must be an object");
  const json& q = *it;
  const json method = q.contains("quant_method") ? q["quant_method"] : json();
  if (method != json("compressed-tensors")) {
    return Invalid(ctx, absl::StrCat("unsupported quant_method ", Dump(method),
                                     " (supported: compressed-tensors W8A8 int8)"));
  }
  const json format = q.contains("format") ? q["format"] : json();
  if (!q.contains("config_groups") || !q["config_groups"].is_object() ||
      q["config_groups"].empty()) {
    return Invalid(ctx, "needs a non-empty object 'config_groups'");
  }
  for (auto g = q["config_groups"].begin(); g != q["config_groups"].end(); ++g) {
    const std::string gctx = absl::StrCat(ctx, " config_groups.", g.key());
    if (!g->is_object()) return Invalid(gctx, "must be an object");
    const json group_format = g->contains("format") ? (*g)["format"] : format;
    if (group_format != json("int-quantized")) {
      return Invalid(gctx, absl::StrCat("unsupported format ", Dump(group_format),
                                        " (supported: int-quantized)"));
    }
    const json targets = g->contains("targets") ? (*g)["targets"] : json();
    if (targets != json::array({"Linear"})) {
      return Invalid(
          gctx, absl::StrCat("unsupported targets ", Dump(targets), " (supported: [\"Linear\"])"));
    }
    RETURN_IF_ERROR(CheckInt8Args(g->contains("weights") ? (*g)["weights"] : json(),
                                  gctx + " weights", "channel", false));
    RETURN_IF_ERROR(
        CheckInt8Args(g->contains("input_activations") ? (*g)["input_activations"] : json(),
                      gctx + " input_activations", "token", true));
  }
  if (q.contains("ignore") && !q["ignore"].is_null()) {
    if (!q["ignore"].is_array()) return Invalid(ctx, "'ignore' must be an array");
    for (const json& name : q["ignore"]) {
      if (name != json("lm_head") && !IsRouterGateName(name)) {
        return Invalid(ctx, absl::StrCat("unsupported ignore entry ", Dump(name),
                                         " (only lm_head and MoE router gates may stay "
                                         "unquantized)"));
      }
    }
  }
  *int8 = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJsonText(const std::string& text,
                                                      const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(source, "not valid JSON");
  if (!j.is_object()) return Invalid(source, "top level is not a JSON object");

  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return Invalid(source, "missing string 'model_type'");
  c.model_type = mt->get<std::string>();
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
      c.model_type != "qwen3_moe") {
    return Invalid(source, absl::StrCat("unsupported architecture: model_type '", c.model_type,
                                        "' (supported: llama, qwen2, qwen3, qwen3_moe)"));
  }
  RETURN_IF_ERROR(GetInt(j, source, "hidden_size", true, &c.hidden_size));
  RETURN_IF_ERROR(GetInt(j, source, "num_hidden_layers", true, &c.num_layers));
  RETURN_IF_ERROR(GetInt(j, source, "num_attention_heads", true, &c.num_heads));
  c.num_kv_heads = c.num_heads;
  RETURN_IF_ERROR(GetInt(j, source, "num_key_value_heads", false, &c.num_kv_heads));
  RETURN_IF_ERROR(GetInt(j, source, "intermediate_size", true, &c.intermediate_size));
  RETURN_IF_ERROR(GetInt(j, source, "vocab_size", true, &c.vocab_size));
  c.max_position_embeddings = 2048;
  RETURN_IF_ERROR(GetInt(j, source, "max_position_embeddings", false, &c.max_position_embeddings));
  RETURN_IF_ERROR(GetFloat(j, source, "rms_norm_eps", &c.rms_norm_eps));
  RETURN_IF_ERROR(GetFloat(j, source, "rope_theta", &c.rope_theta));
  RETURN_IF_ERROR(GetBool(j, source, "tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(ParseRopeScaling(j, source, &c.rope_scaling));
  RETURN_IF_ERROR(GetTokenIds(j, source, "eos_token_id", &c.eos_token_ids));
  std::vector<int32_t> bos;
  RETURN_IF_ERROR(GetTokenIds(j, source, "bos_token_id", &bos));
  if (!bos.empty()) c.bos_token_id = bos[0];
  RETURN_IF_ERROR(ParseQuantization(j, source, &c.int8_checkpoint));

  for (auto [name, v] : {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size},
                         {"num_hidden_layers", c.num_layers},
                         {"num_attention_heads", c.num_heads},
                         {"num_key_value_heads", c.num_kv_heads},
                         {"intermediate_size", c.intermediate_size},
                         {"vocab_size", c.vocab_size},
                         {"max_position_embeddings", c.max_position_embeddings}}) {
    if (v <= 0 || v > (int64_t{1} << 24)) {
      return Invalid(source, absl::StrCat("field '", name, "' out of range: ", v));
    }
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return Invalid(
        source, absl::StrCat("num_attention_heads (", c.num_heads,
                             ") is not a multiple of num_key_value_heads (", c.num_kv_heads, ")"));
  }
  c.head_dim = c.hidden_size / c.num_heads;
  RETURN_IF_ERROR(GetInt(j, source, "head_dim", false, &c.head_dim));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 1024) {
    return Invalid(source,
                   absl::StrCat("head_dim must be even and in (0, 1024], got ", c.head_dim));
  }
  if (!j.contains("head_dim") && c.hidden_size % c.num_heads != 0) {
    return Invalid(source, "hidden_size is not a multiple of num_attention_heads and no head_dim");
  }
  if (!(c.rms_norm_eps > 0.0f)) return Invalid(source, "rms_norm_eps must be positive");
  if (!(c.rope_theta > 0.0f)) return Invalid(source, "rope_theta must be positive");
  if (c.model_type == "qwen2") {
    c.attention_bias = true;
  } else {
    RETURN_IF_ERROR(GetBool(j, source, "attention_bias", &c.attention_bias));
  }
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  if (c.model_type == "qwen3_moe") RETURN_IF_ERROR(ParseMoe(j, source, c.num_layers, &c.moe));
  for (int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) return Invalid(source, absl::StrCat("eos_token_id ", id, " >= vocab"));
  }
  return c;
}

bool ModelConfig::IsMoeLayer(int64_t l) const {
  return moe.num_experts > 0 &&
         std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), l) ==
             moe.mlp_only_layers.end() &&
         (l + 1) % moe.decoder_sparse_step == 0;
}

absl::StatusOr<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return FromJsonText(ss.str(), path);
}

std::vector<float> RopeInvFrequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<float> inv(half);
  const float dim = static_cast<float>(config.head_dim);
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
    float exponent = static_cast<float>(2 * i) / dim;
    inv[i] = 1.0f / std::pow(config.rope_theta, exponent);
  }
  const RopeScaling& rs = config.rope_scaling;
  if (rs.type == RopeScaling::Type::kLinear) {
    for (float& f : inv) f /= rs.factor;
  } else if (rs.type == RopeScaling::Type::kLlama3) {
    const float old_len = static_cast<float>(rs.original_max_position_embeddings);
    const float low_wavelen = old_len / rs.low_freq_factor;
    const float high_wavelen = old_len / rs.high_freq_factor;
    for (float& f : inv) {
      const float wavelen = static_cast<float>(2.0 * std::numbers::pi) / f;
      float scaled = wavelen > low_wavelen ? f / rs.factor : f;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) {
        const float smooth =
            (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / rs.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

}  // namespace tandem::engine
