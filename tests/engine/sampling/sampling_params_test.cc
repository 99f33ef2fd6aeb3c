#include <cmath>
#include <limits>
#include <string>

#include "engine/sampler.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

constexpr int32_t kVocab = 100;

std::string Error(const SamplingParams& p, int32_t vocab = kVocab) {
  const absl::Status s = ValidateSamplingParams(p, vocab);
  if (s.ok()) return "OK";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Sampler::Create reports the same error.
  const auto sampler = Sampler::Create(p, vocab, {});
  EXPECT_FALSE(sampler.ok());
  if (!sampler.ok()) {
    EXPECT_EQ(sampler.status(), s);
  }
  return std::string(s.message());
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_EQ(Error(SamplingParams()), "OK");
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.repetition_penalty = 2.0f;
  p.max_new_tokens = 0;
  p.min_new_tokens = 0;
  p.stop = std::vector<std::string>(kMaxStopStrings, "x");
  p.stop_token_ids = {0, kVocab - 1};
  EXPECT_EQ(Error(p), "OK");
}

TEST(SamplingParamsTest, EveryParameterNamesItselfItsRangeAndTheValue) {
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    void (*set)(SamplingParams&);
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; },
       "sampling_params.temperature must be a finite number >= 0 (0 = greedy), got -0.5"},
      {[](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); },
       "sampling_params.temperature must be a finite number >= 0 (0 = greedy), got inf"},
      {[](SamplingParams& p) { p.top_k = -2; },
       "sampling_params.top_k must be -1 or 0 (no limit) or >= 1, got -2"},
      {[](SamplingParams& p) { p.top_p = 1.5f; },
       "sampling_params.top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "sampling_params.top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.min_p = -0.25f; },
       "sampling_params.min_p must be in [0, 1], got -0.25"},
      {[](SamplingParams& p) { p.min_p = std::nanf(""); },
       "sampling_params.min_p must be in [0, 1], got nan"},
      {[](SamplingParams& p) { p.frequency_penalty = 2.5f; },
       "sampling_params.frequency_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.presence_penalty = -3.0f; },
       "sampling_params.presence_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "sampling_params.repetition_penalty must be in (0, 2], got 0"},
      {[](SamplingParams& p) { p.repetition_penalty = 2.5f; },
       "sampling_params.repetition_penalty must be in (0, 2], got 2.5"},
      {[](SamplingParams& p) { p.max_new_tokens = -1; },
       "sampling_params.max_new_tokens must be >= 0, got -1"},
      {[](SamplingParams& p) { p.min_new_tokens = -1; },
       "sampling_params.min_new_tokens must be in [0, max_new_tokens] = [0, 128], got -1"},
      {[](SamplingParams& p) {
         p.max_new_tokens = 4;
         p.min_new_tokens = 5;
       },
       "sampling_params.min_new_tokens must be in [0, max_new_tokens] = [0, 4], got 5"},
      {[](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); },
       "sampling_params.stop must be at most 16 strings, got 17"},
      {[](SamplingParams& p) {
         p.stop = {"a", ""};
       },
       "sampling_params.stop[1] must be a non-empty string, got \"\""},
      {[](SamplingParams& p) { p.stop = {std::string(257, 'a')}; },
       "sampling_params.stop[0] must be at most 256 bytes long, got 257 bytes"},
      {[](SamplingParams& p) {
         p.stop = {"ok", "\xE4\xBD"};
       },
       "sampling_params.stop[1] must be valid UTF-8, got ill-formed bytes"},
      {[](SamplingParams& p) {
         p.stop_token_ids = {3, 100};
       },
       "sampling_params.stop_token_ids[1] must be in [0, vocab_size) = [0, 100), got 100"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; },
       "sampling_params.stop_token_ids[0] must be in [0, vocab_size) = [0, 100), got -1"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    EXPECT_EQ(Error(p), c.want);
  }
  SamplingParams p;
  p.top_p = nan;
  EXPECT_EQ(Error(p), "sampling_params.top_p must be in (0, 1], got nan");
  p = SamplingParams();
  p.frequency_penalty = inf;
  EXPECT_EQ(Error(p), "sampling_params.frequency_penalty must be in [-2, 2], got inf");
  EXPECT_EQ(Error(SamplingParams(), 0), "vocab_size must be >= 1, got 0");
}

}  // namespace
}  // namespace tandem::engine
