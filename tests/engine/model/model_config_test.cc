#include "engine/model_config.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

constexpr char kQwen25[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
  "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
  "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
  "bos_token_id": 151643, "eos_token_id": 151645, "rope_scaling": null})";

TEST(ModelConfigTest, ParsesQwen2) {
  auto c = ModelConfig::FromJsonText(kQwen25, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->hidden_size, 896);
  EXPECT_EQ(c->num_layers, 24);
  EXPECT_EQ(c->num_heads, 14);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->intermediate_size, 4864);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{151645});
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfigTest, ParsesQwen3HeadDimAndEosList) {
  auto c = ModelConfig::FromJsonText(R"({"model_type": "qwen3", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "intermediate_size": 128, "vocab_size": 100, "eos_token_id": [5, 7]})",
                                     "q3.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(c->q_dim(), 128);
  EXPECT_EQ(c->kv_dim(), 64);
}

TEST(ModelConfigTest, Llama3RopeScaling) {
  auto c = ModelConfig::FromJsonText(R"({"model_type": "llama", "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128,
      "vocab_size": 100, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}})",
                                     "l3.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  std::vector<float> inv = RopeInvFrequencies(*c);
  ASSERT_EQ(inv.size(), 8u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // high frequency: unscaled
  // Lowest frequency: wavelength far above 8192 / low_freq_factor, divided by the factor.
  const float raw = 1.0f / std::pow(500000.0f, 14.0f / 16.0f);
  EXPECT_FLOAT_EQ(inv[7], raw / 8.0f);
}

TEST(ModelConfigTest, LinearRopeScaling) {
  auto c = ModelConfig::FromJsonText(R"({"model_type": "llama", "hidden_size": 32,
      "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
      "vocab_size": 10, "rope_scaling": {"type": "linear", "factor": 2.0}})",
                                     "lin.json");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> inv = RopeInvFrequencies(*c);
  EXPECT_FLOAT_EQ(inv[0], 0.5f);
}

void ExpectError(const std::string& json, const std::string& needle) {
  auto c = ModelConfig::FromJsonText(json, "/m/config.json");
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos)
      << c.status() << " should mention " << needle;
  EXPECT_NE(std::string(c.status().message()).find("/m/config.json"), std::string::npos);
}

TEST(ModelConfigTest, ClearErrors) {
  ExpectError(R"({"model_type": "gpt2", "hidden_size": 8})", "unsupported architecture");
  ExpectError(R"({"model_type": "gpt2", "hidden_size": 8})", "gpt2");
  ExpectError("{not json", "not valid JSON");
  ExpectError("[1, 2]", "not a JSON object");
  ExpectError(R"({"model_type": "llama"})", "hidden_size");
  ExpectError(R"({"model_type": "llama", "hidden_size": "64", "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8})",
              "must be an integer");
  ExpectError(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 3, "num_key_value_heads": 2, "intermediate_size": 8,
      "vocab_size": 8})",
              "not a multiple");
  ExpectError(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 0,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8})",
              "num_hidden_layers");
  ExpectError(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
              "unsupported rope_scaling type 'yarn'");
  ExpectError(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8,
      "rope_scaling": {"rope_type": "llama3", "factor": 4.0}})",
              "original_max_position_embeddings");
  ExpectError(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "eos_token_id": 9})",
              "eos_token_id");
}

TEST(ModelConfigTest, MissingFileIsNotFound) {
  auto c = ModelConfig::FromFile("/nonexistent/dir/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(c.status().message()).find("/nonexistent/dir/config.json"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::engine
