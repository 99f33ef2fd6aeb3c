#include "tests/engine/model/test_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/kernels/bf16.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::testing {

std::string SafetensorsBytes(const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
    data += t.bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + text + data;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string MakeTempDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tandem_model_test_" + std::to_string(::getpid())) /
                              (std::string(info->test_suite_name()) + "." + info->name()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

namespace {

uint16_t F32ToF16(float f) {  // round to nearest even; no denormal handling needed for tests
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(h);
}

RawTensor Encode(const std::vector<float>& v, std::vector<int64_t> shape,
                 const std::string& dtype) {
  RawTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (dtype == "F32") {
    t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = dtype == "BF16" ? F32ToBf16(v[i]) : F32ToF16(v[i]);
    t.bytes.assign(reinterpret_cast<const char*>(h.data()), h.size() * 2);
  }
  return t;
}

}  // namespace

std::map<std::string, std::vector<float>> WriteTinyModel(const std::string& dir,
                                                         const TinyModelSpec& s) {
  nlohmann::json config = {{"model_type", s.model_type},
                           {"hidden_size", s.hidden},
                           {"num_hidden_layers", s.layers},
                           {"num_attention_heads", s.heads},
                           {"num_key_value_heads", s.kv_heads},
                           {"intermediate_size", s.intermediate},
                           {"vocab_size", s.vocab},
                           {"max_position_embeddings", s.max_pos},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 10000.0},
                           {"tie_word_embeddings", s.tie},
                           {"eos_token_id", 2},
                           {"bos_token_id", 1}};
  if (s.model_type == "qwen3" || s.head_dim * s.heads != s.hidden) config["head_dim"] = s.head_dim;
  if (s.llama3_rope) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 8.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 64}};
  }
  WriteFile(dir + "/config.json", config.dump(2));

  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::vector<int64_t>> shapes;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = mean + scale * normal(rng);
    values[name] = std::move(v);
    shapes[name] = std::move(shape);
  };
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("model.embed_tokens.weight", {s.vocab, h}, 1.0f, 0.0f);
  add("model.norm.weight", {h}, 0.1f, 1.0f);
  if (!s.tie) add("lm_head.weight", {s.vocab, h}, 0.1f, 0.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {q, h}, 0.15f, 0.0f);
    add(p + "self_attn.k_proj.weight", {kv, h}, 0.15f, 0.0f);
    add(p + "self_attn.v_proj.weight", {kv, h}, 0.15f, 0.0f);
    add(p + "self_attn.o_proj.weight", {h, q}, 0.1f, 0.0f);
    if (s.model_type == "qwen2") {
      add(p + "self_attn.q_proj.bias", {q}, 0.1f, 0.0f);
      add(p + "self_attn.k_proj.bias", {kv}, 0.1f, 0.0f);
      add(p + "self_attn.v_proj.bias", {kv}, 0.1f, 0.0f);
    }
    if (s.model_type == "qwen3") {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.1f, 1.0f);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.1f, 1.0f);
    }
    add(p + "mlp.gate_proj.weight", {s.intermediate, h}, 0.1f, 0.0f);
    add(p + "mlp.up_proj.weight", {s.intermediate, h}, 0.1f, 0.0f);
    add(p + "mlp.down_proj.weight", {h, s.intermediate}, 0.1f, 0.0f);
  }
  std::vector<std::map<std::string, RawTensor>> shards(static_cast<size_t>(s.shards));
  nlohmann::json weight_map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [name, v] : values) {
    const size_t shard = i++ % shards.size();
    shards[shard][name] = Encode(v, shapes[name], s.dtype);
    weight_map[name] = "model-0000" + std::to_string(shard + 1) + "-of-0000" +
                       std::to_string(s.shards) + ".safetensors";
  }
  if (s.shards == 1) {
    WriteFile(dir + "/model.safetensors", SafetensorsBytes(shards[0]));
  } else {
    for (int k = 0; k < s.shards; ++k) {
      WriteFile(dir + "/model-0000" + std::to_string(k + 1) + "-of-0000" +
                    std::to_string(s.shards) + ".safetensors",
                SafetensorsBytes(shards[k]));
    }
    WriteFile(dir + "/model.safetensors.index.json",
              nlohmann::json({{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}})
                  .dump());
  }
  return values;
}

}  // namespace tandem::engine::testing
