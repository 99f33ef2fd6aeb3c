// The mixed dataset (bench/tandem_bench/mixed_dataset.h): exact class proportions spread through
// the run, lengths per class, reproducible seeds, and clear errors for bad options.
#include "bench/tandem_bench/mixed_dataset.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

class MixedDatasetTest : public ::testing::Test {
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
  static MixedDatasetOptions Options(int n) {
    MixedDatasetOptions options;
    options.num_prompts = n;
    options.long_fraction = 0.2;
    options.long_input_len = 200;
    options.long_output_len = 4;
    options.short_input_min = 12;
    options.short_input_max = 24;
    options.short_output_len = 16;
    options.tokenize_prompt = true;
    options.vocab_size = 3069;
    return options;
  }
  static engine::Tokenizer* tokenizer_;
};
engine::Tokenizer* MixedDatasetTest::tokenizer_ = nullptr;

TEST_F(MixedDatasetTest, ExactProportionAndLengthsPerClass) {
  BenchRandom rng(1);
  auto rows = GenerateMixedDataset(*tokenizer_, Options(50), rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 50u);
  int longs = 0, first_long = -1, last_long = -1, short_min = 1000, short_max = 0;
  for (size_t i = 0; i < rows->size(); ++i) {
    const DatasetRow& row = (*rows)[i];
    EXPECT_TRUE(row.prompt.empty());  // tokenize_prompt: ids only
    ASSERT_EQ(row.prompt_ids.size(), static_cast<size_t>(row.prompt_len));
    for (size_t j = 1; j < row.prompt_ids.size(); ++j) {
      EXPECT_EQ(row.prompt_ids[j], (row.prompt_ids[j - 1] + 1) % 3069);
    }
    if (row.prompt_len == 200) {
      EXPECT_EQ(row.output_len, 4);
      ++longs;
      if (first_long < 0) first_long = static_cast<int>(i);
      last_long = static_cast<int>(i);
    } else {
      EXPECT_EQ(row.output_len, 16);
      EXPECT_GE(row.prompt_len, 12);
      EXPECT_LE(row.prompt_len, 24);
      short_min = std::min(short_min, row.prompt_len);
      short_max = std::max(short_max, row.prompt_len);
    }
  }
  EXPECT_EQ(longs, 10);  // round(50 * 0.2), not a draw per row
  // Shuffled: the long prompts are not the first (or last) ten rows.
  EXPECT_GT(last_long - first_long, 10);
  EXPECT_LT(short_min, short_max);  // short lengths vary
  EXPECT_EQ(MixedLongCount(7, 0.2), 1);
  EXPECT_EQ(MixedLongCount(8, 0.2), 2);
  EXPECT_EQ(MixedLongCount(8, 0.0), 0);
  EXPECT_EQ(MixedLongCount(8, 1.0), 8);
}

TEST_F(MixedDatasetTest, SameSeedSameRowsOtherSeedOther) {
  auto make = [&](uint32_t seed) {
    BenchRandom rng(seed);
    auto rows = GenerateMixedDataset(*tokenizer_, Options(30), rng);
    EXPECT_TRUE(rows.ok());
    std::vector<std::vector<int32_t>> ids;
    for (const auto& row : *rows) ids.push_back(row.prompt_ids);
    return ids;
  };
  EXPECT_EQ(make(5), make(5));
  EXPECT_NE(make(5), make(6));
}

TEST_F(MixedDatasetTest, TextRowsLeaveRoomForSpecialTokens) {
  MixedDatasetOptions options = Options(10);
  options.tokenize_prompt = false;
  options.long_fraction = 1.0;
  BenchRandom rng(1);
  auto rows = GenerateMixedDataset(*tokenizer_, options, rng);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const int special = static_cast<int>(tokenizer_->Encode("", true).size());
  for (const auto& row : *rows) {
    EXPECT_EQ(row.prompt_len, 200 - special);
    EXPECT_EQ(row.prompt, tokenizer_->Decode(row.prompt_ids));
  }
}

TEST_F(MixedDatasetTest, BadOptionsNameTheFlag) {
  auto error = [&](MixedDatasetOptions options) {
    BenchRandom rng(1);
    auto rows = GenerateMixedDataset(*tokenizer_, options, rng);
    EXPECT_FALSE(rows.ok());
    return std::string(rows.status().message());
  };
  MixedDatasetOptions o = Options(10);
  o.long_fraction = 1.5;
  EXPECT_NE(error(o).find("--mixed-long-fraction"), std::string::npos);
  o = Options(10);
  o.short_input_max = 5;
  EXPECT_NE(error(o).find("--mixed-short-input-max"), std::string::npos);
  o = Options(0);
  EXPECT_NE(error(o).find("--num-prompts"), std::string::npos);
  o = Options(10);
  o.long_input_len = 0;
  EXPECT_NE(error(o).find("--mixed-long-input-len"), std::string::npos);
}

}  // namespace
}  // namespace tandem::bench
