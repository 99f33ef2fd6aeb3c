// Length-aware closing over the whole corpus on the shipped model's vocabulary: tokens drawn
// uniformly among those the budget-restricted mask allows always end, within the budget, as a
// string of the language, for budgets from the shortest completion up; far from the budget the
// mask is left as it is.
#include "engine/grammar/length_budget.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/grammar/grammar_corpus.h"

namespace tandem::engine::grammar::testing {
namespace {

// Draws up to `budget` tokens uniformly among those allowed (EOS with probability 1/8 when
// allowed); returns the output's bytes.
std::string SampleWithinBudget(const GrammarPtr& grammar, const TokenVocabulary& vocabulary,
                               uint64_t seed, int64_t budget) {
  std::mt19937_64 rng(seed);
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  std::string output;
  std::vector<uint32_t> mask(MaskWords(vocabulary.vocab_size()));
  for (int64_t step = 0; step < budget; ++step) {
    ComputeTokenMask(matcher, vocabulary, mask);
    RestrictMaskToBudget(matcher, vocabulary, budget - step - 1, /*eos_selectable=*/true, mask);
    std::vector<int32_t> allowed;
    bool eos_allowed = false;
    for (int32_t id = 0; id < vocabulary.vocab_size(); ++id) {
      if (!MaskAllows(mask, id)) continue;
      if (vocabulary.is_eos(id)) {
        eos_allowed = true;
      } else {
        allowed.push_back(id);
      }
    }
    if (eos_allowed && (allowed.empty() || rng() % 8 == 0)) break;
    if (allowed.empty()) {
      ADD_FAILURE() << "nothing allowed after \"" << output << "\"";
      break;
    }
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(AcceptToken(matcher, vocabulary, id));
    output += vocabulary.token_bytes(id);
  }
  return output;
}

TEST(LengthBudgetTest, CorpusOutputsCompleteWithinTheBudget) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  int outputs = 0;
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    const int64_t shortest = GrammarMatcher::Create(grammar).value().MinBytesToComplete();
    for (int64_t extra : {0, 3, 12}) {
      for (uint64_t seed = 1; seed <= 2; ++seed) {
        const std::string output = SampleWithinBudget(grammar, vocab, seed, shortest + extra);
        GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
        EXPECT_TRUE(matcher.AcceptString(output) && matcher.IsComplete())
            << "budget " << shortest + extra << ": " << output;
        ++outputs;
      }
    }
  }
  EXPECT_GE(outputs, 50 * 6);  // at least 50 schemas, patterns and grammars
}

// The memoised search over a frozen prefix gives the plain search's answer for every token tried
// from one state.
TEST(LengthBudgetTest, MemoisedShortestCompletionMatchesThePlainSearch) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  int compared = 0;
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    std::vector<int32_t> tokens;
    const std::string prefix = SampleOutput(grammar, vocab, /*seed=*/7, /*max_tokens=*/6, &tokens);
    GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
    for (int32_t id : tokens) ASSERT_TRUE(AcceptToken(matcher, vocab, id));
    GrammarMatcher::MinBytesMemo memo;
    const size_t frozen = matcher.num_bytes() + 1;
    EXPECT_EQ(matcher.MinBytesToComplete(&memo, frozen), matcher.MinBytesToComplete());
    std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
    ComputeTokenMask(matcher, vocab, mask);
    for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
      if (!MaskAllows(mask, id) || vocab.is_eos(id)) continue;
      ASSERT_TRUE(matcher.AcceptString(vocab.token_bytes(id)));
      ASSERT_EQ(matcher.MinBytesToComplete(&memo, frozen), matcher.MinBytesToComplete())
          << prefix << " + " << vocab.token_bytes(id);
      matcher.Rollback(vocab.token_bytes(id).size());
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(LengthBudgetTest, FarFromTheBudgetTheMaskIsUnchanged) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarMatcher matcher = GrammarMatcher::Create(CompileCase(c.kind, c.grammar).value()).value();
    std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
    ComputeTokenMask(matcher, vocab, mask);
    const std::vector<uint32_t> before = mask;
    const int64_t far = matcher.MinBytesToComplete() + kLengthBudgetSlackBytes + 1;
    EXPECT_FALSE(RestrictMaskToBudget(matcher, vocab, far, true, mask));
    EXPECT_EQ(mask, before);
    EXPECT_EQ(matcher.num_bytes(), 0u);
  }
}

// With one token left, only tokens that complete the output stay (here: the closing brace).
TEST(LengthBudgetTest, LastTokenCompletesTheOutput) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  GrammarMatcher matcher =
      GrammarMatcher::Create(
          CompileCase("json_schema", nlohmann::ordered_json::parse(R"({"type": "object"})"))
              .value())
          .value();
  ASSERT_TRUE(matcher.AcceptString("{\"a\": 1"));
  std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
  ComputeTokenMask(matcher, vocab, mask);
  EXPECT_TRUE(RestrictMaskToBudget(matcher, vocab, 0, true, mask));
  int allowed = 0;
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (!MaskAllows(mask, id)) continue;
    ++allowed;
    ASSERT_TRUE(matcher.AcceptString(vocab.token_bytes(id))) << id;
    EXPECT_TRUE(matcher.IsComplete()) << vocab.token_bytes(id);
    matcher.Rollback(vocab.token_bytes(id).size());
  }
  EXPECT_GT(allowed, 0);
  EXPECT_EQ(matcher.num_bytes(), 7u);
}

}  // namespace
}  // namespace tandem::engine::grammar::testing

namespace tandem::engine::grammar::testing {
namespace {

// The memoised narrowing equals the plain one at every step of budget-constrained walks over
// the corpus, with states met again at other budgets (a capacity of 1 and of 4, so hits,
// evictions and misses all occur), and with EOS selectable or not.
TEST(LengthBudgetTest, CachedRestrictionEqualsThePlainOne) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  int64_t hits = 0;
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    for (size_t capacity : {size_t{1}, size_t{4}}) {
      GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
      BudgetRestrictionCache cache(capacity);
      std::mt19937_64 rng(capacity);
      const int64_t budget = std::max<int64_t>(matcher.MinBytesToComplete(), 1) + 6;
      std::vector<uint32_t> base(MaskWords(vocab.vocab_size()));
      for (int64_t step = 0; step < budget; ++step) {
        ComputeTokenMask(matcher, vocab, base);
        // The same state at several budgets, as a sequence meets it again later.
        for (int64_t after : {budget - step - 1, budget - step + 3, int64_t{0}}) {
          for (bool eos_selectable : {true, false}) {
            std::vector<uint32_t> plain = base;
            std::vector<uint32_t> cached = base;
            const bool plain_narrowed =
                RestrictMaskToBudget(matcher, vocab, after, eos_selectable, plain);
            const bool cached_narrowed =
                cache.Restrict(matcher, vocab, after, eos_selectable, cached);
            ASSERT_EQ(plain, cached) << "step " << step << " after " << after;
            ASSERT_EQ(plain_narrowed, cached_narrowed);
          }
        }
        std::vector<uint32_t> mask = base;
        RestrictMaskToBudget(matcher, vocab, budget - step - 1, true, mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
          if (MaskAllows(mask, id) && !vocab.is_eos(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(AcceptToken(matcher, vocab, allowed[rng() % allowed.size()]));
      }
      hits += cache.hits();
    }
  }
  EXPECT_GT(hits, 0);
}

}  // namespace
}  // namespace tandem::engine::grammar::testing
