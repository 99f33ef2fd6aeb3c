// Prompt logprobs (SGLang's logprob_start_len / input_token_logprobs): the logprob the scheduler
// reports for a prompt token equals, bit for bit, the logprob it reported when it generated that
// very token (teacher forcing: the model's kernels are batch-invariant), whatever the prefill
// chunking, the per-step bound on scored rows, a prefix-cache hit before the scored positions,
// or the start position.
#include <map>
#include <optional>
#include <random>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

constexpr int kVocabLimit = 3000;  // the shipped model's ordinary tokens

struct Scored {
  int64_t start = -2;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  int64_t cached_tokens = -1;
  std::optional<FinishReason> finish;
};

std::unique_ptr<Scheduler> NewScheduler(int chunk) {
  SchedulerConfig c = SmallConfig(256);
  c.chunked_prefill_size = chunk;
  c.max_prefill_tokens = chunk;
  auto s = Scheduler::Create(c, &SharedModel(), &SharedTokenizer());
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Scores `prompt` from `start` without generating; the result of the request's outputs.
Scored Score(Scheduler* s, const std::string& rid, const std::vector<int32_t>& prompt,
             int64_t start, int top_n) {
  Scored got;
  Request r;
  r.rid = rid;
  r.input_ids = prompt;
  r.sampling.max_new_tokens = 0;
  r.sampling.top_logprobs_num = top_n;
  r.return_logprob = true;
  r.logprob_start_len = start;
  r.callbacks.on_output = [&got](const RequestOutput& out) {
    if (out.input_logprob_start >= 0) {
      got.start = out.input_logprob_start;
      got.logprobs = out.input_logprobs;
      got.top = out.input_top_logprobs;
    }
    if (out.last) {
      got.cached_tokens = out.cached_tokens;
      got.finish = out.finish;
    }
  };
  EXPECT_TRUE(s->Submit(std::move(r)).ok());
  RunToIdle(s);
  return got;
}

TEST(PromptLogprobsTest, ScoringAPromptReproducesTheLogprobsItsTokensWereGeneratedWith) {
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt =
      RandomTokens(&rng, 130, kVocabLimit);  // over two steps of score rows
  // Greedy generation: the logprob of each generated token under the model's distribution.
  auto gen = NewScheduler(512);
  std::map<std::string, Collected> out;
  ASSERT_TRUE(gen->Submit(MakeRequest("g", prompt, 12, &out)).ok());
  RunToIdle(gen.get());
  const Collected& g = out["g"];
  ASSERT_EQ(g.tokens.size(), 12u);
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), g.tokens.begin(), g.tokens.end());
  const size_t n = full.size();

  for (int chunk : {512, 16, 7}) {
    auto s = NewScheduler(chunk);
    const Scored all = Score(s.get(), "all", full, 0, 3);
    ASSERT_EQ(all.start, 0) << "chunk " << chunk;
    ASSERT_EQ(all.logprobs.size(), n - 1) << "chunk " << chunk;
    ASSERT_EQ(all.top.size(), n - 1);
    ASSERT_TRUE(all.finish.has_value());
    EXPECT_EQ(all.finish->kind, FinishReason::Kind::kLength);
    for (size_t i = 0; i < 12; ++i) {
      const size_t at = prompt.size() - 1 + i;  // scores full[at + 1] = generated token i
      EXPECT_EQ(all.logprobs[at], g.logprobs[i]) << "chunk " << chunk << ", token " << i;
      // Greedy: the generated token is the most likely one.
      EXPECT_EQ(all.top[at][0].token, g.tokens[i]);
      EXPECT_EQ(all.top[at][0].logprob, g.logprobs[i]);
    }
    // The same prompt again: its blocks are cached now, yet the scored positions are computed
    // (only the blocks before the start may come from the cache) and give the same bits.
    const Scored again = Score(s.get(), "again", full, 0, 3);
    EXPECT_EQ(again.cached_tokens, 0);
    EXPECT_EQ(again.logprobs, all.logprobs);
    const Scored tail = Score(s.get(), "tail", full, 40, 0);
    EXPECT_EQ(tail.start, 40);
    EXPECT_EQ(tail.cached_tokens, 32);  // two whole 16-token blocks before position 40
    ASSERT_EQ(tail.logprobs.size(), n - 41);
    EXPECT_TRUE(tail.top.empty());
    EXPECT_TRUE(std::equal(tail.logprobs.begin(), tail.logprobs.end(), all.logprobs.begin() + 40));
    // The default (-1): the last prompt token only, which has no logprob: nothing computed.
    const Scored last = Score(s.get(), "last", full, -1, 0);
    EXPECT_EQ(last.start, static_cast<int64_t>(n) - 1);
    EXPECT_TRUE(last.logprobs.empty());
    ASSERT_TRUE(s->FlushCache().ok());
    EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks);
  }
}

}  // namespace
}  // namespace tandem::engine::testing
