// Sampling across the KV handoff, on real tandem-prefill / tandem-decode processes: a request's
// tokens (and logprobs) through the two gRPC legs are those a colocated worker (tandem-decode
// --local-prefill) gives it, for top logprobs, grammar constraints (also with a budget of a few
// tokens), and the sampling parameters that depend on the tokens generated so far (penalties,
// min_new_tokens) or bias the logits (logit_bias): the prefill worker samples the first token
// and the decode worker continues from it. One colocated worker and one prefill/decode pair
// serve every test of the suite; --random-seed's test starts workers of its own.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/handoff/pd_legs.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

class PdSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    colocated_ = StartWorker("colocated");
    prefill_ = StartWorker("prefill");
    decode_ = StartWorker("decode");
  }
  static void TearDownTestSuite() {
    colocated_.reset();
    prefill_.reset();
    decode_.reset();
  }
  static std::unique_ptr<WorkerProcess> colocated_, prefill_, decode_;
};

std::unique_ptr<WorkerProcess> PdSamplingTest::colocated_;
std::unique_ptr<WorkerProcess> PdSamplingTest::prefill_;
std::unique_ptr<WorkerProcess> PdSamplingTest::decode_;

// Top logprobs cross the handoff: the first token's alternatives come from the prefill worker
// (in its completion notice), the rest from the decode worker, and all of them are those the
// colocated worker reports for the same greedy request.
TEST_F(PdSamplingTest, TopLogprobsMatchTheColocatedWorker) {
  auto& colocated = colocated_;
  auto& prefill = prefill_;
  auto& decode = decode_;
  constexpr int kTop = 5;
  constexpr int kNew = 8;
  const std::vector<int32_t> prompt = Prompts(3)[2];
  DecodeResult pd = RunPd(prefill.get(), decode.get(), 9100, prompt, kNew, nullptr, kTop);
  proto::DecodeRequest dr;
  dr.set_rid("c-top");
  dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *dr.mutable_sampling_params() = GreedyParams(kNew);
  dr.set_return_logprob(true);
  dr.mutable_sampling_params()->set_top_logprobs_num(kTop);
  dr.set_stream(true);
  DecodeResult ref = Decode(colocated->stub.get(), dr);
  ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
  ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
  ASSERT_EQ(pd.tokens.size(), static_cast<size_t>(kNew));
  EXPECT_EQ(pd.tokens, ref.tokens);
  ASSERT_EQ(pd.logprobs.size(), pd.tokens.size());
  ASSERT_EQ(pd.top.size(), pd.tokens.size());
  ASSERT_EQ(ref.top.size(), ref.tokens.size());
  for (size_t i = 0; i < pd.tokens.size(); ++i) {
    ASSERT_EQ(pd.top[i].token_ids_size(), kTop) << i;
    ASSERT_EQ(pd.top[i].logprobs_size(), kTop) << i;
    // Greedy: the chosen token is the most likely one, with its own logprob.
    EXPECT_EQ(pd.top[i].token_ids(0), pd.tokens[i]) << i;
    EXPECT_EQ(pd.top[i].logprobs(0), pd.logprobs[i]) << i;
    EXPECT_THAT(pd.top[i].token_ids(), ::testing::ElementsAreArray(ref.top[i].token_ids())) << i;
    for (int j = 0; j < kTop; ++j) {
      // The same kernels on both sides; 1e-4 allows for a different reduction split only.
      EXPECT_NEAR(pd.top[i].logprobs(j), ref.top[i].logprobs(j), 1e-4) << i << "/" << j;
      if (j > 0) {
        EXPECT_LE(pd.top[i].logprobs(j), pd.top[i].logprobs(j - 1)) << i << "/" << j;
      }
    }
  }
  ExpectAllBlocksReturn(prefill.get());
  ExpectAllBlocksReturn(decode.get());
}

// Structured output across processes: the prefill worker's first token obeys the grammar and the
// decode worker continues it, giving the colocated worker's tokens exactly (temperature 1,
// seeded); the output is a string of the grammar's language.
TEST_F(PdSamplingTest, GrammarConstrainedRequestMatchesTheColocatedWorker) {
  auto& colocated = colocated_;
  auto& prefill = prefill_;
  auto& decode = decode_;
  const std::string regex = "(yes|no): [a-z]{2,10}\\.";
  proto::SamplingParams sampling;
  sampling.set_temperature(1.0f);
  sampling.set_seed(5);
  sampling.set_max_new_tokens(40);
  sampling.set_skip_special_tokens(true);
  sampling.set_regex(regex);
  const std::vector<int32_t> prompt = Prompts(2)[1];
  DecodeResult pd = RunPd(prefill.get(), decode.get(), 9200, prompt, 40, nullptr, 0, &sampling);
  proto::DecodeRequest dr;
  dr.set_rid("c-grammar");
  dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *dr.mutable_sampling_params() = sampling;
  dr.set_stream(true);
  DecodeResult ref = Decode(colocated->stub.get(), dr);
  ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
  ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
  EXPECT_EQ(pd.tokens, ref.tokens);
  auto tokenizer = engine::Tokenizer::FromModelDir(SourcePath("models/tandem-tiny-english"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::string bytes;
  for (int32_t id : pd.tokens) bytes += (*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/true);
  auto grammar = engine::grammar::CompileRegex(regex);
  ASSERT_TRUE(grammar.ok());
  auto matcher = engine::grammar::GrammarMatcher::Create(*grammar).value();
  EXPECT_TRUE(matcher.AcceptString(bytes) && matcher.IsComplete()) << bytes;
  ExpectAllBlocksReturn(prefill.get());
  ExpectAllBlocksReturn(decode.get());
}

// Length-aware closing across processes: json_object with a budget of a few tokens (the
// prefill worker's first token already under it) ends as a JSON object that parses, and the PD
// pair samples exactly the colocated worker's tokens.
TEST_F(PdSamplingTest, TightBudgetJsonObjectParsesAndMatchesTheColocatedWorker) {
  auto& colocated = colocated_;
  auto& prefill = prefill_;
  auto& decode = decode_;
  const std::vector<int32_t> prompt = Prompts(2)[0];
  auto tokenizer = engine::Tokenizer::FromModelDir(SourcePath("models/tandem-tiny-english"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  for (int max_new : {2, 5, 9}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(absl::StrCat("max_new_tokens ", max_new, " seed ", seed));
      proto::SamplingParams sampling;
      sampling.set_temperature(1.0f);
      sampling.set_seed(seed);
      sampling.set_max_new_tokens(max_new);
      sampling.set_skip_special_tokens(true);
      sampling.set_json_object(true);
      const uint64_t room = 9300 + static_cast<uint64_t>(max_new) * 10 + seed;
      DecodeResult pd =
          RunPd(prefill.get(), decode.get(), room, prompt, max_new, nullptr, 0, &sampling);
      proto::DecodeRequest dr;
      dr.set_rid(absl::StrCat("c-tight-", room));
      dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
      *dr.mutable_sampling_params() = sampling;
      dr.set_stream(true);
      DecodeResult ref = Decode(colocated->stub.get(), dr);
      ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
      ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
      EXPECT_EQ(pd.tokens, ref.tokens);
      EXPECT_LE(pd.tokens.size(), static_cast<size_t>(max_new));
      std::string bytes;
      for (int32_t id : pd.tokens) {
        bytes += (*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/true);
      }
      const nlohmann::json parsed =
          nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(parsed.is_object()) << bytes;
    }
  }
  ExpectAllBlocksReturn(prefill.get());
  ExpectAllBlocksReturn(decode.get());
}

// Penalties over the generated tokens, min_new_tokens and logit_bias: the prefill worker
// samples the first token under them and the decode worker continues, counting that token, so
// the pair gives the colocated worker's tokens exactly; and each parameter has its effect.
TEST_F(PdSamplingTest, PenaltiesMinTokensAndLogitBiasMatchTheColocatedWorker) {
  const std::vector<int32_t> prompt = Prompts(6)[5];
  // Seeded sampling under every penalty and a bias: the same draws on both paths.
  proto::SamplingParams mixed;
  mixed.set_temperature(1.0f);
  mixed.set_seed(11);
  mixed.set_max_new_tokens(24);
  mixed.set_ignore_eos(true);
  mixed.set_repetition_penalty(1.3f);
  mixed.set_frequency_penalty(0.5f);
  mixed.set_presence_penalty(0.25f);
  (*mixed.mutable_logit_bias())[32] = 3.0f;
  (*mixed.mutable_logit_bias())[13] = -100.0f;
  DecodeResult pd = RunPd(prefill_.get(), decode_.get(), 9500, prompt, 24, nullptr, 0, &mixed);
  DecodeResult ref = RunColocated(colocated_.get(), "c-mixed", prompt, mixed);
  ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
  ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
  ASSERT_EQ(pd.tokens.size(), 24u);
  EXPECT_EQ(pd.tokens, ref.tokens);
  EXPECT_THAT(pd.tokens, ::testing::Not(::testing::Contains(13)));  // banned by its bias

  // A +100 bias makes token 77 the greedy choice at every step, but min_new_tokens masks it as a
  // stop token for the first 3: the answer is 3 other tokens, then 77 ends it.
  constexpr int32_t kForced = 77;
  proto::SamplingParams forced = GreedyParams(16);
  forced.set_ignore_eos(false);
  forced.add_stop_token_ids(kForced);
  forced.set_min_new_tokens(3);
  (*forced.mutable_logit_bias())[kForced] = 100.0f;
  pd = RunPd(prefill_.get(), decode_.get(), 9501, prompt, 16, nullptr, 0, &forced);
  ref = RunColocated(colocated_.get(), "c-forced", prompt, forced);
  ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
  ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
  EXPECT_EQ(pd.tokens, ref.tokens);
  ASSERT_EQ(pd.tokens.size(), 4u);
  EXPECT_THAT(std::vector<int32_t>(pd.tokens.begin(), pd.tokens.begin() + 3),
              ::testing::Not(::testing::Contains(kForced)));
  EXPECT_EQ(pd.tokens[3], kForced);
  EXPECT_EQ(pd.last.finish_reason().type(), proto::FinishReason::STOP);

  // Without min_new_tokens the bias wins at once (the prefill worker's first token).
  forced.set_min_new_tokens(0);
  pd = RunPd(prefill_.get(), decode_.get(), 9502, prompt, 16, nullptr, 0, &forced);
  ASSERT_TRUE(pd.status.ok()) << pd.status.error_message();
  EXPECT_EQ(pd.tokens, std::vector<int32_t>{kForced});

  // A bias keyed outside the vocabulary is the worker's clear refusal, on either leg.
  proto::SamplingParams outside = GreedyParams(4);
  (*outside.mutable_logit_bias())[1 << 20] = 1.0f;
  DecodeResult refused = RunColocated(colocated_.get(), "c-outside", prompt, outside);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), ::testing::HasSubstr("logit_bias"));
  ExpectAllBlocksReturn(prefill_.get());
  ExpectAllBlocksReturn(decode_.get());
  ExpectAllBlocksReturn(colocated_.get());
}

// --random-seed: an unseeded request's seed is the next of the worker's seed sequence, so a worker
// restarted with the same seed and given the same requests in the same order samples the same
// tokens, another seed samples others, and a prefill/decode pair both started with the seed
// samples what a colocated worker with it does (one request at a time: each worker's k-th leg
// draws the k-th seed, and the decode worker continues the prefill worker's first token).
TEST(RandomSeedTest, RestartedWorkersWithTheSameSeedSampleTheSame) {
  proto::SamplingParams sampled = GreedyParams(12);
  sampled.set_temperature(1);
  const std::vector<std::vector<int32_t>> prompts = Prompts(3);
  auto colocated_run = [&](const std::string& seed) {
    std::unique_ptr<WorkerProcess> worker = StartWorker("colocated", {"--random-seed", seed});
    std::vector<std::vector<int32_t>> tokens;
    for (size_t i = 0; i < prompts.size(); ++i) {
      DecodeResult r = RunColocated(worker.get(), absl::StrCat("s", i), prompts[i], sampled);
      EXPECT_TRUE(r.status.ok()) << r.status.error_message();
      tokens.push_back(r.tokens);
    }
    return tokens;
  };
  const std::vector<std::vector<int32_t>> first = colocated_run("1234");
  EXPECT_EQ(colocated_run("1234"), first);
  EXPECT_NE(colocated_run("99"), first);

  std::unique_ptr<WorkerProcess> prefill = StartWorker("prefill", {"--random-seed", "1234"});
  std::unique_ptr<WorkerProcess> decode = StartWorker("decode", {"--random-seed", "1234"});
  std::vector<std::vector<int32_t>> pd;
  for (size_t i = 0; i < prompts.size(); ++i) {
    DecodeResult r =
        RunPd(prefill.get(), decode.get(), 9600 + i, prompts[i], 12, nullptr, 0, &sampled);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    pd.push_back(r.tokens);
  }
  EXPECT_EQ(pd, first);
}

}  // namespace
}  // namespace tandem::itest
