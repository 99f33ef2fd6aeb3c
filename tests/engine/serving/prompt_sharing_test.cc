// Prompt sharing (Request::share_prompt_with, parallel sampling): siblings share the leader's
// full prompt blocks once its prompt KV is complete, produce exactly what they would alone, and
// fall back to computing their prompt whenever sharing is not possible. Every test ends with
// every block back in the pool.
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

constexpr int kVocabLimit = 3000;  // the shipped model's ordinary tokens
constexpr int kBlock = 16;

std::unique_ptr<Scheduler> NewScheduler(const SchedulerConfig& config) {
  auto s = Scheduler::Create(config, &SharedModel(), &SharedTokenizer());
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

SchedulerConfig NoCacheConfig(int64_t num_blocks) {
  SchedulerConfig c = SmallConfig(num_blocks, kBlock);
  c.enable_radix_cache = false;  // reference counts then come from requests alone
  return c;
}

// The request alone in a fresh scheduler without a prefix cache: the reference.
std::vector<int32_t> RunAlone(const std::vector<int32_t>& prompt, int max_new, float temperature,
                              uint64_t seed) {
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  EXPECT_TRUE(s->Submit(MakeRequest("alone", prompt, max_new, &out, temperature, seed)).ok());
  RunToIdle(s.get());
  EXPECT_TRUE(out["alone"].last);
  return out["alone"].tokens;
}

Request Sibling(const std::string& rid, const std::string& leader, std::vector<int32_t> prompt,
                int max_new, std::map<std::string, Collected>* sink, float temperature = 0.0f,
                uint64_t seed = 0) {
  Request r = MakeRequest(rid, std::move(prompt), max_new, sink, temperature, seed);
  r.share_prompt_with = leader;
  return r;
}

// Blocks whose reference count is exactly `refs`.
int CountBlocksWithRefs(const Scheduler& s, int32_t refs) {
  int n = 0;
  for (int32_t b = 0; b < s.block_pool().num_blocks(); ++b)
    n += s.block_pool().ref_count(b) == refs;
  return n;
}

// Steps (bounded) until `rid` has produced a token.
void StepUntilFirstToken(Scheduler* s, std::map<std::string, Collected>* out,
                         const std::string& rid) {
  for (int i = 0; i < 100 && (*out)[rid].tokens.empty(); ++i) {
    ASSERT_TRUE(s->Step().ok());
    ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  }
  ASSERT_FALSE((*out)[rid].tokens.empty()) << rid << " produced no token";
}

void ExpectAllBlocksFree(Scheduler* s) {
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks);
}

TEST(PromptSharingTest, SiblingsShareTheLeadersPromptBlocksAndMatchRunningAlone) {
  std::mt19937 rng(1);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 70, kVocabLimit);  // 4 full blocks + 6
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 6, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("greedy", "L", prompt, 6, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("seeded", "L", prompt, 6, &out, 0.8f, 7)).ok());

  ASSERT_TRUE(s->Step().ok());  // the leader's first chunk; the siblings wait for its prompt
  EXPECT_EQ(s->Load().running, 1);
  EXPECT_EQ(s->Load().waiting, 2);
  StepUntilFirstToken(s.get(), &out, "L");
  // The leader's 5 blocks; its 4 full prompt blocks carry both siblings' references too.
  EXPECT_EQ(s->Load().free_blocks, 64 - 5);
  EXPECT_EQ(CountBlocksWithRefs(*s, 3), 4);
  EXPECT_EQ(s->Load().waiting, 2);

  ASSERT_TRUE(s->Step().ok());  // both siblings admitted: each allocates only its tail block
  EXPECT_EQ(s->Load().running, 3);
  EXPECT_EQ(s->Load().free_blocks, 64 - 5 - 2);
  EXPECT_EQ(CountBlocksWithRefs(*s, 3), 4);
  ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();

  RunToIdle(s.get());
  const std::vector<int32_t> greedy = RunAlone(prompt, 6, 0.0f, 0);
  EXPECT_EQ(out["L"].tokens, greedy);
  EXPECT_EQ(out["greedy"].tokens, greedy);
  EXPECT_EQ(out["seeded"].tokens, RunAlone(prompt, 6, 0.8f, 7));
  EXPECT_EQ(out["L"].final_output.cached_tokens, 0);
  EXPECT_EQ(out["greedy"].final_output.cached_tokens, 4 * kBlock);
  EXPECT_EQ(out["seeded"].final_output.cached_tokens, 4 * kBlock);
  EXPECT_EQ(s->counters().cached_prompt_tokens, 2 * 4 * kBlock);
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, ASiblingArrivingAfterThePromptCompletedSharesAtSubmit) {
  std::mt19937 rng(2);
  // 64 tokens: the last block is full but holds the last prompt token, which a sibling computes.
  const std::vector<int32_t> prompt = RandomTokens(&rng, 64, kVocabLimit);
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 8, &out)).ok());
  StepUntilFirstToken(s.get(), &out, "L");
  ASSERT_TRUE(s->Submit(Sibling("late", "L", prompt, 8, &out, 0.9f, 3)).ok());
  EXPECT_EQ(CountBlocksWithRefs(*s, 2), 3);  // (64 - 1) / 16 blocks
  RunToIdle(s.get());
  EXPECT_EQ(out["late"].final_output.cached_tokens, 3 * kBlock);
  EXPECT_EQ(out["late"].tokens, RunAlone(prompt, 8, 0.9f, 3));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, ALeaderFinishingInTheStepItsPromptCompletesStrandsNoSibling) {
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 70, kVocabLimit);
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 1, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("a", "L", prompt, 5, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("b", "L", prompt, 5, &out, 0.7f, 11)).ok());
  StepUntilFirstToken(s.get(), &out, "L");
  ASSERT_TRUE(out["L"].last);
  // The leader is gone; its full prompt blocks live on in the siblings' references.
  EXPECT_EQ(CountBlocksWithRefs(*s, 2), 4);
  EXPECT_EQ(s->Load().free_blocks, 64 - 4);
  RunToIdle(s.get());
  EXPECT_EQ(out["a"].final_output.cached_tokens, 4 * kBlock);
  EXPECT_EQ(out["b"].final_output.cached_tokens, 4 * kBlock);
  EXPECT_EQ(out["a"].tokens, RunAlone(prompt, 5, 0.0f, 0));
  EXPECT_EQ(out["b"].tokens, RunAlone(prompt, 5, 0.7f, 11));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, LeaderAbortedBeforeItsPromptCompletesLeavesSiblingsToComputeAlone) {
  std::mt19937 rng(4);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 200, kVocabLimit);  // several chunks
  auto s = NewScheduler(SmallConfig(64, kBlock));                            // with the radix cache
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("s", "L", prompt, 4, &out, 0.5f, 9)).ok());
  ASSERT_TRUE(s->Step().ok());  // one 48-token chunk of the leader
  EXPECT_EQ(s->Load().waiting, 1);
  ASSERT_TRUE(s->Abort("L", "client went away").ok());
  RunToIdle(s.get());
  ASSERT_TRUE(out["s"].finish.has_value());
  EXPECT_EQ(out["s"].finish->kind, FinishReason::Kind::kLength);
  EXPECT_EQ(out["s"].tokens, RunAlone(prompt, 4, 0.5f, 9));
  // The leader's finished chunk reached the radix cache; the sibling matched it as usual.
  EXPECT_EQ(out["s"].final_output.cached_tokens, 48);
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, SiblingAbortedWhileWaitingReturnsEveryBlock) {
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 100, kVocabLimit);
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 3, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("pending", "L", prompt, 3, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("holding", "L", prompt, 3, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  ASSERT_TRUE(s->Abort("pending", "never mind").ok());  // still waiting for the prompt KV
  EXPECT_TRUE(out["pending"].last);
  EXPECT_EQ(out["pending"].finish->kind, FinishReason::Kind::kAbort);
  StepUntilFirstToken(s.get(), &out, "L");
  EXPECT_EQ(CountBlocksWithRefs(*s, 2), 6);  // (100 - 1) / 16 shared blocks held by "holding"
  ASSERT_TRUE(s->Abort("holding", "never mind").ok());  // holding references, not admitted
  EXPECT_EQ(CountBlocksWithRefs(*s, 2), 0);
  EXPECT_EQ(s->Load().free_blocks, 64 - 7);  // the leader's blocks only
  RunToIdle(s.get());
  EXPECT_EQ(out["L"].tokens, RunAlone(prompt, 3, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, UnknownLeaderDifferentInputOrItselfComputesAlone) {
  std::mt19937 rng(6);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 50, kVocabLimit);
  std::vector<int32_t> other = prompt;
  other.back() = (other.back() + 1) % kVocabLimit;
  SchedulerConfig c = NoCacheConfig(64);
  c.chunked_prefill_size = c.max_prefill_tokens = 256;  // every prompt in the first step
  auto s = NewScheduler(c);
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("unknown", "nobody", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("other", "L", other, 4, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("self", "self", prompt, 4, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  EXPECT_EQ(s->Load().running, 4) << "none of them waits for a leader";
  RunToIdle(s.get());
  for (const char* rid : {"unknown", "other", "self"}) {
    EXPECT_EQ(out[rid].final_output.cached_tokens, 0) << rid;
    ASSERT_TRUE(out[rid].finish.has_value()) << rid;
    EXPECT_EQ(out[rid].finish->kind, FinishReason::Kind::kLength) << rid;
  }
  EXPECT_EQ(out["unknown"].tokens, RunAlone(prompt, 4, 0.0f, 0));
  EXPECT_EQ(out["other"].tokens, RunAlone(other, 4, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, PromptLogprobsLimitTheSharedBlocksToTheFirstScoredPosition) {
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 70, kVocabLimit);
  auto s = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  std::vector<float> scored;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 3, &out)).ok());
  Request sib = Sibling("scored", "L", prompt, 3, &out);
  sib.logprob_start_len = 20;  // positions from 20 on need their own logits: one block shared
  auto collect = sib.callbacks.on_output;
  sib.callbacks.on_output = [collect, &scored](const RequestOutput& o) {
    scored.insert(scored.end(), o.input_logprobs.begin(), o.input_logprobs.end());
    collect(o);
  };
  ASSERT_TRUE(s->Submit(std::move(sib)).ok());
  RunToIdle(s.get());
  EXPECT_EQ(out["scored"].final_output.cached_tokens, kBlock);
  EXPECT_EQ(scored.size(), prompt.size() - 1 - 20);
  EXPECT_EQ(out["scored"].tokens, RunAlone(prompt, 3, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, BlocksHeldForWaitingSiblingsNeverKeepTheQueueHeadOut) {
  // 10 blocks: the leader (5) finishes at its first token, its sibling then holds 4, and the
  // request queued between them needs all 10.
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 70, kVocabLimit);
  const std::vector<int32_t> big = RandomTokens(&rng, 150, kVocabLimit);
  auto s = NewScheduler(NoCacheConfig(10));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("L", prompt, 1, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("big", big, 10, &out)).ok());
  ASSERT_TRUE(s->Submit(Sibling("s", "L", prompt, 4, &out)).ok());
  StepUntilFirstToken(s.get(), &out, "L");
  ASSERT_TRUE(out["L"].last);
  EXPECT_EQ(CountBlocksWithRefs(*s, 1), 4) << "the sibling's references on the leader's blocks";
  EXPECT_EQ(s->Load().running, 0);
  EXPECT_TRUE(s->HasWork());
  ASSERT_TRUE(s->Step().ok());
  EXPECT_EQ(s->Load().running, 1) << "the head was admitted";
  EXPECT_EQ(CountBlocksWithRefs(*s, 1), 10);
  RunToIdle(s.get());
  for (const char* rid : {"L", "big", "s"}) {
    ASSERT_TRUE(out[rid].finish.has_value()) << rid;
    EXPECT_EQ(out[rid].finish->kind, FinishReason::Kind::kLength) << rid;
  }
  EXPECT_EQ(out["s"].final_output.cached_tokens, 0) << "gave its blocks up for the head";
  EXPECT_EQ(out["s"].tokens, RunAlone(prompt, 4, 0.0f, 0));
  EXPECT_EQ(out["big"].tokens, RunAlone(big, 10, 0.0f, 0));
  ExpectAllBlocksFree(s.get());
}

TEST(PromptSharingTest, RandomGroupsAbortsAndPreemptionKeepAccountingExactAndOutputsAlone) {
  int64_t preemptions = 0;
  for (uint32_t seed : {1u, 4u, 5u}) {
    std::mt19937 rng(seed);
    SchedulerConfig c = SmallConfig(24, 8);
    c.enable_radix_cache = seed != 1;
    c.max_running_requests = 6;
    auto s = NewScheduler(c);
    std::map<std::string, Collected> out;
    struct Submitted {
      std::vector<int32_t> prompt;
      int max_new;
      uint64_t seed;
    };
    std::map<std::string, Submitted> submitted;
    std::vector<std::string> live;
    int groups = 0;
    for (int step = 0; step < 300; ++step) {
      if (groups < 20 && rng() % 3 == 0) {
        const std::string leader = absl::StrCat("g", groups++);
        std::vector<int32_t> prompt =
            RandomTokens(&rng, std::uniform_int_distribution<int>(1, 60)(rng), kVocabLimit);
        const int n = std::uniform_int_distribution<int>(1, 4)(rng);
        for (int j = 0; j < n; ++j) {
          const std::string rid = j == 0 ? leader : absl::StrCat(leader, "_", j);
          const int max_new = std::uniform_int_distribution<int>(1, 20)(rng);
          const uint64_t sseed = rng();
          Request r = MakeRequest(rid, prompt, max_new, &out, 0.7f, sseed);
          if (j > 0) r.share_prompt_with = leader;
          ASSERT_TRUE(s->Submit(std::move(r)).ok()) << rid;
          submitted[rid] = {prompt, max_new, sseed};
          live.push_back(rid);
        }
      }
      if (!live.empty() && rng() % 9 == 0) {
        const size_t k = rng() % live.size();
        if (!out[live[k]].last) {
          ASSERT_TRUE(s->Abort(live[k], "test abort").ok());
        }
        live.erase(live.begin() + static_cast<long>(k));
      }
      if (s->HasWork()) {
        ASSERT_TRUE(s->Step().ok());
      }
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
    }
    RunToIdle(s.get());
    int shared = 0;
    for (const auto& [rid, sub] : submitted) {
      const Collected& got = out[rid];
      ASSERT_TRUE(got.last) << rid << " never ended";
      if (got.finish->kind == FinishReason::Kind::kAbort) continue;
      shared += got.final_output.cached_tokens > 0;
      EXPECT_EQ(got.tokens, RunAlone(sub.prompt, sub.max_new, 0.7f, sub.seed)) << rid;
    }
    EXPECT_GT(shared, 3) << "seed " << seed;
    preemptions += s->counters().preemptions;
    ExpectAllBlocksFree(s.get());
  }
  EXPECT_GT(preemptions, 0) << "the test should exercise preemption of leaders and siblings";
}

// Copies positions [begin, end) of one layer from one engine's cache into another's blocks.
void CopyLayer(const KvCacheStorage& from, std::span<const int32_t> from_blocks, KvCacheStorage* to,
               std::span<const int32_t> to_blocks, int64_t layer, int64_t begin, int64_t end) {
  const int64_t bs = from.block_size();
  const size_t row = static_cast<size_t>(from.num_kv_heads() * from.head_dim()) * sizeof(bf16);
  for (int64_t p = begin; p < end; ++p) {
    const int64_t fb = from_blocks[static_cast<size_t>(p / bs)];
    const int64_t tb = to_blocks[static_cast<size_t>(p / bs)];
    std::memcpy(to->K(layer, tb, p % bs), from.K(layer, fb, p % bs), row);
    std::memcpy(to->V(layer, tb, p % bs), from.V(layer, fb, p % bs), row);
  }
}

TEST(PromptSharingTest, DecodeOnlyLeaderSharesTheReceivedKvAfterCompleteTransfer) {
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 90, kVocabLimit);  // 5 full blocks + 10
  auto prefill = NewScheduler(SmallConfig(64, kBlock));
  auto decode = NewScheduler(SmallConfig(64, kBlock));  // radix cache on, as a decode daemon's
  std::map<std::string, Collected> pout, dout;
  std::vector<int32_t> reserved;
  Request d = MakeRequest("L", prompt, 6, &dout, 0.6f, 21);
  d.mode = RequestMode::kDecodeOnly;
  d.callbacks.on_reserved = [&reserved](const std::vector<int32_t>& blocks) { reserved = blocks; };
  ASSERT_TRUE(decode->Submit(std::move(d)).ok());
  ASSERT_TRUE(decode->Submit(Sibling("a", "L", prompt, 6, &dout)).ok());
  ASSERT_TRUE(decode->Submit(Sibling("b", "L", prompt, 6, &dout, 0.6f, 22)).ok());
  ASSERT_TRUE(decode->Step().ok());
  EXPECT_EQ(decode->Load().awaiting_kv, 1);
  EXPECT_EQ(decode->Load().waiting, 2);
  EXPECT_FALSE(decode->HasWork()) << "siblings wait for the transfer, not for a step";
  ASSERT_EQ(reserved.size(), 6u);

  Request p = MakeRequest("L", prompt, 6, &pout, 0.6f, 21);
  p.mode = RequestMode::kPrefillOnly;
  p.callbacks.on_kv_layer = [&](const KvLayerEvent& e) {
    CopyLayer(*prefill->kv_storage(), e.block_ids, decode->kv_storage(), reserved, e.layer,
              e.begin_pos, e.end_pos);
  };
  ASSERT_TRUE(prefill->Submit(std::move(p)).ok());
  RunToIdle(prefill.get());
  ASSERT_TRUE(pout["L"].kv_held);
  ASSERT_TRUE(decode->CompleteTransfer("L", {pout["L"].tokens[0], pout["L"].logprobs[0], {}}).ok());
  ASSERT_TRUE(prefill->ReleaseHeld("L").ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(decode->block_pool().ref_count(reserved[static_cast<size_t>(i)]), 3) << i;
  }
  EXPECT_EQ(decode->block_pool().ref_count(reserved[5]), 1);
  RunToIdle(decode.get());
  EXPECT_EQ(dout["L"].tokens, RunAlone(prompt, 6, 0.6f, 21));
  EXPECT_EQ(dout["a"].tokens, RunAlone(prompt, 6, 0.0f, 0));
  EXPECT_EQ(dout["b"].tokens, RunAlone(prompt, 6, 0.6f, 22));
  EXPECT_EQ(dout["a"].final_output.cached_tokens, 5 * kBlock);
  EXPECT_EQ(dout["b"].final_output.cached_tokens, 5 * kBlock);
  ExpectAllBlocksFree(decode.get());
  ExpectAllBlocksFree(prefill.get());
}

TEST(PromptSharingTest, DecodeOnlyLeaderAbortedBeforeItsKvArrivesLeavesSiblingsToComputeAlone) {
  std::mt19937 rng(10);
  const std::vector<int32_t> prompt = RandomTokens(&rng, 40, kVocabLimit);
  auto decode = NewScheduler(NoCacheConfig(64));
  std::map<std::string, Collected> out;
  Request d = MakeRequest("L", prompt, 4, &out);
  d.mode = RequestMode::kDecodeOnly;
  ASSERT_TRUE(decode->Submit(std::move(d)).ok());
  ASSERT_TRUE(decode->Submit(Sibling("s", "L", prompt, 4, &out, 0.4f, 5)).ok());
  ASSERT_TRUE(decode->Step().ok());
  EXPECT_FALSE(decode->HasWork());
  ASSERT_TRUE(decode->Abort("L", "prefill failed").ok());
  EXPECT_TRUE(decode->HasWork());
  RunToIdle(decode.get());
  EXPECT_EQ(out["s"].final_output.cached_tokens, 0);
  EXPECT_EQ(out["s"].tokens, RunAlone(prompt, 4, 0.4f, 5));
  ExpectAllBlocksFree(decode.get());
}

}  // namespace
}  // namespace tandem::engine::testing
