#include "engine/weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/test_util.h"

namespace tandem::engine {
namespace {

using testing::TinyModelSpec;

absl::StatusOr<std::unique_ptr<Weights>> LoadDir(const std::string& dir) {
  auto c = ModelConfig::FromFile(dir + "/config.json");
  if (!c.ok()) return c.status();
  return Weights::Load(dir, *c);
}

// Element i (row-major order) of the member starting at row `first` of an [n, k] matrix stored in
// `layout` (read through CopyWeightRow, so any layout, TANDEM_GEMM=onednn's included).
bf16 At(const bf16* w, int64_t n, int64_t k, WeightLayout layout, size_t i, int64_t first = 0) {
  const auto index = static_cast<int64_t>(i);
  std::vector<bf16> row(static_cast<size_t>(k));
  CopyWeightRow(w, n, k, layout, first + index / k, row.data());
  return row[static_cast<size_t>(index % k)];
}

void ExpectMatches(const Weights& w, const std::map<std::string, std::vector<float>>& values,
                   const TinyModelSpec& s) {
  const auto& embed = values.at("model.embed_tokens.weight");
  for (size_t i = 0; i < embed.size(); ++i) {
    if (s.dtype == "F16") {  // fp16 storage rounds first, then the loader rounds to bf16
      ASSERT_NEAR(Bf16ToF32(At(w.embed, s.vocab, s.hidden, w.embed_layout, i)), embed[i],
                  1e-2f * std::abs(embed[i]) + 7e-5f)
          << i;
    } else {
      ASSERT_EQ(At(w.embed, s.vocab, s.hidden, w.embed_layout, i), F32ToBf16(embed[i])) << i;
    }
  }
  const auto& down = values.at("model.layers.1.mlp.down_proj.weight");
  for (size_t i = 0; i < down.size(); ++i) {
    // fp16 storage rounds first; compare with a tolerance there, exactly otherwise.
    if (s.dtype == "F16") {
      // (the test's fp16 writer flushes fp16 subnormals, hence the absolute term)
      const LayerWeights& L = w.layers[1];
      ASSERT_NEAR(Bf16ToF32(At(L.w_down, s.hidden, s.intermediate, L.w_down_layout, i)), down[i],
                  1e-2f * std::abs(down[i]) + 7e-5f);
    } else {
      const LayerWeights& L = w.layers[1];
      ASSERT_EQ(At(L.w_down, s.hidden, s.intermediate, L.w_down_layout, i), F32ToBf16(down[i]))
          << i;
    }
  }
  const auto& norm = values.at("model.norm.weight");
  for (size_t i = 0; i < norm.size(); ++i) {
    if (s.dtype != "F16") {
      ASSERT_EQ(w.final_norm[i], Bf16ToF32(F32ToBf16(norm[i])));
    }
  }
  if (s.tie) {
    EXPECT_EQ(w.lm_head, w.embed);
  } else {
    EXPECT_NE(w.lm_head, w.embed);
  }
}

TEST(WeightsTest, LoadsEveryDtypeAndShardedFiles) {
  for (const char* dtype : {"BF16", "F16", "F32"}) {
    for (int shards : {1, 3}) {
      for (const char* type : {"llama", "qwen2", "qwen3"}) {
        TinyModelSpec s;
        s.dtype = dtype;
        s.shards = shards;
        s.model_type = type;
        s.tie = shards == 3;
        const std::string dir =
            testing::MakeTempDir(std::string(dtype) + type + std::to_string(shards));
        auto values = testing::WriteTinyModel(dir, s);
        auto w = LoadDir(dir);
        ASSERT_TRUE(w.ok()) << w.status();
        ExpectMatches(**w, values, s);
        EXPECT_EQ((*w)->layers[0].bq.empty(), std::string(type) != "qwen2");
        EXPECT_EQ((*w)->layers[0].q_norm.empty(), std::string(type) != "qwen3");
      }
    }
  }
}

// fp16 special values (subnormals, infinities, NaN) widen exactly and then round to bf16.
TEST(WeightsTest, Fp16ValuesConvertExactly) {
  const std::string dir = testing::MakeTempDir("m");
  TinyModelSpec s;
  s.dtype = "F16";
  testing::WriteTinyModel(dir, s);
  const std::string path = dir + "/model.safetensors";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto header =
      ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  ASSERT_TRUE(header.ok());
  const uint16_t patterns[] = {0x0001, 0x03ff, 0x3c00, 0xfc00, 0x7e00, 0x8000, 0x7bff};
  const float expect[] = {std::ldexp(1.0f, -24),
                          1023 * std::ldexp(1.0f, -24),
                          1.0f,
                          -std::numeric_limits<float>::infinity(),
                          NAN,
                          -0.0f,
                          65504.0f};
  const size_t at = header->data_offset + header->tensors.at("model.norm.weight").begin;
  std::memcpy(&bytes[at], patterns, sizeof(patterns));
  testing::WriteFile(path, bytes);
  auto w = LoadDir(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  for (size_t i = 0; i < std::size(patterns); ++i) {
    if (std::isnan(expect[i])) {
      EXPECT_TRUE(std::isnan((*w)->final_norm[i]));
    } else {
      EXPECT_EQ((*w)->final_norm[i], Bf16ToF32(F32ToBf16(expect[i]))) << i;
      EXPECT_EQ(std::signbit((*w)->final_norm[i]), std::signbit(expect[i])) << i;
    }
  }
}

TEST(WeightsTest, MissingTensorNamesFileAndTensor) {
  const std::string dir = testing::MakeTempDir("m");
  TinyModelSpec s;
  testing::WriteTinyModel(dir, s);
  // Rewrite config as qwen2: its biases are not in the file.
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["model_type"] = "qwen2";
  testing::WriteFile(dir + "/config.json", j.dump());
  auto w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(WeightsTest, WrongShapeNamesTensorAndShapes) {
  const std::string dir = testing::MakeTempDir("m");
  TinyModelSpec s;
  testing::WriteTinyModel(dir, s);
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["intermediate_size"] = 80;
  testing::WriteFile(dir + "/config.json", j.dump());
  auto w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find("mlp.gate_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[96, 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[80, 64]"), std::string::npos) << msg;
}

TEST(WeightsTest, TruncatedFileIsAnError) {
  const std::string dir = testing::MakeTempDir("m");
  testing::WriteTinyModel(dir, TinyModelSpec());
  const std::string path = dir + "/model.safetensors";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  auto w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(WeightsTest, NoWeightsFileAndBadIndex) {
  const std::string dir = testing::MakeTempDir("m");
  testing::WriteTinyModel(dir, TinyModelSpec());
  std::filesystem::remove(dir + "/model.safetensors");
  auto w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("model.safetensors"), std::string::npos);
  testing::WriteFile(dir + "/model.safetensors.index.json",
                     R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("invalid shard"), std::string::npos)
      << w.status();
  testing::WriteFile(dir + "/model.safetensors.index.json", "{broken");
  w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("index.json"), std::string::npos);
}

TEST(WeightsTest, UnsupportedDtype) {
  const std::string dir = testing::MakeTempDir("m");
  testing::WriteTinyModel(dir, TinyModelSpec());
  std::map<std::string, testing::RawTensor> t;
  t["model.embed_tokens.weight"] = {"I32", {97, 64}, std::string(97 * 64 * 4, '\0')};
  testing::WriteFile(dir + "/model.safetensors", testing::SafetensorsBytes(t));
  auto w = LoadDir(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("unsupported dtype I32"), std::string::npos)
      << w.status();
}

// Matrices live in the loader's own buffer, not in the file: the weights stay valid after the
// files are gone, and each layer's q/k/v and gate/up rows are adjacent (one fused matrix each).
TEST(WeightsTest, MatricesAreCopiedAndFused) {
  for (const char* dtype : {"BF16", "F32"}) {
    TinyModelSpec s;
    s.dtype = dtype;
    s.model_type = "qwen2";
    const std::string dir = testing::MakeTempDir(std::string("fused") + dtype);
    auto values = testing::WriteTinyModel(dir, s);
    auto w = LoadDir(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    std::filesystem::remove_all(dir);  // the loaded weights must not depend on the files

    const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    const int64_t f = s.intermediate;
    for (int l = 0; l < s.layers; ++l) {
      const LayerWeights& L = (*w)->layers[l];
      EXPECT_EQ(L.wqkv, L.wq);
      EXPECT_EQ(L.w_gate_up, L.w_gate);
      if (L.wqkv_layout == WeightLayout::kOnednn) {  // blocks span members (weights.h)
        EXPECT_EQ(L.wk, nullptr);
        EXPECT_EQ(L.wv, nullptr);
        EXPECT_EQ(L.w_up, nullptr);
      } else {
        EXPECT_EQ(L.wk, L.wq + q * h);
        EXPECT_EQ(L.wv, L.wk + kv * h);
        EXPECT_EQ(L.w_up, L.w_gate + f * h);
      }
      EXPECT_EQ(reinterpret_cast<uintptr_t>(L.wqkv) % 64, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(L.w_gate_up) % 64, 0u);
      const std::string p = "model.layers." + std::to_string(l) + ".";
      struct Part {
        const char* name;
        const bf16* matrix;  // the fused matrix holding it
        int64_t n, first, k;
        WeightLayout layout;
      };
      const int64_t nqkv = q + 2 * kv;
      const Part parts[] = {{"self_attn.q_proj.weight", L.wqkv, nqkv, 0, h, L.wqkv_layout},
                            {"self_attn.k_proj.weight", L.wqkv, nqkv, q, h, L.wqkv_layout},
                            {"self_attn.v_proj.weight", L.wqkv, nqkv, q + kv, h, L.wqkv_layout},
                            {"self_attn.o_proj.weight", L.wo, h, 0, q, L.wo_layout},
                            {"mlp.gate_proj.weight", L.w_gate_up, 2 * f, 0, h, L.w_gate_up_layout},
                            {"mlp.up_proj.weight", L.w_gate_up, 2 * f, f, h, L.w_gate_up_layout},
                            {"mlp.down_proj.weight", L.w_down, h, 0, f, L.w_down_layout}};
      for (const Part& part : parts) {
        const auto& expect = values.at(p + part.name);
        for (size_t i = 0; i < expect.size(); ++i) {
          ASSERT_EQ(At(part.matrix, part.n, part.k, part.layout, i, part.first),
                    F32ToBf16(expect[i]))
              << p << part.name << " " << i;
        }
      }
    }
    const int64_t matrix_bytes =
        2 * (s.layers * (2 * q * h + 2 * kv * h + 3 * f * h) + 2 * int64_t{s.vocab} * h);
    EXPECT_GE((*w)->resident_bytes(), matrix_bytes);
    EXPECT_LE((*w)->huge_page_bytes(), (*w)->resident_bytes());
    const auto& lm = values.at("lm_head.weight");
    for (size_t i = 0; i < lm.size(); ++i) {
      ASSERT_EQ(At((*w)->lm_head, s.vocab, h, (*w)->lm_head_layout, i), F32ToBf16(lm[i])) << i;
    }
  }
}

}  // namespace
}  // namespace tandem::engine
