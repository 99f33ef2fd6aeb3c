// Scheduler: determinism across batching, chunking, prefix-cache hits, preemption and
// reserve-then-admit; exact block accounting under random load; validation and aborts.
#include "engine/scheduler.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

constexpr int kVocabLimit = 3000;  // the shipped model's ordinary tokens

std::unique_ptr<Scheduler> NewScheduler(const SchedulerConfig& config,
                                        Model* model = &SharedModel()) {
  auto s = Scheduler::Create(config, model, &SharedTokenizer());
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Each request run on its own, in a fresh scheduler without a prefix cache, prefilled in one
// chunk: the reference every other arrangement must reproduce bit for bit.
std::vector<int32_t> RunAlone(const std::vector<int32_t>& prompt, int max_new, float temperature,
                              uint64_t seed, Model* model = &SharedModel()) {
  SchedulerConfig c = SmallConfig(64);
  c.enable_radix_cache = false;
  c.chunked_prefill_size = 512;
  c.max_prefill_tokens = 512;
  auto s = NewScheduler(c, model);
  std::map<std::string, Collected> out;
  EXPECT_TRUE(s->Submit(MakeRequest("alone", prompt, max_new, &out, temperature, seed)).ok());
  RunToIdle(s.get());
  EXPECT_TRUE(out["alone"].last);
  return out["alone"].tokens;
}

struct Case {
  std::vector<int32_t> prompt;
  int max_new;
  float temperature;
  uint64_t seed;
};

std::vector<Case> MixedCases(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> shared = RandomTokens(&rng, 100, kVocabLimit);
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    Case c;
    const int len = std::uniform_int_distribution<int>(1, 180)(rng);
    if (i % 4 == 0) {  // a quarter share a 100-token prefix
      c.prompt = shared;
      auto tail = RandomTokens(&rng, len % 40 + 1, kVocabLimit);
      c.prompt.insert(c.prompt.end(), tail.begin(), tail.end());
    } else {
      c.prompt = RandomTokens(&rng, len, kVocabLimit);
    }
    c.max_new = std::uniform_int_distribution<int>(1, 12)(rng);
    c.temperature = (i % 3 == 0) ? 0.8f : 0.0f;  // seeded sampling must be batch-invariant too
    c.seed = 1000 + static_cast<uint64_t>(i);
    cases.push_back(std::move(c));
  }
  return cases;
}

// Every request of a mixed batch (chunked prefills, decodes, prefix-cache hits, sampling) gets the
// tokens it gets alone, on `model`.
void ExpectBatchOf64MatchesAlone(Model* model) {
  const std::vector<Case> cases = MixedCases(64, 7);
  auto s = NewScheduler(SmallConfig(2048), model);
  std::map<std::string, Collected> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ASSERT_TRUE(s->Submit(MakeRequest(absl::StrCat("r", i), c.prompt, c.max_new, &out,
                                      c.temperature, c.seed))
                    .ok());
  }
  RunToIdle(s.get());
  EXPECT_GT(s->counters().cached_prompt_tokens, 0) << "shared prefixes should hit the cache";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Collected& got = out[absl::StrCat("r", i)];
    ASSERT_TRUE(got.last);
    EXPECT_EQ(got.tokens, RunAlone(c.prompt, c.max_new, c.temperature, c.seed, model))
        << "request " << i;
    ASSERT_TRUE(got.finish.has_value());
    EXPECT_EQ(got.finish->kind, FinishReason::Kind::kLength);
    EXPECT_EQ(got.final_output.completion_tokens, c.max_new);
    EXPECT_EQ(got.final_output.prompt_tokens, static_cast<int64_t>(c.prompt.size()));
  }
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks);
}

TEST(SchedulerTest, BatchOf64MixedRequestsMatchesEachRequestAlone) {
  ExpectBatchOf64MatchesAlone(&SharedModel());
}

// Qwen3-MoE: a request's tokens are routed with whichever others share its steps, and its experts
// run over their rows (engine/moe.h); neither may change its tokens. bf16 and int8 experts.
TEST(SchedulerTest, MoeBatchOf64MixedRequestsMatchesEachRequestAlone) {
  const std::string dir =
      (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/engine/models/qwen3-moe-tiny").string();
  for (Quantization q : {Quantization::kNone, Quantization::kW8A8}) {
    auto model = Model::Load(dir, {.threads = 2, .quantization = q});
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->pool()->set_min_parallel_work(0);
    ExpectBatchOf64MatchesAlone(model->get());
  }
}

TEST(SchedulerTest, PrefixCacheHitGivesIdenticalTokensAndCountsCachedTokens) {
  std::mt19937 rng(3);
  std::vector<int32_t> prefix = RandomTokens(&rng, 64, kVocabLimit);
  std::vector<int32_t> a = prefix, b = prefix;
  for (int32_t t : RandomTokens(&rng, 9, kVocabLimit)) a.push_back(t);
  for (int32_t t : RandomTokens(&rng, 5, kVocabLimit)) b.push_back(t);
  auto s = NewScheduler(SmallConfig(256));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("a", a, 8, &out)).ok());
  RunToIdle(s.get());
  ASSERT_TRUE(s->Submit(MakeRequest("b", b, 8, &out)).ok());
  RunToIdle(s.get());
  EXPECT_EQ(out["a"].final_output.cached_tokens, 0);
  EXPECT_EQ(out["b"].final_output.cached_tokens, 64);  // four whole 16-token blocks
  EXPECT_EQ(out["b"].tokens, RunAlone(b, 8, 0, 0));
  // The identical prompt again: everything but the last token's block comes from the cache.
  ASSERT_TRUE(s->Submit(MakeRequest("a2", a, 8, &out)).ok());
  RunToIdle(s.get());
  EXPECT_EQ(out["a2"].final_output.cached_tokens, 64);
  EXPECT_EQ(out["a2"].tokens, out["a"].tokens);
  EXPECT_EQ(out["a2"].logprobs, out["a"].logprobs);
}

TEST(SchedulerTest, PreemptionUnderMemoryPressureStillGivesIdenticalTokens) {
  // 24 blocks of 8 tokens: ~190 positions for 10 requests of up to ~60 tokens each: the pool
  // cannot hold them all as they grow, so some are preempted and recomputed.
  std::mt19937 rng(11);
  std::vector<Case> cases;
  for (int i = 0; i < 10; ++i) {
    cases.push_back({RandomTokens(&rng, 20 + 3 * i, kVocabLimit), 24, i % 2 ? 0.7f : 0.0f,
                     static_cast<uint64_t>(50 + i)});
  }
  SchedulerConfig c = SmallConfig(24, 8);
  auto s = NewScheduler(c);
  std::map<std::string, Collected> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(s->Submit(MakeRequest(absl::StrCat("p", i), cases[i].prompt, cases[i].max_new, &out,
                                      cases[i].temperature, cases[i].seed))
                    .ok());
  }
  RunToIdle(s.get());
  EXPECT_GT(s->counters().preemptions, 0) << "the test should exercise preemption";
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(out[absl::StrCat("p", i)].tokens,
              RunAlone(cases[i].prompt, cases[i].max_new, cases[i].temperature, cases[i].seed))
        << "request " << i;
  }
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks);
}

TEST(SchedulerTest, ReserveThenAdmitWithKvFromAnotherInstanceMatchesColocated) {
  const std::vector<Case> cases = MixedCases(12, 21);
  auto prefill = NewScheduler(SmallConfig(512));
  auto decode = NewScheduler(SmallConfig(512));
  std::map<std::string, Collected> pout, dout;
  std::map<std::string, std::vector<int32_t>> reserved;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string rid = absl::StrCat("d", i);
    Request d = MakeRequest(rid, cases[i].prompt, cases[i].max_new, &dout, cases[i].temperature,
                            cases[i].seed);
    d.mode = RequestMode::kDecodeOnly;
    d.callbacks.on_reserved = [&reserved, rid](const std::vector<int32_t>& blocks) {
      reserved[rid] = blocks;
    };
    ASSERT_TRUE(decode->Submit(std::move(d)).ok());
  }
  ASSERT_TRUE(decode->Step().ok());  // admission reserves blocks; nothing to compute yet
  ASSERT_EQ(reserved.size(), cases.size());
  EXPECT_EQ(decode->Load().awaiting_kv, static_cast<int>(cases.size()));
  ASSERT_TRUE(decode->CheckInvariants().ok());

  std::map<std::string, int64_t> copied_upto;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string rid = absl::StrCat("d", i);
    Request p = MakeRequest(rid, cases[i].prompt, cases[i].max_new, &pout, cases[i].temperature,
                            cases[i].seed);
    p.mode = RequestMode::kPrefillOnly;
    p.callbacks.on_kv_layer = [&, rid](const KvLayerEvent& e) {
      EXPECT_EQ(e.rid, rid);
      CopyLayer(*prefill->kv_storage(), e.block_ids, decode->kv_storage(), reserved[rid], e.layer,
                e.begin_pos, e.end_pos);
      if (e.layer == 0) copied_upto[rid] = e.end_pos;
    };
    ASSERT_TRUE(prefill->Submit(std::move(p)).ok());
  }
  RunToIdle(prefill.get());
  EXPECT_EQ(prefill->Load().held, static_cast<int>(cases.size()));
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string rid = absl::StrCat("d", i);
    const Collected& p = pout[rid];
    ASSERT_TRUE(p.last && p.kv_held) << rid;
    ASSERT_EQ(p.tokens.size(), 1u);
    EXPECT_EQ(copied_upto[rid], static_cast<int64_t>(cases[i].prompt.size()));
    if (i == 0) {
      // A first token whose alternatives name no token is refused without changing anything.
      const absl::Status bad =
          decode->CompleteTransfer(rid, {p.tokens[0], p.logprobs[0], {{-1, -0.5f}}});
      EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_EQ(decode->Load().awaiting_kv, static_cast<int>(cases.size()));
    }
    ASSERT_TRUE(decode->CompleteTransfer(rid, {p.tokens[0], p.logprobs[0], {}}).ok());
    ASSERT_TRUE(prefill->ReleaseHeld(rid).ok());
  }
  RunToIdle(decode.get());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string rid = absl::StrCat("d", i);
    EXPECT_EQ(dout[rid].tokens,
              RunAlone(cases[i].prompt, cases[i].max_new, cases[i].temperature, cases[i].seed))
        << rid;
  }
  ASSERT_TRUE(prefill->FlushCache().ok());
  EXPECT_EQ(prefill->Load().free_blocks, prefill->Load().total_blocks);
  EXPECT_EQ(decode->Load().free_blocks, decode->Load().total_blocks);
}

TEST(SchedulerTest, RandomArrivalsAbortsAndMemoryPressureKeepAccountingExact) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    SchedulerConfig c = SmallConfig(40, 8);
    c.enable_radix_cache = seed != 2;
    c.max_running_requests = 6;
    c.max_queued_requests = 12;
    auto s = NewScheduler(c);
    std::map<std::string, Collected> out;
    std::vector<std::string> live;
    int submitted = 0, refused = 0;
    std::vector<int32_t> common = RandomTokens(&rng, 40, kVocabLimit);
    for (int step = 0; step < 400; ++step) {
      const int arrivals = std::uniform_int_distribution<int>(0, 2)(rng);
      for (int a = 0; a < arrivals && submitted < 120; ++a) {
        std::vector<int32_t> prompt =
            RandomTokens(&rng, std::uniform_int_distribution<int>(1, 90)(rng), kVocabLimit);
        if (rng() % 3 == 0) prompt.insert(prompt.begin(), common.begin(), common.end());
        const std::string rid = absl::StrCat("x", submitted++);
        absl::Status st = s->Submit(MakeRequest(
            rid, prompt, std::uniform_int_distribution<int>(0, 30)(rng), &out, 0.5f, rng()));
        if (st.ok()) {
          live.push_back(rid);
        } else {
          // Only a full queue or a request larger than the whole pool may be refused.
          EXPECT_TRUE(absl::IsResourceExhausted(st) || absl::IsInvalidArgument(st)) << st;
          ++refused;
        }
      }
      if (!live.empty() && rng() % 7 == 0) {
        const size_t k = rng() % live.size();
        if (!out[live[k]].last) {
          ASSERT_TRUE(s->Abort(live[k], "test abort").ok());
          EXPECT_TRUE(out[live[k]].last);
          EXPECT_EQ(out[live[k]].finish->kind, FinishReason::Kind::kAbort);
        } else {
          EXPECT_TRUE(absl::IsNotFound(s->Abort(live[k], "late")));
        }
        live.erase(live.begin() + static_cast<long>(k));
      }
      if (s->HasWork()) {
        ASSERT_TRUE(s->Step().ok());
      }
      ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
      const SchedulerLoad l = s->Load();
      ASSERT_LE(l.running, c.max_running_requests);
    }
    RunToIdle(s.get());
    for (const auto& [rid, col] : out) {
      EXPECT_TRUE(col.last) << rid << " never ended";
    }
    EXPECT_GT(submitted - refused, 20);
    ASSERT_TRUE(s->FlushCache().ok());
    EXPECT_EQ(s->Load().free_blocks, s->Load().total_blocks) << "seed " << seed;
  }
}

TEST(SchedulerTest, AbortInEveryStateReturnsBlocksAtOnce) {
  auto s = NewScheduler(SmallConfig(64, 16));
  std::map<std::string, Collected> out;
  std::mt19937 rng(5);
  SchedulerConfig small = SmallConfig(64, 16);
  // Prefilling: a 300-token prompt takes several 48-token chunks.
  ASSERT_TRUE(
      s->Submit(MakeRequest("prefilling", RandomTokens(&rng, 300, kVocabLimit), 10, &out)).ok());
  ASSERT_TRUE(s->Step().ok());
  EXPECT_EQ(s->Load().running, 1);
  EXPECT_LT(s->Load().free_blocks, 64);
  ASSERT_TRUE(s->Abort("prefilling", "client went away").ok());
  EXPECT_TRUE(out["prefilling"].last);
  EXPECT_EQ(out["prefilling"].finish->ToJson()["type"], "abort");
  EXPECT_EQ(out["prefilling"].finish->message, "client went away");
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, 64);

  // Decoding.
  ASSERT_TRUE(
      s->Submit(MakeRequest("decoding", RandomTokens(&rng, 5, kVocabLimit), 50, &out)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->Step().ok());
  EXPECT_GE(out["decoding"].tokens.size(), 3u);
  ASSERT_TRUE(s->Abort("decoding", "stop").ok());
  EXPECT_EQ(out["decoding"].final_output.completion_tokens,
            static_cast<int64_t>(out["decoding"].tokens.size()));

  // Queued: never admitted (no step).
  ASSERT_TRUE(s->Submit(MakeRequest("queued", RandomTokens(&rng, 5, kVocabLimit), 5, &out)).ok());
  ASSERT_TRUE(s->Abort("queued", "never mind").ok());
  EXPECT_TRUE(out["queued"].tokens.empty());

  // Awaiting KV (decode side) and held (prefill side).
  Request d = MakeRequest("awaiting", RandomTokens(&rng, 40, kVocabLimit), 5, &out);
  d.mode = RequestMode::kDecodeOnly;
  ASSERT_TRUE(s->Submit(std::move(d)).ok());
  Request p = MakeRequest("held", RandomTokens(&rng, 40, kVocabLimit), 5, &out);
  p.mode = RequestMode::kPrefillOnly;
  ASSERT_TRUE(s->Submit(std::move(p)).ok());
  RunToIdle(s.get());
  EXPECT_EQ(s->Load().awaiting_kv, 1);
  EXPECT_EQ(s->Load().held, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s->FlushCache()));
  ASSERT_TRUE(s->Abort("awaiting", "prefill failed").ok());
  EXPECT_EQ(out["awaiting"].finish->kind, FinishReason::Kind::kAbort);
  const int outputs_before = out["held"].outputs;
  ASSERT_TRUE(s->Abort("held", "transfer failed").ok());
  EXPECT_EQ(out["held"].outputs, outputs_before) << "a held request already sent its last output";
  ASSERT_TRUE(s->CheckInvariants().ok());
  ASSERT_TRUE(s->FlushCache().ok());
  EXPECT_EQ(s->Load().free_blocks, 64);
  (void)small;
}

TEST(SchedulerTest, ValidationNamesTheProblem) {
  auto s = NewScheduler(SmallConfig(8, 16));  // 128 positions of KV
  std::map<std::string, Collected> out;
  auto message = [&](Request r) { return std::string(s->Submit(std::move(r)).message()); };
  EXPECT_NE(message(MakeRequest("", {1, 2}, 4, &out)).find("rid"), std::string::npos);
  EXPECT_NE(message(MakeRequest("e", {}, 4, &out)).find("empty"), std::string::npos);
  EXPECT_NE(message(MakeRequest("v", {1, 5000}, 4, &out)).find("input_ids[1] = 5000"),
            std::string::npos);
  EXPECT_NE(message(MakeRequest("c", std::vector<int32_t>(600, 1), 4, &out))
                .find("longer than the model's context length (512 tokens)"),
            std::string::npos);
  EXPECT_NE(message(MakeRequest("k", std::vector<int32_t>(100, 1), 100, &out)).find("KV blocks"),
            std::string::npos);
  Request bad = MakeRequest("t", {1, 2}, 4, &out);
  bad.sampling.top_p = 1.5f;
  EXPECT_NE(message(std::move(bad)).find("top_p"), std::string::npos);
  ASSERT_TRUE(s->Submit(MakeRequest("dup", {1, 2}, 4, &out)).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(s->Submit(MakeRequest("dup", {3}, 4, &out))));
  EXPECT_TRUE(out.count("") == 0 && out.count("e") == 0) << "refused requests emit nothing";
  RunToIdle(s.get());
  EXPECT_TRUE(out["dup"].last);
}

TEST(SchedulerTest, MaxNewTokensIsClampedToTheContextAndZeroOnlyPrefills) {
  auto s = NewScheduler(SmallConfig(64, 16));
  std::map<std::string, Collected> out;
  ASSERT_TRUE(s->Submit(MakeRequest("edge", std::vector<int32_t>(500, 7), 1000, &out)).ok());
  ASSERT_TRUE(s->Submit(MakeRequest("zero", {5, 6, 7}, 0, &out)).ok());
  RunToIdle(s.get());
  EXPECT_EQ(out["edge"].tokens.size(), 12u);  // 512 - 500
  EXPECT_EQ(out["edge"].finish->ToJson()["type"], "length");
  EXPECT_TRUE(out["zero"].tokens.empty());
  EXPECT_EQ(out["zero"].finish->ToJson()["length"], 0);
}

TEST(SchedulerTest, EosEndsARequestUnlessIgnored) {
  // The shipped model was trained on documents each followed by <|endoftext|> (id 3069), chat
  // answers by <|im_end|> (id 3071); generation_config.json lists both as EOS. Find the prompts of
  // a fixed list whose greedy continuation (EOS ignored) contains one, then check that without
  // ignore_eos exactly those stop at the first.
  const Tokenizer& tok = SharedTokenizer();
  const std::vector<std::string> prompts = {"A fool and his money are soon parted.",
                                            "You will be",
                                            "Q: Why did the chicken",
                                            "Never put off till tomorrow",
                                            "He who laughs last",
                                            "Love is",
                                            "The best way to",
                                            "Your lucky number is",
                                            "Beware of",
                                            "It is a"};
  auto s = NewScheduler(SmallConfig(512, 16));
  std::map<std::string, Collected> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(
        s->Submit(MakeRequest(absl::StrCat("ignore", i), tok.Encode(prompts[i]), 120, &out)).ok());
    Request r = MakeRequest(absl::StrCat("eos", i), tok.Encode(prompts[i]), 120, &out);
    r.sampling.ignore_eos = false;
    ASSERT_TRUE(s->Submit(std::move(r)).ok());
  }
  RunToIdle(s.get());
  int stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Collected& ign = out[absl::StrCat("ignore", i)];
    const Collected& eos = out[absl::StrCat("eos", i)];
    EXPECT_EQ(ign.tokens.size(), 120u);
    EXPECT_EQ(ign.finish->kind, FinishReason::Kind::kLength);
    auto first_eos = std::find_if(ign.tokens.begin(), ign.tokens.end(),
                                  [](int32_t t) { return t == 3069 || t == 3071; });
    if (first_eos == ign.tokens.end()) {
      EXPECT_EQ(eos.tokens, ign.tokens) << prompts[i];
      continue;
    }
    ++stopped;
    EXPECT_EQ(eos.tokens, std::vector<int32_t>(ign.tokens.begin(), first_eos + 1)) << prompts[i];
    ASSERT_EQ(eos.finish->kind, FinishReason::Kind::kStop);
    EXPECT_EQ(eos.finish->ToJson()["matched"], *first_eos);
    EXPECT_EQ(eos.text.find("<|"), std::string::npos) << "special tokens are skipped";
  }
  EXPECT_GE(stopped, 1) << "no prompt of the list reached EOS; the test lost its subject";
}

}  // namespace
}  // namespace tandem::engine::testing
