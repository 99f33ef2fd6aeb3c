// W8A8 int8 through the model: the compressed-tensors config block, the int8 checkpoint loader
// against quantization at load, and batch independence (docs/numerics.md "W8A8 int8").
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/test_util.h"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;

std::string ModelDir(const std::string& name) {
  return (fs::path(TANDEM_SOURCE_DIR) / "tests/engine/models" / name).string();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Model> Load(const std::string& dir, Quantization q) {
  auto m = Model::Load(dir, {.threads = 2, .quantization = q});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Last-position logits of each prompt, all in one Forward call (one batch).
std::vector<std::vector<float>> Logits(Model& model,
                                       const std::vector<std::vector<int32_t>>& prompts) {
  BlockPool pool(64, 16);
  auto kv = model.CreateKvCache(pool.num_blocks(), 16);
  EXPECT_TRUE(kv.ok());
  std::vector<BlockTable> tables(prompts.size());
  std::vector<BlockPool::AppendRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back({&tables[i], static_cast<int64_t>(prompts[i].size())});
  }
  EXPECT_TRUE(pool.Commit(*pool.PlanAppend(reqs)).ok());
  std::vector<SequenceInput> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    batch.push_back({prompts[i], 0, tables[i].block_ids, true});
  }
  auto logits = model.Forward(batch, kv->get());
  EXPECT_TRUE(logits.ok()) << logits.status();
  const size_t V = static_cast<size_t>(model.config().vocab_size);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.emplace_back(logits->begin() + i * V, logits->begin() + (i + 1) * V);
  }
  return out;
}

void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(Int8ConfigTest, CompressedTensorsW8A8IsAcceptedAndOtherSchemesNamed) {
  const std::string path = ModelDir("qwen3-tiny-w8a8") + "/config.json";
  const nlohmann::json base = nlohmann::json::parse(ReadText(path));
  auto ok = ModelConfig::FromJsonText(base.dump(), path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->int8_checkpoint);
  nlohmann::json plain = base;
  plain.erase("quantization_config");
  EXPECT_FALSE(ModelConfig::FromJsonText(plain.dump(), path)->int8_checkpoint);
  plain["quantization_config"] = nullptr;
  EXPECT_FALSE(ModelConfig::FromJsonText(plain.dump(), path)->int8_checkpoint);

  struct Bad {
    const char* pointer;
    nlohmann::json value;
    const char* message;
  };
  const Bad bad[] = {
      {"/quantization_config/quant_method", "awq", "unsupported quant_method \"awq\""},
      {"/quantization_config/format", "float-quantized", "unsupported format"},
      {"/quantization_config/config_groups/group_0/input_activations/symmetric", false,
       "config_groups.group_0 input_activations: unsupported scheme"},
      {"/quantization_config/config_groups/group_0/input_activations/dynamic", false,
       "input_activations: unsupported scheme"},
      {"/quantization_config/config_groups/group_0/weights/strategy", "tensor",
       "weights: unsupported scheme"},
      {"/quantization_config/config_groups/group_0/weights/num_bits", 4,
       "weights: unsupported scheme"},
      {"/quantization_config/ignore", nlohmann::json::array({"lm_head", "model.layers.0.mlp"}),
       "unsupported ignore entry \"model.layers.0.mlp\""},
  };
  for (const Bad& b : bad) {
    nlohmann::json j = base;
    j[nlohmann::json::json_pointer(b.pointer)] = b.value;
    auto c = ModelConfig::FromJsonText(j.dump(), path);
    ASSERT_FALSE(c.ok()) << b.pointer;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(b.message), std::string::npos) << c.status();
  }
}

// tools/make_synthetic_model --w8a8 quantizes as the engine does at load (fp32 scales), so the
// checkpoint of qwen3-tiny's seed and `--quantization w8a8` on qwen3-tiny hold the same int8
// weights and give the same logits bit for bit.
TEST(Int8ModelTest, CheckpointLoadsAsQuantizationAtLoad) {
  auto from_bf16 = Load(ModelDir("qwen3-tiny"), Quantization::kW8A8);
  auto checkpoint = Load(ModelDir("qwen3-tiny-w8a8"), Quantization::kNone);
  auto bf16 = Load(ModelDir("qwen3-tiny"), Quantization::kNone);
  ASSERT_TRUE(from_bf16 && checkpoint && bf16);
  ASSERT_TRUE(from_bf16->weights().int8());
  ASSERT_TRUE(checkpoint->weights().int8());
  EXPECT_FALSE(bf16->weights().int8());
  const ModelConfig& c = bf16->config();
  for (size_t l = 0; l < from_bf16->weights().layers.size(); ++l) {
    const LayerWeights& a = from_bf16->weights().layers[l];
    const LayerWeights& b = checkpoint->weights().layers[l];
    EXPECT_EQ(a.wqkv, nullptr);
    EXPECT_EQ(a.w_down, nullptr);
    const std::pair<const Int8Matrix*, const Int8Matrix*> pairs[] = {
        {&a.wqkv_i8, &b.wqkv_i8},
        {&a.wo_i8, &b.wo_i8},
        {&a.w_gate_up_i8, &b.w_gate_up_i8},
        {&a.w_down_i8, &b.w_down_i8}};
    for (const auto& [x, y] : pairs) {
      ASSERT_EQ(x->n, y->n);
      ASSERT_EQ(x->k, y->k);
      EXPECT_EQ(std::memcmp(x->data, y->data, Int8PackedBytes(x->n, x->k)), 0) << "layer " << l;
      EXPECT_EQ(std::memcmp(x->scales, y->scales, x->n * sizeof(float)), 0) << "layer " << l;
      EXPECT_EQ(std::memcmp(x->row_sums, y->row_sums, x->n * sizeof(int32_t)), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(x->data) % 64, 0u);
    }
    EXPECT_EQ(a.wqkv_i8.n, c.q_dim() + 2 * c.kv_dim());
    EXPECT_EQ(a.w_gate_up_i8.n, 2 * c.intermediate_size);
  }
  // The step reads the int8 matrices and the bf16 lm_head: fewer bytes than bf16.
  EXPECT_LT(checkpoint->weights().matrix_bytes_per_step(), bf16->weights().matrix_bytes_per_step());
  EXPECT_EQ(checkpoint->weights().matrix_bytes_per_step(),
            from_bf16->weights().matrix_bytes_per_step());

  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 42, 7}, {1, 2, 3}};
  const auto x = Logits(*from_bf16, prompts);
  const auto y = Logits(*checkpoint, prompts);
  const auto z = Logits(*bf16, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ExpectBitwiseEqual(x[i], y[i]);
    EXPECT_NE(std::memcmp(x[i].data(), z[i].data(), x[i].size() * sizeof(float)), 0)
        << "int8 logits equal bf16 ones: the int8 path did not run";
  }
}

// A sequence's int8 logits do not depend on what shares its batch (nor on the row blocking of
// long prefills).
TEST(Int8ModelTest, BatchedLogitsEqualAlone) {
  auto model = Load(ModelDir("qwen3-tiny"), Quantization::kW8A8);
  ASSERT_TRUE(model);
  model->pool()->set_min_parallel_work(0);
  std::vector<int32_t> longer;
  for (int i = 0; i < 150; ++i) longer.push_back((i * 37 + 11) % 3000);
  const std::vector<std::vector<int32_t>> prompts = {{9, 8, 7}, longer, {42}};
  const auto batched = Logits(*model, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ExpectBitwiseEqual(batched[i], Logits(*model, {prompts[i]})[0]);
  }
}

// An int8 config over floating weights names the tensor and the dtype it wanted.
TEST(Int8ModelTest, Int8ConfigOverFloatWeightsIsRefused) {
  const std::string dir = testing::MakeTempDir("int8_config_bf16_weights");
  fs::copy_file(ModelDir("qwen3-tiny") + "/model.safetensors", dir + "/model.safetensors");
  fs::copy_file(ModelDir("qwen3-tiny-w8a8") + "/config.json", dir + "/config.json");
  auto m = Model::Load(dir, {.threads = 1});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("has dtype BF16, expected I8"), std::string::npos)
      << m.status();
}

TEST(Int8ModelTest, QuantizationNames) {
  EXPECT_EQ(*ParseQuantization(""), Quantization::kNone);
  EXPECT_EQ(*ParseQuantization("none"), Quantization::kNone);
  EXPECT_EQ(*ParseQuantization("w8a8"), Quantization::kW8A8);
  EXPECT_EQ(*ParseQuantization("w8a8_int8"), Quantization::kW8A8);
  EXPECT_EQ(ParseQuantization("fp8").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::engine
