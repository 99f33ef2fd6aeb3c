// The workers' serving options as an SGLang launch_server line sets them: flags of the same
// concept land in ServingOptions, GPU tuning is accepted and noted, missing features are refused
// by name (engine/sglang_server_flags.h), and the KV cache is sized from --mem-fraction-static
// and --max-total-tokens.
#include "engine/serving_options.h"

#include <sstream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

struct Parsed {
  std::optional<int> exit_code;
  std::string error;
  std::vector<std::string> notes;
  ServingOptions options;
};

Parsed Parse(std::vector<std::string> args) {
  Parsed p;
  Flags flags("tandem-decode", "test");
  std::ostringstream out, err;
  flags.SetOutput(&out, &err);
  RegisterServingFlags(flags, &p.options);
  args.insert(args.begin(), {"--model-path", testing::ShippedModelDir()});
  p.exit_code = flags.Parse(args);
  p.error = flags.error();
  p.notes = flags.IgnoredNotes();
  return p;
}

TEST(ServingOptionsTest, SglangCpuLaunchLineMapsOntoTheOptions) {
  Parsed p = Parse({"--tp-size",
                    "1",
                    "--dp-size",
                    "1",
                    "--nnodes",
                    "1",
                    "--node-rank",
                    "0",
                    "--device",
                    "cpu",
                    "--dtype",
                    "bfloat16",
                    "--kv-cache-dtype",
                    "auto",
                    "--mem-fraction-static",
                    "0.8",
                    "--max-total-tokens",
                    "65536",
                    "--served-model-name",
                    "tiny",
                    "--quantization",
                    "w8a8_int8",
                    "--context-length",
                    "256",
                    "--max-running-requests",
                    "8",
                    "--random-seed",
                    "42"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.random_seed, 42);
  EXPECT_DOUBLE_EQ(p.options.mem_fraction_static, 0.8);
  EXPECT_EQ(p.options.max_total_tokens, 65536);
  EXPECT_EQ(p.options.served_model_name, "tiny");
  EXPECT_EQ(p.options.context_length, 256);
  EXPECT_EQ(p.options.max_running_requests, 8);
  EXPECT_EQ(*ServingQuantization(p.options), Quantization::kW8A8);
  EXPECT_TRUE(ValidateServingOptions(p.options).ok());
  EXPECT_THAT(p.notes, Contains("--tp-size 1: tensor parallelism 1: a worker is one process"));
  EXPECT_THAT(p.notes, Contains(HasSubstr("--dtype bfloat16: weights are bf16")));
  EXPECT_THAT(p.notes, Not(Contains(HasSubstr("--random-seed"))));
  // Not given: no seed, each worker draws a random sequence.
  EXPECT_FALSE(Parse({}).options.random_seed.has_value());
  EXPECT_TRUE(Parse({"--random-seed", "x"}).exit_code.has_value());
}

TEST(ServingOptionsTest, GpuTuningIsAcceptedAndNotedOnce) {
  Parsed p = Parse({"--trust-remote-code",
                    "--attention-backend",
                    "ascend",
                    "--cuda-graph-bs",
                    "8",
                    "16",
                    "--disable-cuda-graph",
                    "--watchdog-timeout",
                    "9000",
                    "--tokenizer-worker-num",
                    "4",
                    "--enable-dp-lm-head",
                    "--moe-a2a-backend",
                    "deepep",
                    "--deepep-mode",
                    "low_latency",
                    "--disable-shared-experts-fusion",
                    "--load-balance-method",
                    "decode_round_robin",
                    "--prefill-round-robin-balance",
                    "--dist-init-addr",
                    "10.0.0.1:10000"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.notes.size(), 13u);
  EXPECT_THAT(p.notes, Contains(HasSubstr("--trust-remote-code: ignored: Tandem runs no code")));
  EXPECT_THAT(p.notes, Contains(HasSubstr("--cuda-graph-bs 8 16: ignored: CUDA graphs")));
  // Nothing given, nothing noted.
  EXPECT_TRUE(Parse({}).notes.empty());
}

TEST(ServingOptionsTest, WhatTandemCannotHonourIsRefusedByName) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  } cases[] = {
      {{"--tp-size", "8"}, "--tp-size: '8': Tandem has no tensor parallelism"},
      {{"--tp", "2"}, "scale out by starting more workers"},
      {{"--dp", "2"}, "--dp-size: '2': Tandem has no data parallelism"},
      {{"--nnodes", "2"}, "--nnodes: '2': a worker spanning nodes is not supported"},
      {{"--node-rank", "1"}, "--node-rank: '1'"},
      {{"--device", "npu"}, "--device: 'npu': Tandem runs on the CPU only"},
      {{"--dtype", "float32"}, "--dtype: 'float32': Tandem computes with bf16 weights"},
      {{"--kv-cache-dtype", "fp8_e4m3"}, "--kv-cache-dtype: 'fp8_e4m3': the KV cache is bf16"},
      {{"--speculative-algorithm", "NEXTN"}, "--speculative-algorithm: Tandem has no speculative"},
      {{"--speculative-num-steps", "3"}, "--speculative-num-steps: Tandem has no speculative"},
      {{"--enable-dp-attention"}, "--enable-dp-attention: Tandem has no data-parallel attention"},
      {{"--lora-paths", "a", "b"}, "--lora-paths: Tandem serves no LoRA adapters"},
      {{"--cuda-graph-max-bs", "sixteen"}, "--cuda-graph-max-bs: expects an integer"},
      {{"--watchdog-timeout", "9e9e"}, "--watchdog-timeout: expects a number"},
      {{"--mem-fraction-static", "1.5"}, "--mem-fraction-static"},
      {{"--mem-fraction-static", "0.5", "--kv-cache-memory", "1GiB"}, "excludes"},
  };
  for (const Case& c : cases) {
    Parsed p = Parse(c.args);
    EXPECT_EQ(p.exit_code, 2) << c.args.front();
    EXPECT_THAT(p.error, HasSubstr(c.error));
  }
  Parsed modelslim = Parse({"--quantization", "modelslim"});
  ASSERT_FALSE(modelslim.exit_code.has_value()) << modelslim.error;
  absl::Status s = ValidateServingOptions(modelslim.options);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--quantization: unsupported quantization 'modelslim' (supported: w8a8, "
                        "w8a8_int8, compressed-tensors"));
}

TEST(ServingOptionsTest, MemFractionIsRamMinusWeightsForTheKvCache) {
  ServingOptions o;
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(*KvCacheBytes(o, 16 * kGiB, 4 * kGiB), 2 * kGiB);  // --kv-cache-memory's default
  o.mem_fraction_static = 0.5;
  EXPECT_EQ(*KvCacheBytes(o, 16 * kGiB, 3 * kGiB), 5 * kGiB);
  absl::StatusOr<int64_t> none = KvCacheBytes(o, 16 * kGiB, 8 * kGiB);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("--mem-fraction-static 0.5: 8.00 GiB of 16.00 GiB RAM leaves nothing"));
}

TEST(ServingOptionsTest, MaxTotalTokensCapsTheKvBlocksInWholePages) {
  ModelConfig model;
  model.num_layers = 2;
  model.num_kv_heads = 2;
  model.head_dim = 64;
  ServingOptions o;
  o.kv_cache_memory = "64MiB";
  o.page_size = 16;
  const int64_t per_block = 2 * KvCacheStorage::BlockBytes(16, 2, 64);
  EXPECT_EQ(SchedulerConfigFromOptions(o, model, 0)->num_blocks, (int64_t{64} << 20) / per_block);
  o.max_total_tokens = 1000;  // 62.5 pages
  EXPECT_EQ(SchedulerConfigFromOptions(o, model, 0)->num_blocks, 63);
  o.max_total_tokens = int64_t{1} << 40;  // more than the memory holds: the memory bounds it
  EXPECT_EQ(SchedulerConfigFromOptions(o, model, 0)->num_blocks, (int64_t{64} << 20) / per_block);
}

TEST(ServingOptionsTest, CompressedTensorsNeedsSuchACheckpoint) {
  ServingOptions o;
  o.kv_cache_memory = "4MiB";
  o.quantization = "compressed-tensors";
  EXPECT_EQ(*ServingQuantization(o), Quantization::kNone);  // the checkpoint's own int8
  o.model_path = std::string(TANDEM_SOURCE_DIR) + "/tests/engine/models/qwen3-tiny-w8a8";
  absl::StatusOr<std::unique_ptr<Engine>> int8 = Engine::Create(o);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_TRUE((*int8)->int8_linear());

  o.model_path = testing::ShippedModelDir();  // a bf16 checkpoint
  absl::StatusOr<std::unique_ptr<Engine>> bf16 = Engine::Create(o);
  ASSERT_FALSE(bf16.ok());
  EXPECT_THAT(std::string(bf16.status().message()),
              HasSubstr("--quantization compressed-tensors: "));
  EXPECT_THAT(std::string(bf16.status().message()), HasSubstr("use --quantization w8a8"));
}

}  // namespace
}  // namespace tandem::engine
