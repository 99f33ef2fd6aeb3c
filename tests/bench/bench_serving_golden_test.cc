// tandem-bench draws the datasets `python -m sglang.bench_serving` draws: lengths, token ids,
// ShareGPT order, shared-prefix prompts and Poisson gaps equal the golden file that
// tests/bench/bench_serving_golden.py computes with numpy and CPython's random.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/runner.h"
#include "bench/tandem_bench/upstream_random.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using Json = nlohmann::json;

const std::string kModel = std::string(TANDEM_SOURCE_DIR) + "/models/tandem-tiny-english";

class BenchServingGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = engine::Tokenizer::FromModelDir(kModel);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
    std::ifstream file(std::string(TANDEM_SOURCE_DIR) +
                       "/tests/bench/golden/bench_serving_datasets.json");
    std::stringstream text;
    text << file.rdbuf();
    golden_ = new Json(Json::parse(text.str()));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
  }
  static engine::Tokenizer* tokenizer_;
  static Json* golden_;
};
engine::Tokenizer* BenchServingGoldenTest::tokenizer_ = nullptr;
Json* BenchServingGoldenTest::golden_ = nullptr;

RandomDatasetOptions OptionsOf(const Json& c) {
  RandomDatasetOptions options;
  options.num_prompts = c["num_prompts"];
  options.input_len = c["input_len"];
  options.output_len = c["output_len"];
  options.range_ratio = c["range_ratio"];
  options.ids = true;
  options.vocab_size = c["vocab_size"];
  return options;
}

TEST_F(BenchServingGoldenTest, TheSeed004ShapeGivesTheSeedReportsTotals) {
  // ../shared/seeds/004: 200 random prompts, 64 in / 16 out, seed 1, range ratio 0:
  // "#Input tokens: 5661", "#Output tokens: 1653".
  BenchRandom rng(1);
  RandomDatasetOptions options;
  options.num_prompts = 200;
  options.input_len = 64;
  options.output_len = 16;
  options.range_ratio = 0.0;
  options.vocab_size = 3069;
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  int input = 0, output = 0;
  for (const auto& row : *rows) {
    input += row.prompt_len;
    output += row.output_len;
  }
  EXPECT_EQ(input, 5661);
  EXPECT_EQ(output, 1653);
}

TEST_F(BenchServingGoldenTest, RandomIdsLengthsIdsAndArrivals) {
  const Json& cases = (*golden_)["random_ids"];
  ASSERT_GE(cases.size(), 4u);
  for (const Json& c : cases) {
    if (!c.contains("prompt_ids")) continue;
    SCOPED_TRACE(c.dump().substr(0, 120));
    // The ids are the same whether they are sent as text or as input_ids; vocabularies other
    // than the tiny model's are checked as ids only.
    for (bool tokenize : {true, false}) {
      if (!tokenize && c["vocab_size"] != 3069) continue;
      RandomDatasetOptions options = OptionsOf(c);
      options.tokenize_prompt = tokenize;
      BenchRandom rng(c["seed"].get<uint32_t>());
      auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
      ASSERT_TRUE(rows.ok()) << rows.status();
      ASSERT_EQ(rows->size(), c["input_lens"].size());
      for (size_t i = 0; i < rows->size(); ++i) {
        const DatasetRow& row = (*rows)[i];
        ASSERT_EQ(row.prompt_len, c["input_lens"][i].get<int>()) << i;
        ASSERT_EQ(row.output_len, c["output_lens"][i].get<int>()) << i;
        ASSERT_EQ(row.prompt_ids, c["prompt_ids"][i].get<std::vector<int32_t>>()) << i;
        if (!tokenize) {
          EXPECT_EQ(row.prompt, tokenizer_->Decode(row.prompt_ids)) << i;
        }
      }
      if (!c.contains("intervals")) continue;
      const std::vector<double> arrivals =
          PoissonArrivals(options.num_prompts, c["request_rate"].get<double>(), rng.numpy);
      ASSERT_EQ(arrivals.size(), c["intervals"].size());
      for (size_t i = 1; i < arrivals.size(); ++i) {
        EXPECT_NEAR(arrivals[i] - arrivals[i - 1], c["intervals"][i - 1].get<double>(), 1e-12);
      }
    }
  }
}

TEST_F(BenchServingGoldenTest, ZeroOutputLengthDrawsNothing) {
  const Json& c = (*golden_)["random_ids"][3];
  ASSERT_EQ(c["output_len"], 0);
  for (const Json& len : c["output_lens"]) EXPECT_EQ(len, 0);
}

TEST_F(BenchServingGoldenTest, SixtyFourBitRangesTakeNumpysWidePath) {
  const Json& c = (*golden_)["random_ids"][4];
  NumpyRandomState numpy(c["seed"].get<uint32_t>());
  const int n = c["num_prompts"];
  // compute_random_lens with numpy's int64 (the C++ lengths are int: draw through RandInt).
  const int64_t full = c["input_len"];
  const auto low = static_cast<int64_t>(static_cast<double>(full) * c["range_ratio"].get<double>());
  EXPECT_EQ(numpy.RandInt(low, full + 1, static_cast<size_t>(n)),
            c["input_lens"].get<std::vector<int64_t>>());
  const std::vector<int> outputs = ComputeRandomLens(c["output_len"], c["range_ratio"], n, numpy);
  EXPECT_EQ(outputs, c["output_lens"].get<std::vector<int>>());
}

TEST_F(BenchServingGoldenTest, RandomFromShareGptShufflesAsPython) {
  const Json& c = (*golden_)["sharegpt_random"][0];
  const int conversations = c["conversations"];
  const std::vector<std::string> prompts = {
      "Luck", "A fortune", "Fools rush in", "Love is kind", "Tomorrow", "Good news", "Patience"};
  ASSERT_EQ(static_cast<int>(prompts.size()), conversations);
  Json file = Json::array();
  for (const auto& prompt : prompts) {
    file.push_back({{"conversations", {{{"value", prompt}}, {{"value", "answer"}}}}});
  }
  const std::string path = ::testing::TempDir() + "/golden_sharegpt.json";
  std::ofstream(path) << file.dump();

  RandomDatasetOptions options;
  options.num_prompts = c["num_prompts"];
  options.input_len = c["input_len"];
  options.output_len = c["output_len"];
  options.range_ratio = c["range_ratio"];
  options.sharegpt_path = path;
  BenchRandom rng(c["seed"].get<uint32_t>());
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), c["input_lens"].size());
  for (size_t i = 0; i < rows->size(); ++i) {
    const DatasetRow& row = (*rows)[i];
    const int source = c["shuffled_order"][i];
    const std::vector<int32_t> ids = tokenizer_->Encode(prompts[static_cast<size_t>(source)]);
    ASSERT_EQ(row.prompt_len, c["input_lens"][i].get<int>());
    ASSERT_EQ(row.output_len, c["output_lens"][i].get<int>());
    ASSERT_EQ(row.prompt_ids.size(), static_cast<size_t>(row.prompt_len));
    for (size_t j = 0; j < row.prompt_ids.size(); ++j) {
      ASSERT_EQ(row.prompt_ids[j], ids[j % ids.size()]) << i << " " << j;
    }
  }
}

TEST_F(BenchServingGoldenTest, SharedPrefixPromptsAndOrder) {
  for (const Json& c : (*golden_)["generated_shared_prefix"]) {
    SharedPrefixOptions options;
    options.num_groups = c["num_groups"];
    options.prompts_per_group = c["prompts_per_group"];
    options.system_prompt_len = c["system_prompt_len"];
    options.question_len = c["question_len"];
    options.output_len = c["output_len"];
    options.range_ratio = c["range_ratio"];
    BenchRandom rng(c["seed"].get<uint32_t>());
    auto rows = GenerateSharedPrefixDataset(*tokenizer_, options, rng);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), c["row_order"].size());
    const int per_group = options.prompts_per_group;
    for (size_t k = 0; k < rows->size(); ++k) {
      const int r = c["row_order"][k];
      const std::string system =
          tokenizer_->Decode(c["system_ids"][r / per_group].get<std::vector<int32_t>>());
      const std::string question =
          tokenizer_->Decode(c["question_ids"][r].get<std::vector<int32_t>>());
      EXPECT_EQ((*rows)[k].prompt, system + "\n\n" + question) << k;
      EXPECT_EQ((*rows)[k].output_len, c["output_lens"][r].get<int>()) << k;
    }
  }
}

}  // namespace
}  // namespace tandem::bench
