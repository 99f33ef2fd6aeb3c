// Dataset generation with the shipped model's tokenizer: exact token counts, reproducible seeds,
// shared prefixes, and clear errors for bad options and files.
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
                                               "/models/tandem-tiny-fortunes");
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

TEST_F(DatasetTest, RandomPromptsHaveExactTokenCounts) {
  for (double ratio : {0.0, 0.5, 1.0}) {
    RandomDatasetOptions options;
    options.num_prompts = 40;
    options.input_len = 64;
    options.output_len = 16;
    options.range_ratio = ratio;
    std::mt19937_64 rng(1);
    auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), 40u);
    for (const auto& row : *rows) {
      EXPECT_EQ(Count(row.prompt), row.prompt_len) << row.prompt;
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

TEST_F(DatasetTest, RandomIdsHaveExactTokenCounts) {
  RandomDatasetOptions options;
  options.num_prompts = 20;
  options.input_len = 100;
  options.output_len = 8;
  options.range_ratio = 1.0;
  options.ids = true;
  std::mt19937_64 rng(7);
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const auto& row : *rows) {
    EXPECT_EQ(row.prompt_len, 100);
    EXPECT_EQ(Count(row.prompt), 100);
    EXPECT_EQ(row.output_len, 8);
  }
}

TEST_F(DatasetTest, SameSeedSameDatasetOtherSeedOther) {
  RandomDatasetOptions options;
  options.num_prompts = 10;
  options.input_len = 32;
  options.output_len = 8;
  auto make = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
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

TEST_F(DatasetTest, SharedPrefixGroupsShareTheirSystemPrompt) {
  SharedPrefixOptions options;
  options.num_groups = 4;
  options.prompts_per_group = 5;
  options.system_prompt_len = 50;
  options.question_len = 10;
  options.output_len = 7;
  std::mt19937_64 rng(1);
  auto rows = GenerateSharedPrefixDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 20u);
  // Group prompts by their text before the last "\n\n" (the system prompt).
  std::map<std::string, int> groups;
  for (const auto& row : *rows) {
    EXPECT_EQ(row.output_len, 7);
    EXPECT_EQ(Count(row.prompt), row.prompt_len);
    size_t cut = row.prompt.rfind("\n\n");
    ASSERT_NE(cut, std::string::npos);
    std::string system_prompt = row.prompt.substr(0, cut);
    std::string question = row.prompt.substr(cut + 2);
    EXPECT_EQ(Count(system_prompt), 50) << system_prompt;
    ++groups[system_prompt];
  }
  ASSERT_EQ(groups.size(), 4u);
  for (const auto& [prefix, count] : groups) EXPECT_EQ(count, 5);
  // Shuffled: the first five rows are not all one group.
  std::set<std::string> first_five;
  for (int i = 0; i < 5; ++i)
    first_five.insert((*rows)[i].prompt.substr(0, (*rows)[i].prompt.rfind("\n\n")));
  EXPECT_GT(first_five.size(), 1u);
}

TEST_F(DatasetTest, TextOfExactLengthRepairsDrift) {
  // Ids that merge when re-encoded (single characters of a common word) still give the count.
  std::vector<int32_t> ids = tokenizer_->Encode("t h e t h e", false);
  std::vector<int32_t> pool = OrdinaryTokenIds(*tokenizer_);
  ASSERT_FALSE(pool.empty());
  std::mt19937_64 rng(1);
  for (int n : {1, 3, 17}) {
    auto text = TextOfExactLength(*tokenizer_, ids, n, pool, rng);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(Count(*text), n);
  }
}

TEST_F(DatasetTest, BadOptionsNameTheFlag) {
  RandomDatasetOptions options;
  options.input_len = 0;
  std::mt19937_64 rng(1);
  auto rows = GenerateRandomDataset(*tokenizer_, options, rng);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("--random-input-len"), std::string::npos);
  options.input_len = 8;
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
  std::mt19937_64 rng(1);
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

  // The random set can take its text from the file too.
  RandomDatasetOptions random;
  random.num_prompts = 5;
  random.input_len = 40;
  random.output_len = 4;
  random.range_ratio = 1.0;
  random.sharegpt_path = path;
  auto random_rows = GenerateRandomDataset(*tokenizer_, random, rng);
  ASSERT_TRUE(random_rows.ok()) << random_rows.status();
  for (const auto& row : *random_rows) EXPECT_EQ(Count(row.prompt), 40);
}

TEST_F(DatasetTest, BrokenShareGptFilesAreClearErrors) {
  std::mt19937_64 rng(1);
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
