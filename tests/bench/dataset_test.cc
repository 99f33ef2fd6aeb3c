// Dataset generation with the shipped model's tokenizer: lengths in range, reproducible seeds,
// shared prefixes, and clear errors for bad options and files. (Equality with bench_serving's
// draws is bench_serving_golden_test.cc's.)
#include "bench/tandem_bench/dataset.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

class DatasetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = engine::Tokenizer::FromModelDir(std::string(TANDEM_SOURCE_DIR) +
                                               "/models/tandem-tiny-english");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static int Count(const std::string& text) {
    return static_cast<int>(tokenizer_->Encode(text, false).size());
  }
  static engine::Tokenizer* tokenizer_;
};
engine::Tokenizer* DatasetTest::tokenizer_ = nullptr;

RandomDatasetOptions Random(int n, int in, int out, double ratio) {
  RandomDatasetOptions options;
  options.num_prompts = n;
  options.input_len = in;
  options.output_len = out;
  options.range_ratio = ratio;
  options.vocab_size = 3069;
  return options;
}

TEST_F(DatasetTest, RandomLengthsFollowTheRatio) {
  for (double ratio : {0.0, 0.5, 1.0}) {
    BenchRandom rng(1);
    auto rows = GenerateRandomDataset(*tokenizer_, Random(40, 64, 16, ratio), rng);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), 40u);
    for (const auto& row : *rows) {
      EXPECT_EQ(row.prompt_ids.size(), static_cast<size_t>(row.prompt_len));
      EXPECT_EQ(row.prompt, tokenizer_->Decode(row.prompt_ids));
      EXPECT_GE(row.prompt_len, std::max(static_cast<int>(64 * ratio), 1));
      EXPECT_LE(row.prompt_len, 64);
      EXPECT_GE(row.output_len, std::max(static_cast<int>(16 * ratio), 1));
      EXPECT_LE(row.output_len, 16);
      if (ratio == 1.0) {
        EXPECT_EQ(row.prompt_len, 64);
      }
    }
  }
}

TEST_F(DatasetTest, ZeroOutputLengthAsksForNoToken) {
  BenchRandom rng(1);
  auto rows = GenerateRandomDataset(*tokenizer_, Random(10, 8, 0, 0.0), rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const auto& row : *rows) EXPECT_EQ(row.output_len, 0);
}

TEST_F(DatasetTest, TokenizedPromptsCarryIdsOnly) {
  RandomDatasetOptions options = Random(5, 12, 3, 1.0);
  options.ids = true;
  options.tokenize_prompt = true;
  BenchRandom rng(2);
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const auto& row : *rows) {
    EXPECT_TRUE(row.prompt.empty());
    ASSERT_EQ(row.prompt_ids.size(), 12u);
    for (size_t j = 1; j < row.prompt_ids.size(); ++j) {
      EXPECT_EQ(row.prompt_ids[j], (row.prompt_ids[j - 1] + 1) % 3069);
    }
  }
}

TEST_F(DatasetTest, SameSeedSameDatasetOtherSeedOther) {
  RandomDatasetOptions options = Random(10, 32, 8, 0.0);
  auto make = [&](uint32_t seed) {
    BenchRandom rng(seed);
    auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
    EXPECT_TRUE(rows.ok());
    std::vector<std::string> prompts;
    for (const auto& row : *rows)
      prompts.push_back(row.prompt + "|" + std::to_string(row.output_len));
    return prompts;
  };
  EXPECT_EQ(make(3), make(3));
  EXPECT_NE(make(3), make(4));
}

size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST_F(DatasetTest, SharedPrefixGroupsShareTheirSystemPrompt) {
  SharedPrefixOptions options;
  options.num_groups = 4;
  options.prompts_per_group = 5;
  options.system_prompt_len = 50;
  options.question_len = 10;
  options.output_len = 7;
  options.ordered = true;  // rows g * 5 + p
  BenchRandom rng(1);
  auto ordered = GenerateSharedPrefixDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_EQ(ordered->size(), 20u);
  for (int g = 0; g < 4; ++g) {
    const std::string& first = (*ordered)[static_cast<size_t>(g * 5)].prompt;
    for (int p = 0; p < 5; ++p) {
      const DatasetRow& row = (*ordered)[static_cast<size_t>(g * 5 + p)];
      EXPECT_EQ(row.output_len, 7);
      EXPECT_EQ(Count(row.prompt), row.prompt_len);
      // 50 random tokens in common (their text is far longer than 40 bytes) ...
      EXPECT_GT(CommonPrefix(first, row.prompt), 40u);
    }
    // ... and not with the next group's.
    if (g < 3) {
      EXPECT_LT(CommonPrefix(first, (*ordered)[static_cast<size_t>(g * 5 + 5)].prompt), 40u);
    }
  }
  // Without --gsp-ordered the same rows come shuffled.
  options.ordered = false;
  BenchRandom again(1);
  auto shuffled = GenerateSharedPrefixDataset(*tokenizer_, options, again);
  ASSERT_TRUE(shuffled.ok());
  std::multiset<std::string> a, b;
  for (const auto& row : *ordered) a.insert(row.prompt);
  for (const auto& row : *shuffled) b.insert(row.prompt);
  EXPECT_EQ(a, b);
  bool moved = false;
  for (size_t i = 0; i < 20; ++i) moved |= (*ordered)[i].prompt != (*shuffled)[i].prompt;
  EXPECT_TRUE(moved);
}

TEST_F(DatasetTest, BadOptionsNameTheFlag) {
  RandomDatasetOptions options = Random(4, 0, 4, 0.0);
  BenchRandom rng(1);
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--random-input-len"), std::string::npos);
  options.input_len = 8;
  options.output_len = -1;
  rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--random-output-len"), std::string::npos);
  options.output_len = 0;
  options.range_ratio = 1.5;
  rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--random-range-ratio"), std::string::npos);
  SharedPrefixOptions gsp;
  gsp.num_groups = -1;
  auto gsp_rows = GenerateSharedPrefixDataset(*tokenizer_, gsp, rng);
  ASSERT_FALSE(gsp_rows.ok());
  EXPECT_NE(gsp_rows.status().message().find("--gsp-num-groups"), std::string::npos);
}

std::string WriteTemp(const std::string& name, const std::string& contents) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

TEST_F(DatasetTest, ShareGptFileIsReadAndFiltered) {
  std::string path = WriteTemp("sharegpt.json", R"([
    {"conversations": [{"from": "human", "value": "Tell me about the luck of fools."},
                       {"from": "gpt", "value": "Fools have all the luck, and wise men the rest."}]},
    {"conversations": [{"from": "human", "value": "Hi"}]},
    {"conversation": [{"from": "human", "value": "What is love, in a fortune cookie?"},
                      {"from": "gpt", "value": "A warm feeling about a stranger's fortune."}]},
    {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}]}
  ])");
  ShareGptOptions options;
  options.path = path;
  options.num_prompts = 10;
  BenchRandom rng(1);
  auto rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);  // the one-turn and the too-short ones are dropped
  for (const auto& row : *rows) {
    EXPECT_EQ(Count(row.prompt), row.prompt_len);
    EXPECT_GE(row.output_len, 2);
  }
  options.fixed_output_len = 33;
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*rows)[0].output_len, 33);

  // The random set takes its tokens from the file's first turns, repeated to the length.
  RandomDatasetOptions random = Random(5, 40, 4, 1.0);
  random.sharegpt_path = path;
  auto random_rows = GenerateRandomDataset(*tokenizer_, random, rng);
  ASSERT_TRUE(random_rows.ok()) << random_rows.status();
  ASSERT_EQ(random_rows->size(), 3u);  // three conversations with two turns
  for (const auto& row : *random_rows) {
    EXPECT_EQ(row.prompt_len, 40);
    EXPECT_EQ(row.prompt_ids.size(), 40u);
  }
}

// bench_serving's sharegpt options: a suffix before "Assistant:", the chat template, and no
// fixed output length under 4.
TEST_F(DatasetTest, ShareGptSuffixAndChatTemplate) {
  std::string path = WriteTemp("sharegpt_suffix.json", R"([
    {"conversations": [{"value": "Tell me a fortune. Assistant:"},
                       {"value": "You will have a long and lucky life."}]}])");
  ShareGptOptions options;
  options.path = path;
  options.num_prompts = 1;
  options.prompt_suffix = " Be brief.";
  BenchRandom rng(1);
  auto rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].prompt, "Tell me a fortune.  Be brief.Assistant:");

  options.prompt_suffix.clear();
  options.apply_chat_template = true;
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[0].prompt,
            "<|im_start|>user\nTell me a fortune. Assistant:<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ((*rows)[0].prompt_len, static_cast<int>(tokenizer_->Encode((*rows)[0].prompt).size()));

  options.fixed_output_len = 3;
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--sharegpt-output-len"), std::string::npos);
}

TEST_F(DatasetTest, BrokenShareGptFilesAreClearErrors) {
  BenchRandom rng(1);
  ShareGptOptions options;
  auto rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--dataset-path"), std::string::npos);

  options.path = ::testing::TempDir() + "/does-not-exist.json";
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("does-not-exist.json"), std::string::npos);

  options.path = WriteTemp("truncated.json", R"([{"conversations": [{"value": "a")");
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("not valid JSON"), std::string::npos);

  options.path =
      WriteTemp("wrong-type.json", R"([{"conversations": [{"value": 3}, {"value": "b"}]}])");
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("no string 'value'"), std::string::npos);

  options.path = WriteTemp("object.json", R"({"conversations": []})");
  rows = LoadShareGptDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("array"), std::string::npos);
}

}  // namespace
}  // namespace tandem::bench
