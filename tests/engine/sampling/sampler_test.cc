#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

Sampler Make(const SamplingParams& p, int32_t vocab, std::vector<int32_t> eos = {}) {
  auto s = Sampler::Create(p, vocab, std::move(eos));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

std::vector<int32_t> Generate(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto r = s.Sample(logits);
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r.ok() ? r->token : -1);
  }
  return out;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

double LogSoftmax(const std::vector<float>& row, int32_t token) {
  const double m = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - m);
  return static_cast<double>(row[static_cast<size_t>(token)]) - m - std::log(sum);
}

TEST(SamplerTest, GreedyPicksLowestIndexOfMax) {
  Sampler s = Make(Greedy(), 4);
  EXPECT_EQ(Generate(s, {0.5f, 2.0f, -1.0f, 2.0f}, 1), std::vector<int32_t>{1});
  EXPECT_EQ(s.num_generated(), 1);
}

TEST(SamplerTest, TopKOfOneIsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  p.seed = 5;
  Sampler s = Make(p, 4);
  EXPECT_EQ(Generate(s, {0.5f, 2.0f, 1.9f, 2.0f}, 20), std::vector<int32_t>(20, 1));
}

TEST(SamplerTest, GreedyWithFrequencyPenalty) {
  SamplingParams p = Greedy();
  p.frequency_penalty = 0.15f;
  Sampler s = Make(p, 3);
  // token 0: 1.0, 0.85, 0.70 ...; token 1: 0.8, 0.65, ...
  EXPECT_EQ(Generate(s, {1.0f, 0.8f, 0.0f}, 5), (std::vector<int32_t>{0, 0, 1, 0, 1}));
}

TEST(SamplerTest, GreedyWithPresencePenalty) {
  SamplingParams p = Greedy();
  p.presence_penalty = 0.6f;
  Sampler s = Make(p, 3);
  // once seen, 0 -> 0.4 and 1 -> -0.1; 2 stays 0.3: the penalty does not grow with the count.
  EXPECT_EQ(Generate(s, {1.0f, 0.5f, 0.3f}, 4), (std::vector<int32_t>{0, 1, 0, 0}));
}

TEST(SamplerTest, GreedyWithRepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = Greedy();
  p.repetition_penalty = 1.25f;
  Sampler s = Make(p, 3);
  // 2.0 -> 1.6 once seen; 1.8 -> 1.44; -0.5 stays (never chosen)
  EXPECT_EQ(Generate(s, {2.0f, 1.8f, -0.5f}, 3), (std::vector<int32_t>{0, 1, 0}));

  Sampler neg = Make(p, 3);
  neg.Observe(0);  // -1.0 -> -1.25 < -1.2
  EXPECT_EQ(Generate(neg, {-1.0f, -1.2f, -3.0f}, 1), std::vector<int32_t>{1});
  EXPECT_EQ(neg.num_generated(), 2);
}

TEST(SamplerTest, RepetitionPenaltyBelowOneFavoursSeenTokens) {
  SamplingParams p = Greedy();
  p.repetition_penalty = 0.5f;
  Sampler s = Make(p, 2);
  s.Observe(1);  // 0.6 -> 1.2 beats 1.0
  EXPECT_EQ(Generate(s, {1.0f, 0.6f}, 3), (std::vector<int32_t>{1, 1, 1}));
}

TEST(SamplerTest, ObservedTokensCountForPenalties) {
  SamplingParams p = Greedy();
  p.presence_penalty = 1.0f;
  Sampler s = Make(p, 3);
  s.Observe(0);
  s.Observe(7);  // out of the vocabulary: counted as generated, not penalised
  EXPECT_EQ(s.num_generated(), 2);
  EXPECT_EQ(Generate(s, {1.0f, 0.5f, 0.3f}, 1), std::vector<int32_t>{1});
}

TEST(SamplerTest, PenaltiesIgnoreTheRowWhenNoTokenWasGenerated) {
  SamplingParams p = Greedy();
  p.frequency_penalty = 2.0f;
  p.presence_penalty = 2.0f;
  p.repetition_penalty = 2.0f;
  Sampler s = Make(p, 3);
  const std::vector<float> row = {0.1f, 0.3f, 0.2f};
  auto r = s.Sample(row);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 1);
  EXPECT_NEAR(r->logprob, LogSoftmax(row, 1), 1e-5);
}

TEST(SamplerTest, LogitBiasIsAddedAfterPenaltiesAndCountsInLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingParams p = Greedy();
  p.logit_bias = {{1, -100.0f}, {3, 2.5f}};  // 1 banned in effect; 3 lifted to 2.5
  Sampler s = Make(p, 4);
  auto r = s.Sample(logits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, 3);
  EXPECT_NEAR(r->logprob, LogSoftmax({1.0f, -97.0f, 2.0f, 2.5f}, 3), 1e-6);
  // With a frequency penalty on the chosen token, the bias still applies on top of it.
  p.frequency_penalty = 1.0f;
  Sampler penalized = Make(p, 4);
  EXPECT_EQ(Generate(penalized, logits, 2), (std::vector<int32_t>{3, 2}));
  // -inf stays -inf: a bias never revives a masked token.
  SamplingParams forced = Greedy();
  forced.logit_bias = {{0, 100.0f}};
  Sampler f = Make(forced, 4);
  const float inf = std::numeric_limits<float>::infinity();
  auto masked = f.Sample(std::vector<float>{-inf, 0.0f, 1.0f, 0.5f});
  ASSERT_TRUE(masked.ok());
  EXPECT_EQ(masked->token, 2);
}

TEST(SamplerTest, LogitBiasIsValidated) {
  auto error = [](std::vector<std::pair<int32_t, float>> bias) {
    SamplingParams p;
    p.logit_bias = std::move(bias);
    return std::string(ValidateSamplingParams(p, 8).message());
  };
  EXPECT_EQ(error({{8, 1.0f}}),
            "sampling_params.logit_bias must be keyed by token ids in [0, 8), got 8");
  EXPECT_EQ(error({{-1, 1.0f}}),
            "sampling_params.logit_bias must be keyed by token ids in [0, 8), got -1");
  EXPECT_EQ(error({{2, 100.5f}}),
            "sampling_params.logit_bias[2] must be in [-100, 100], got 100.5");
  EXPECT_EQ(error({{2, std::numeric_limits<float>::quiet_NaN()}}),
            "sampling_params.logit_bias[2] must be in [-100, 100], got nan");
  EXPECT_EQ(error({{2, 1.0f}, {2, 2.0f}}),
            "sampling_params.logit_bias must be keyed by distinct token ids, got a repeated id");
  EXPECT_EQ(error({}), "");
  EXPECT_EQ(error({{0, -100.0f}, {7, 100.0f}}), "");
}

TEST(SamplerTest, MinNewTokensMasksEosAndStopIds) {
  SamplingParams p = Greedy();
  p.min_new_tokens = 2;
  p.stop_token_ids = {2};
  Sampler s = Make(p, 4, /*eos=*/{3, 99});
  const std::vector<float> row = {0.0f, 1.0f, 4.0f, 5.0f};
  EXPECT_EQ(Generate(s, row, 3), (std::vector<int32_t>{1, 1, 3}));

  // A token observed from a prefill worker counts towards min_new_tokens.
  Sampler observed = Make(p, 4, {3});
  observed.Observe(1);
  EXPECT_EQ(Generate(observed, row, 2), (std::vector<int32_t>{1, 3}));

  // Sampling is restricted the same way.
  SamplingParams q = p;
  q.temperature = 1.0f;
  q.min_new_tokens = 50;
  q.max_new_tokens = 50;
  Sampler sampled = Make(q, 4, {3});
  for (int32_t t : Generate(sampled, row, 50)) EXPECT_LT(t, 2);
}

TEST(SamplerTest, MaskedLogprobIsOverTheUnmaskedTokens) {
  SamplingParams p = Greedy();
  p.min_new_tokens = 1;
  Sampler s = Make(p, 3, {2});
  auto r = s.Sample(std::vector<float>{1.0f, 0.0f, 9.0f});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 0);
  EXPECT_NEAR(r->logprob, LogSoftmax({1.0f, 0.0f}, 0), 1e-5);
}

TEST(SamplerTest, EverythingMaskedIsAnError) {
  SamplingParams p = Greedy();
  p.min_new_tokens = 1;
  Sampler s = Make(p, 1, {0});
  auto r = s.Sample(std::vector<float>{1.0f});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("masked"), absl::string_view::npos) << r.status();
  EXPECT_EQ(s.num_generated(), 0);
  const float ninf = -std::numeric_limits<float>::infinity();
  Sampler t = Make(SamplingParams(), 2);
  EXPECT_FALSE(t.Sample(std::vector<float>{ninf, ninf}).ok());
}

TEST(SamplerTest, RejectsWrongSizeNaNAndInfinityWithoutChangingState) {
  Sampler s = Make(SamplingParams(), 3);
  auto r = s.Sample(std::vector<float>{1.0f, 2.0f});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "logits row has 2 entries, expected vocab_size 3");
  r = s.Sample(std::vector<float>{1.0f, std::nanf(""), 0.0f});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "logits[1] is NaN");
  r = s.Sample(std::vector<float>{1.0f, 0.0f, std::numeric_limits<float>::infinity()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "logits[2] is +inf");
  EXPECT_EQ(s.num_generated(), 0);
}

TEST(SamplerTest, NegativeInfinityTokensAreNeverSampled) {
  const float ninf = -std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.seed = 11;
  p.temperature = 5.0f;
  Sampler s = Make(p, 4);
  for (int32_t t : Generate(s, {ninf, 0.0f, ninf, -80.0f}, 2000)) {
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SamplerTest, LogprobIsLogSoftmaxBeforeTemperature) {
  std::vector<float> row(1000);
  for (size_t i = 0; i < row.size(); ++i) row[i] = 3.0f * std::sin(0.37f * static_cast<float>(i));
  for (float temperature : {0.0f, 0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = 0.9f;
    p.seed = 3;
    Sampler s = Make(p, 1000);
    for (int i = 0; i < 20; ++i) {
      auto r = s.Sample(row);
      ASSERT_TRUE(r.ok());
      EXPECT_NEAR(r->logprob, LogSoftmax(row, r->token), 1e-4) << temperature;
    }
  }
}

TEST(SamplerTest, LogprobIsAfterPenalties) {
  SamplingParams p = Greedy();
  p.frequency_penalty = 0.5f;
  p.repetition_penalty = 2.0f;
  Sampler s = Make(p, 3);
  s.Observe(0);
  s.Observe(0);
  auto r = s.Sample(std::vector<float>{3.0f, 1.0f, -1.0f});
  ASSERT_TRUE(r.ok());
  // token 0: 3 / 2 - 0.5 * 2 = 0.5
  EXPECT_EQ(r->token, 1);
  EXPECT_NEAR(r->logprob, LogSoftmax({0.5f, 1.0f, -1.0f}, 1), 1e-5);
}

TEST(SamplerTest, TopLogprobsAreTheMostLikelyTokensOfTheLogprobDistribution) {
  std::vector<float> row(5000);
  for (size_t i = 0; i < row.size(); ++i)
    row[i] = 4.0f * std::sin(0.013f * static_cast<float>(i * i));
  row[17] = row[4000] = 9.5f;  // a tie at the top: the lower id first
  // The reference: every token sorted by logit (descending), ties by id.
  std::vector<int32_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  for (float temperature : {0.0f, 1.3f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 3;  // truncation and temperature do not change the reported distribution
    p.seed = 11;
    p.top_logprobs_num = kMaxTopLogprobs;
    Sampler s = Make(p, static_cast<int32_t>(row.size()));
    for (int step = 0; step < 5; ++step) {
      auto r = s.Sample(row);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->top.size(), static_cast<size_t>(kMaxTopLogprobs));
      EXPECT_EQ(r->top[0].token, 17);
      EXPECT_EQ(r->top[1].token, 4000);
      for (size_t j = 0; j < r->top.size(); ++j) {
        EXPECT_EQ(r->top[j].token, order[j]) << j;
        EXPECT_NEAR(r->top[j].logprob, LogSoftmax(row, r->top[j].token), 1e-4) << j;
      }
      // The chosen token is among the top 3 (top_k), with the very same logprob there.
      const auto chosen = std::find_if(r->top.begin(), r->top.end(),
                                       [&](const TokenLogprob& t) { return t.token == r->token; });
      ASSERT_NE(chosen, r->top.end());
      EXPECT_LT(chosen - r->top.begin(), 3);
      EXPECT_EQ(chosen->logprob, r->logprob);
    }
  }
}

TEST(SamplerTest, TopLogprobsFollowPenaltiesAndStopAtTheVocabulary) {
  SamplingParams p = Greedy();
  p.frequency_penalty = 2.0f;
  p.top_logprobs_num = 5;
  Sampler s = Make(p, 3);
  s.Observe(0);
  auto r = s.Sample(std::vector<float>{3.0f, 1.5f, -1.0f});  // token 0 penalised to 1.0
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->top.size(), 3u);  // only three tokens exist
  EXPECT_EQ(r->top[0], (TokenLogprob{1, r->logprob}));
  EXPECT_EQ(r->top[1].token, 0);
  EXPECT_EQ(r->top[2].token, 2);
  EXPECT_NEAR(r->top[1].logprob, LogSoftmax({1.0f, 1.5f, -1.0f}, 0), 1e-5);
  // None asked for, none computed.
  Sampler plain = Make(Greedy(), 3);
  auto none = plain.Sample(std::vector<float>{3.0f, 1.5f, -1.0f});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->top.empty());
}

TEST(SamplerTest, TopLogprobsNumIsValidated) {
  SamplingParams p;
  p.top_logprobs_num = kMaxTopLogprobs + 1;
  EXPECT_EQ(ValidateSamplingParams(p, 100).message(),
            "sampling_params.top_logprobs_num must be in [0, 20], got 21");
  p.top_logprobs_num = -1;
  EXPECT_FALSE(ValidateSamplingParams(p, 100).ok());
}

std::map<int32_t, int> Histogram(SamplingParams p, const std::vector<float>& logits, int n) {
  Sampler s = Make(p, static_cast<int32_t>(logits.size()));
  std::map<int32_t, int> h;
  for (int32_t t : Generate(s, logits, n)) ++h[t];
  return h;
}

// probabilities 0.1, 0.2, 0.3, 0.4
const std::vector<float> kFour = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};

TEST(SamplerTest, TemperatureSamplingFollowsTheDistribution) {
  SamplingParams p;
  p.seed = 7;
  auto h = Histogram(p, kFour, 20000);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / 20000.0, 0.1 * (i + 1), 0.015) << i;

  // temperature 0.5 squares the ratios: 1, 4, 9, 16 (/30)
  p.temperature = 0.5f;
  h = Histogram(p, kFour, 20000);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / 20000.0, (i + 1) * (i + 1) / 30.0, 0.015) << i;
}

TEST(SamplerTest, TopKTopPMinPExcludeTokens) {
  SamplingParams p;
  p.seed = 3;
  p.top_k = 2;
  auto h = Histogram(p, kFour, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[3] / 5000.0, 4.0 / 7.0, 0.03);

  p = SamplingParams();
  p.top_p = 0.5f;  // before-mass: 0 (0.4), 0.4 (0.3) <= 0.5; 0.7 (0.2) > 0.5
  h = Histogram(p, kFour, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[3] / 5000.0, 4.0 / 7.0, 0.03);

  p = SamplingParams();
  p.top_p = 0.3f;  // only the top token
  h = Histogram(p, kFour, 500);
  EXPECT_EQ(h[3], 500);

  p = SamplingParams();
  p.min_p = 0.6f;  // keeps p >= 0.24: tokens 2 and 3
  h = Histogram(p, kFour, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[2] / 5000.0, 3.0 / 7.0, 0.03);

  // The masks apply to the full distribution and intersect: top_k = 3 alone keeps token 1,
  // min_p = 0.5 (p >= 0.2) alone keeps it too, top_p = 0.65 alone keeps 3 and 2 only.
  p = SamplingParams();
  p.top_k = 3;
  p.min_p = 0.5f;
  p.top_p = 0.65f;
  h = Histogram(p, kFour, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_GT(h[2], 1500);
}

TEST(SamplerTest, TopPOverALargeFlatVocabularyMatchesAFullSort) {
  // 5000 distinct logits: top_p = 0.5 needs well over a thousand candidates, past the first
  // sorted prefix.
  const int32_t n = 5000;
  std::vector<float> row(n);
  for (int32_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = std::cos(i * 1.618f);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)];
  });
  double total = 0.0;
  for (float v : row) total += std::exp(static_cast<double>(v) - row[order[0]]);
  std::vector<int32_t> rank(n);
  int32_t keep = 0;
  double mass = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    rank[static_cast<size_t>(order[i])] = i;
    if (mass <= 0.5 * total) keep = i + 1;
    mass += std::exp(static_cast<double>(row[order[i]]) - row[order[0]]);
  }
  ASSERT_GT(keep, 1000);
  // Without top_k (bucketed selection) and with a top_k that limits nothing (sorted prefix).
  for (int32_t top_k : {-1, n - 1}) {
    SamplingParams p;
    p.top_p = 0.5f;
    p.top_k = top_k;
    p.seed = 9;
    Sampler s = Make(p, n);
    int32_t max_rank = 0;
    for (int32_t t : Generate(s, row, 1500)) {
      max_rank = std::max(max_rank, rank[static_cast<size_t>(t)]);
    }
    EXPECT_LE(max_rank, keep) << top_k;  // one token of slack for rounding at the cut
    EXPECT_GT(max_rank, keep - 50) << top_k;
  }
}

TEST(SamplerTest, SeedMakesSamplingReproducible) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  p.seed = 42;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.frequency_penalty = 0.3f;
  Sampler a = Make(p, 1000);
  Sampler b = Make(p, 1000);
  p.seed = 43;
  Sampler c = Make(p, 1000);
  const std::vector<int32_t> xa = Generate(a, logits, 200);
  EXPECT_EQ(xa, Generate(b, logits, 200));
  const std::vector<int32_t> xc = Generate(c, logits, 200);
  int differ = 0;
  for (size_t i = 0; i < xa.size(); ++i) differ += xa[i] != xc[i];
  EXPECT_GT(differ, 100);
}

TEST(SamplerTest, ObserveContinuesASeededStreamLikeOneWorker) {
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.1f * static_cast<float>(i));
  SamplingParams p;
  p.seed = 77;
  p.top_p = 0.8f;
  p.presence_penalty = 0.4f;
  Sampler colocated = Make(p, 300);
  const std::vector<int32_t> want = Generate(colocated, logits, 12);
  Sampler prefill = Make(p, 300);
  const int32_t first = Generate(prefill, logits, 1)[0];
  ASSERT_EQ(first, want[0]);
  Sampler decode = Make(p, 300);
  decode.Observe(first);
  std::vector<int32_t> got = {first};
  for (int32_t t : Generate(decode, logits, 11)) got.push_back(t);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tandem::engine
