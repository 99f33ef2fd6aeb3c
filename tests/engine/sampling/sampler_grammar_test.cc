// The Sampler under a grammar constraint, on a small hand-made vocabulary: disallowed tokens
// are never drawn whatever their logits, EOS only once the output is complete, Observe advances
// the grammar exactly as Sample does (so a PD pair continues as one worker), outputs close
// within max_new_tokens, errors at Create.
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/matcher.h"
#include "engine/sampler.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

using Kind = GrammarConstraint::Kind;

// ids: 0 "a", 1 "b", 2 "ab", 3 "ba", 4 "c", 5 "<special>" (no bytes), 6 EOS.
constexpr int32_t kEos = 6;
constexpr int32_t kVocab = 7;

grammar::TokenVocabularyPtr Vocabulary() {
  return std::make_shared<const grammar::TokenVocabulary>(
      std::vector<std::string>{"a", "b", "ab", "ba", "c", "", ""}, std::vector<int32_t>{kEos});
}

SamplingParams Params(const std::string& regex, float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.constraint = {Kind::kRegex, regex};
  return p;
}

std::vector<float> RandomLogits(std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(*rng);
  return logits;
}

TEST(SamplerGrammarTest, OnlyAllowedTokensAndEosWhenComplete) {
  auto grammar = CompileConstraint({Kind::kRegex, "(ab)+c?"}).value();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Sampler s =
        Sampler::Create(Params("(ab)+c?", 1.0f, seed), kVocab, {kEos}, Vocabulary()).value();
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::string output;
    bool ended = false;
    for (int step = 0; step < 40 && !ended; ++step) {
      absl::StatusOr<SampleResult> r = s.Sample(RandomLogits(&rng));
      ASSERT_TRUE(r.ok()) << r.status() << " after \"" << output << "\"";
      ASSERT_NE(r->token, 5);
      if (r->token == kEos) {
        ended = true;
      } else {
        output += std::vector<std::string>{"a", "b", "ab", "ba", "c"}[r->token];
      }
    }
    grammar::GrammarMatcher m = grammar::GrammarMatcher::Create(grammar).value();
    EXPECT_TRUE(m.AcceptString(output)) << output;
    if (ended) {
      EXPECT_TRUE(m.IsComplete()) << output;
    }
  }
}

TEST(SamplerGrammarTest, GreedyPicksTheBestAllowedToken) {
  Sampler s = Sampler::Create(Params("b+", 0.0f, 1), kVocab, {kEos}, Vocabulary()).value();
  // "a" is the model's favourite but the grammar needs "b".
  const std::vector<float> logits = {9.0f, 1.0f, 8.0f, 0.5f, 7.0f, 6.0f, 5.0f};
  absl::StatusOr<SampleResult> r = s.Sample(logits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, 1);
  EXPECT_EQ(r->logprob, 0.0f);  // the only allowed token takes all the mass
  // Complete now: EOS (logit 5) competes with "b" (logit 1).
  r = s.Sample(logits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, kEos);
}

TEST(SamplerGrammarTest, ObserveAdvancesTheGrammarLikeSample) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Sampler one =
        Sampler::Create(Params("(a|b)+c", 1.0f, seed), kVocab, {kEos}, Vocabulary()).value();
    Sampler two = one;
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < 12; ++i) rows.push_back(RandomLogits(&rng));
    absl::StatusOr<SampleResult> first = one.Sample(rows[0]);
    ASSERT_TRUE(first.ok());
    two.Observe(first->token);
    for (size_t i = 1; i < rows.size(); ++i) {
      absl::StatusOr<SampleResult> a = one.Sample(rows[i]);
      absl::StatusOr<SampleResult> b = two.Sample(rows[i]);
      ASSERT_EQ(a.ok(), b.ok());
      if (!a.ok()) break;
      EXPECT_EQ(a->token, b->token);
      EXPECT_EQ(a->logprob, b->logprob);
      if (a->token == kEos) break;
    }
  }
}

// Length-aware closing: whatever the logits favour ("a" and "ab", which never complete), an
// output of at most max_new_tokens tokens ends complete; the last tokens close it.
TEST(SamplerGrammarTest, OutputCompletesWithinMaxNewTokens) {
  const std::vector<std::string> bytes = {"a", "b", "ab", "ba", "c"};
  auto grammar = CompileConstraint({Kind::kRegex, "(a|b)*c"}).value();
  for (int32_t budget = 1; budget <= 8; ++budget) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      SamplingParams p = Params("(a|b)*c", 1.0f, seed);
      p.max_new_tokens = budget;
      Sampler s = Sampler::Create(p, kVocab, {kEos}, Vocabulary()).value();
      std::mt19937 rng(static_cast<uint32_t>(seed));
      std::string output;
      for (int32_t step = 0; step < budget; ++step) {
        std::vector<float> logits = RandomLogits(&rng);
        logits[0] += 6.0f;
        logits[2] += 6.0f;
        absl::StatusOr<SampleResult> r = s.Sample(logits);
        ASSERT_TRUE(r.ok()) << r.status();
        if (r->token == kEos) break;
        output += bytes[static_cast<size_t>(r->token)];
      }
      grammar::GrammarMatcher m = grammar::GrammarMatcher::Create(grammar).value();
      EXPECT_TRUE(m.AcceptString(output) && m.IsComplete())
          << "budget " << budget << " seed " << seed << ": " << output;
    }
  }
}

// The budget rule depends on the tokens generated so far, observed ones included, so a PD pair
// (first token sampled elsewhere) still matches one worker when the budget is tight.
TEST(SamplerGrammarTest, ObserveMatchesSampleNearTheBudget) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SamplingParams p = Params("(a|b)*c", 1.0f, seed);
    p.max_new_tokens = 4;
    Sampler one = Sampler::Create(p, kVocab, {kEos}, Vocabulary()).value();
    Sampler two = one;
    std::mt19937 rng(static_cast<uint32_t>(seed));
    absl::StatusOr<SampleResult> first = one.Sample(RandomLogits(&rng));
    ASSERT_TRUE(first.ok());
    two.Observe(first->token);
    for (int step = 1; step < 4; ++step) {
      const std::vector<float> row = RandomLogits(&rng);
      absl::StatusOr<SampleResult> a = one.Sample(row);
      absl::StatusOr<SampleResult> b = two.Sample(row);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->token, b->token);
      EXPECT_EQ(a->logprob, b->logprob);
      if (a->token == kEos) break;
    }
  }
}

TEST(SamplerGrammarTest, ObservedTokenOutsideTheGrammarFailsTheNextSample) {
  Sampler s = Sampler::Create(Params("a+", 1.0f, 1), kVocab, {kEos}, Vocabulary()).value();
  s.Observe(1);  // "b"
  absl::StatusOr<SampleResult> r = s.Sample(std::vector<float>(kVocab, 0.0f));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SamplerGrammarTest, CreateReportsCompileErrorsAndMissingVocabulary) {
  absl::StatusOr<Sampler> bad =
      Sampler::Create(Params("a(?=b)", 1.0f, 1), kVocab, {kEos}, Vocabulary());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  SamplingParams schema;
  schema.constraint = {Kind::kJsonSchema, R"({"type": "integer", "multipleOf": 3})"};
  bad = Sampler::Create(schema, kVocab, {kEos}, Vocabulary());
  EXPECT_NE(bad.status().message().find("multipleOf"), std::string::npos) << bad.status();
  bad = Sampler::Create(Params("a", 1.0f, 1), kVocab, {kEos}, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::engine
