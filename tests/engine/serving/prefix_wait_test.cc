// Prefix wait (engine/prefix_wait.h): a waiting request whose leading prompt blocks a running
// request is still computing waits for them and reuses them instead of computing them again;
// unrelated requests pass it; an aborted leader releases it. Outputs are each request's alone,
// and every test ends with every block back in the pool. The shipped model's context is 512
// tokens, so a 400-token prompt prefilled in chunks of 48 stands for a long one.
#include "engine/prefix_wait.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

constexpr int kVocabLimit = 3000;  // the shipped model's ordinary tokens
constexpr int kBlock = 16;
constexpr int kPromptLen = 400;
// What the radix cache serves a 400-token prompt once it is cached: its full blocks short of the
// last token, which is always computed.
constexpr int64_t kSharedTokens = (kPromptLen - 1) / kBlock * kBlock;  // 384

std::unique_ptr<Scheduler> NewScheduler(const SchedulerConfig& config) {
  auto s = Scheduler::Create(config, &SharedModel(), &SharedTokenizer());
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// The request alone in a fresh scheduler without a prefix cache: the reference.
std::vector<int32_t> RunAlone(const std::vector<int32_t>& prompt, int max_new, float temperature,
                              uint64_t seed) {
  SchedulerConfig c = SmallConfig(128, kBlock);
  c.enable_radix_cache = false;
  auto s = NewScheduler(c);
  std::map<std::string, Collected> out;
  EXPECT_TRUE(s->Submit(MakeRequest("alone", prompt, max_new, &out, temperature, seed)).ok());
  RunToIdle(s.get());
  EXPECT_TRUE(out["alone"].last);
  return out["alone"].tokens;
}

// Steps to idle (bounded), checking the block invariant; returns the prefill tokens computed.
int64_t RunCountingPrefill(Scheduler* s) {
  int64_t prefill = 0;
  for (int i = 0; i < 10000 && s->HasWork(); ++i) {
    auto st = s->Step();
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) break;
    prefill += st->prefill_tokens;
    EXPECT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  }
  EXPECT_FALSE(s->HasWork());
  return prefill;
}

void ExpectAllBlocksFree(Scheduler* s) {
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks);
}

TEST(PrefixWaitTest, ABurstWithOnePromptComputesItOnceAndMatchesRunningAlone) {
  std::mt19937 rng(1);
  const std::vector<int32_t> prompt = RandomTokens(&rng, kPromptLen, kVocabLimit);
  auto s = NewScheduler(SmallConfig(256, kBlock));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("a", prompt, 6, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("b", prompt, 6, &out, 0.8f, 5)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("c", prompt, 6, &out, 0.9f, 9)).ok());

  ASSERT_TRUE(s->Step().ok());  // a's first chunk; b and c wait for the rest
  EXPECT_EQ(s->Load().running, 1);
  EXPECT_EQ(s->Load().waiting, 2);
  const int64_t prefill = 48 + RunCountingPrefill(s.get());

  // a computes the whole prompt, b and c only what follows the shared full blocks.
  EXPECT_EQ(prefill, kPromptLen + 2 * (kPromptLen - kSharedTokens));
  EXPECT_EQ(out["a"].final_output.cached_tokens, 0);
  EXPECT_EQ(out["b"].final_output.cached_tokens, kSharedTokens);
  EXPECT_EQ(out["c"].final_output.cached_tokens, kSharedTokens);
  EXPECT_EQ(s->counters().cached_prompt_tokens, 2 * kSharedTokens);
  EXPECT_EQ(out["a"].tokens, RunAlone(prompt, 6, 0.0f, 0));
  EXPECT_EQ(out["b"].tokens, RunAlone(prompt, 6, 0.8f, 5));
  EXPECT_EQ(out["c"].tokens, RunAlone(prompt, 6, 0.9f, 9));
  ExpectAllBlocksFree(s.get());
}

TEST(PrefixWaitTest, UnrelatedRequestsPassAWaitingOneAndAPrefixInADoneChunkIsNotWaitedFor) {
  std::mt19937 rng(2);
  const std::vector<int32_t> prompt = RandomTokens(&rng, kPromptLen, kVocabLimit);
  const std::vector<int32_t> unrelated = RandomTokens(&rng, 30, kVocabLimit);
  // Shares a's first 2 blocks and 8 more tokens, then differs.
  std::vector<int32_t> short_share(prompt.begin(), prompt.begin() + 2 * kBlock + 8);
  const std::vector<int32_t> tail = RandomTokens(&rng, 30, kVocabLimit);
  short_share.insert(short_share.end(), tail.begin(), tail.end());
  ASSERT_NE(short_share[2 * kBlock + 8], prompt[2 * kBlock + 8]);

  auto s = NewScheduler(SmallConfig(256, kBlock));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("a", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("follower", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("short", short_share, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("unrelated", unrelated, 4, &out)).ok());

  ASSERT_TRUE(s->Step().ok());  // a (48 tokens) and unrelated (30) run, the others wait
  EXPECT_EQ(s->Load().running, 2);
  EXPECT_EQ(s->Load().waiting, 2);
  ASSERT_TRUE(s->Step().ok());  // a's first chunk is cached: short takes its 2 blocks now
  EXPECT_EQ(s->Load().running, 3);
  EXPECT_EQ(s->Load().waiting, 1);
  RunCountingPrefill(s.get());

  EXPECT_EQ(out["follower"].final_output.cached_tokens, kSharedTokens);
  EXPECT_EQ(out["short"].final_output.cached_tokens, 2 * kBlock);
  EXPECT_EQ(out["unrelated"].final_output.cached_tokens, 0);
  const std::vector<int32_t> greedy = RunAlone(prompt, 4, 0.0f, 0);
  EXPECT_EQ(out["a"].tokens, greedy);
  EXPECT_EQ(out["follower"].tokens, greedy);
  EXPECT_EQ(out["short"].tokens, RunAlone(short_share, 4, 0.0f, 0));
  EXPECT_EQ(out["unrelated"].tokens, RunAlone(unrelated, 4, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PrefixWaitTest, AnAbortedLeaderReleasesItsFollowers) {
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = RandomTokens(&rng, kPromptLen, kVocabLimit);
  auto s = NewScheduler(SmallConfig(256, kBlock));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("a", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("b", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  ASSERT_TRUE(s->Step().ok());  // a has computed 96 tokens (6 blocks, cached); b waits
  EXPECT_EQ(s->Load().waiting, 1);
  ASSERT_TRUE(s->Abort("a", "client went away").ok());
  ASSERT_TRUE(s->Step().ok());  // b is admitted at once and reuses what a cached
  EXPECT_EQ(s->Load().running, 1);
  EXPECT_EQ(s->Load().waiting, 0);
  RunCountingPrefill(s.get());
  EXPECT_TRUE(out["a"].last);
  EXPECT_EQ(out["b"].final_output.cached_tokens, 96);
  EXPECT_EQ(out["b"].tokens, RunAlone(prompt, 4, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PrefixWaitTest, ALeaderPreemptedMidPrefillLeavesItsFollowerCorrect) {
  std::mt19937 rng(6);
  const std::vector<int32_t> prompt = RandomTokens(&rng, kPromptLen, kVocabLimit);
  const std::vector<int32_t> decoder = RandomTokens(&rng, 15, kVocabLimit);
  // 16-token chunks keep the leader prefilling while the decoder grows; one block beyond the
  // decoder's first and the leader's 25 runs out at the decoder's second new block, and the
  // leader (the youngest) is preempted with its prompt half computed.
  SchedulerConfig c = SmallConfig(27, kBlock);
  c.chunked_prefill_size = 16;
  c.max_prefill_tokens = 16;
  auto s = NewScheduler(c);
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("d", decoder, 40, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  ASSERT_TRUE(s->Submit(MakeRequest("a", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("b", prompt, 4, &out, 0.7f, 2)).ok());
  bool preempted_in_prefill = false;
  for (int i = 0; i < 1000 && s->HasWork() && s->counters().preemptions == 0; ++i) {
    ASSERT_TRUE(s->Step().ok());
    EXPECT_EQ(s->Load().waiting, s->counters().preemptions == 0 ? 1 : 2);  // b waits throughout
    preempted_in_prefill = s->counters().preemptions > 0 && out["a"].tokens.empty();
  }
  EXPECT_TRUE(preempted_in_prefill);
  RunCountingPrefill(s.get());  // a goes first again (its queue place), then b reuses its prompt
  EXPECT_EQ(out["b"].final_output.cached_tokens, kSharedTokens);
  EXPECT_EQ(out["d"].tokens, RunAlone(decoder, 40, 0.0f, 0));
  EXPECT_EQ(out["a"].tokens, RunAlone(prompt, 4, 0.0f, 0));
  EXPECT_EQ(out["b"].tokens, RunAlone(prompt, 4, 0.7f, 2));
  ExpectAllBlocksFree(s.get());
}

TEST(PrefixWaitTest, PrefillOnlyRequestsOfOneBurstComputeThePrefixOnce) {
  std::mt19937 rng(4);
  const std::vector<int32_t> prompt = RandomTokens(&rng, kPromptLen, kVocabLimit);
  auto s = NewScheduler(SmallConfig(256, kBlock));
  std::map<std::string, Collected> out;
  for (const char* rid : {"p0", "p1"}) {
    Request r = MakeRequest(rid, prompt, 4, &out);
    r.mode = RequestMode::kPrefillOnly;
    ASSERT_TRUE(s->Submit(std::move(r)).ok());
  }
  EXPECT_EQ(RunCountingPrefill(s.get()), kPromptLen + (kPromptLen - kSharedTokens));
  const std::vector<int32_t> first = RunAlone(prompt, 1, 0.0f, 0);
  for (const char* rid : {"p0", "p1"}) {
    EXPECT_TRUE(out[rid].kv_held) << rid;
    EXPECT_EQ(out[rid].tokens, first) << rid;
    ASSERT_TRUE(s->ReleaseHeld(rid).ok());
  }
  EXPECT_EQ(out["p1"].final_output.cached_tokens, kSharedTokens);
  ExpectAllBlocksFree(s.get());
}

TEST(PrefixWaitTest, WithoutARadixCacheNothingWaits) {
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 64, kVocabLimit);
  PrefixWait none(nullptr);
  none.AddRunning(prompt, 0);
  EXPECT_FALSE(none.Holds(prompt, 63));

  SchedulerConfig c = SmallConfig(64, kBlock);
  c.enable_radix_cache = false;
  auto s = NewScheduler(c);
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("a", prompt, 2, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("b", prompt, 2, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  EXPECT_EQ(s->Load().running, 2);
  RunCountingPrefill(s.get());
  EXPECT_EQ(out["a"].tokens, out["b"].tokens);
  ExpectAllBlocksFree(s.get());
}

}  // namespace
}  // namespace tandem::engine::testing
