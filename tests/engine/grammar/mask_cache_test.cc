// TokenMaskCache and GrammarMatcher::StateId: a mask from the cache equals the freshly walked
// mask at every step of sampled outputs of the whole corpus, and after side steps taken and
// rolled back (states that diverge from the output), with a cache small enough to evict; equal
// states get equal ids inside repeated content, different futures never share one.
#include "engine/grammar/mask_cache.h"

#include <random>
#include <string>
#include <vector>

#include "engine/grammar/json_schema_compiler.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/grammar_corpus.h"

namespace tandem::engine::grammar::testing {
namespace {

std::vector<uint32_t> FreshMask(GrammarMatcher& matcher, const TokenVocabulary& vocab) {
  std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
  ComputeTokenMask(matcher, vocab, mask);
  return mask;
}

void ExpectCachedMaskIsFresh(TokenMaskCache& cache, GrammarMatcher& matcher,
                             const TokenVocabulary& vocab, const std::string& where) {
  const size_t bytes_before = matcher.num_bytes();
  const std::span<const uint32_t> cached = cache.Get(matcher, vocab);
  EXPECT_EQ(matcher.num_bytes(), bytes_before);
  const std::vector<uint32_t> fresh = FreshMask(matcher, vocab);
  ASSERT_EQ(cached.size(), fresh.size());
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (MaskAllows(cached, id) != MaskAllows(fresh, id)) {
      ADD_FAILURE() << where << ": token " << id << " \"" << vocab.token_bytes(id)
                    << "\" cached=" << MaskAllows(cached, id) << " fresh=" << MaskAllows(fresh, id);
      return;
    }
  }
}

// An allowed token other than EOS, uniformly, or -1 if there is none.
int32_t RandomAllowed(std::span<const uint32_t> mask, const TokenVocabulary& vocab,
                      std::mt19937_64& rng) {
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (MaskAllows(mask, id) && !vocab.is_eos(id)) allowed.push_back(id);
  }
  return allowed.empty() ? -1 : allowed[rng() % allowed.size()];
}

// Tokens that span the ends of JSON values (a string's close and what may follow it), so a mask
// depends on the context the value sits in, not only on the value's own rule.
const TokenVocabulary& JsonPunctuationVocabulary() {
  static const TokenVocabulary* vocab = [] {
    std::vector<std::string> tokens = {
        "\"", "\",", "\"}", "\"]", "\", \"", "\": ", "\":",  "{\"", "[\"",  "}",     "},",
        "}]", "]}",  "],",  ",",   ":",      " ",    "\n",   "{",   "[",    "]",     "0",
        "1",  "12",  "1}",  "1,",  "1]",     ".5",   "-",    "e",   "true", "false", "null",
        "a",  "b",   "x",   "ab",  "\\",     "\\n",  "\\\"", "\\u"};
    for (char c = 'a'; c <= 'z'; ++c) tokens.push_back(std::string(1, c) + "\"");
    tokens.push_back("");  // EOS
    const int32_t eos = static_cast<int32_t>(tokens.size()) - 1;
    return new TokenVocabulary(std::move(tokens), {eos});
  }();
  return *vocab;
}

void CheckCorpus(const TokenVocabulary& vocab, const std::string& only_kind) {
  int64_t hits = 0;
  for (const CorpusCase& c : LoadCorpus()) {
    if (!only_kind.empty() && c.kind != only_kind) continue;
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      std::vector<int32_t> tokens;
      SampleOutput(grammar, vocab, seed, /*max_tokens=*/32, &tokens);
      GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
      // Seed 1: a small cache, entries are evicted and recomputed; seed 2: one that keeps every
      // state, so a state met again much later (another depth, another property) is a hit.
      TokenMaskCache cache(/*capacity=*/seed == 1 ? 3 : 1000);
      std::mt19937_64 rng(seed);
      for (size_t i = 0; i < tokens.size(); ++i) {
        const std::string where = "after " + std::to_string(i) + " tokens";
        ExpectCachedMaskIsFresh(cache, matcher, vocab, where);
        // A side step: another allowed token, its mask, then back.
        const int32_t side = RandomAllowed(FreshMask(matcher, vocab), vocab, rng);
        if (side >= 0) {
          const size_t before = matcher.num_bytes();
          ASSERT_TRUE(AcceptToken(matcher, vocab, side));
          ExpectCachedMaskIsFresh(cache, matcher, vocab, where + " + side token");
          matcher.Rollback(matcher.num_bytes() - before);
          ExpectCachedMaskIsFresh(cache, matcher, vocab, where + " after the side token");
        }
        if (!vocab.is_eos(tokens[i])) {
          ASSERT_TRUE(AcceptToken(matcher, vocab, tokens[i]));
        }
      }
      hits += cache.hits();
    }
  }
  EXPECT_GT(hits, 0);
}

TEST(TokenMaskCacheTest, CachedMaskEqualsFreshMaskAlongSampledOutputsAndSideSteps) {
  CheckCorpus(TinyEnglishVocabulary(), "");
}

TEST(TokenMaskCacheTest, CachedMaskEqualsFreshMaskWithTokensThatCloseValues) {
  CheckCorpus(JsonPunctuationVocabulary(), "json_schema");
}

// The learned automaton gives the plain walk's mask whether it may learn everything, a little
// (then falls back to matcher steps mid-walk), or nothing.
TEST(TokenMaskCacheTest, WalkWithTransitionsEqualsPlainWalkWithinAnyBudget) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    std::vector<int32_t> tokens;
    SampleOutput(grammar, vocab, /*seed=*/3, /*max_tokens=*/16, &tokens);
    for (size_t budget : {size_t{0}, size_t{2}, StateTransitions::kMaxNewStatesPerWalk}) {
      GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
      StateTransitions transitions(budget);
      std::vector<uint32_t> learned(MaskWords(vocab.vocab_size()));
      for (size_t i = 0; i <= tokens.size(); ++i) {
        const size_t bytes_before = matcher.num_bytes();
        ComputeTokenMask(matcher, vocab, learned, &transitions);
        ASSERT_EQ(matcher.num_bytes(), bytes_before);
        EXPECT_EQ(learned, FreshMask(matcher, vocab))
            << "budget " << budget << ", after " << i << " tokens";
        if (i < tokens.size() && !vocab.is_eos(tokens[i])) {
          ASSERT_TRUE(AcceptToken(matcher, vocab, tokens[i]));
        }
      }
      if (budget > 0) {
        EXPECT_GT(transitions.size(), 0u);
      }
    }
  }
}

TEST(TokenMaskCacheTest, StatesRepeatInsideAJsonString) {
  GrammarPtr grammar = CompileJsonSchema(R"({"type": "object", "properties":
      {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"],
      "additionalProperties": false})")
                           .value();
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  ASSERT_TRUE(matcher.AcceptString(R"({"a": "x)"));
  const uint32_t in_a = matcher.StateId();
  ASSERT_TRUE(matcher.AcceptString("yz 1"));
  EXPECT_EQ(matcher.StateId(), in_a);
  // Inside the other string the same bytes may follow, but not the same closing: another state.
  ASSERT_TRUE(matcher.AcceptString(R"(", "b": "x)"));
  const uint32_t in_b = matcher.StateId();
  EXPECT_NE(in_b, in_a);
  ASSERT_TRUE(matcher.AcceptString("w"));
  EXPECT_EQ(matcher.StateId(), in_b);
  // An escape is its own state; after it the string's content state is back.
  ASSERT_TRUE(matcher.Accept('\\'));
  EXPECT_NE(matcher.StateId(), in_b);
  ASSERT_TRUE(matcher.Accept('n'));
  EXPECT_EQ(matcher.StateId(), in_b);
  // Ids survive a rollback.
  matcher.Rollback(2);
  EXPECT_EQ(matcher.StateId(), in_b);
}

TEST(TokenMaskCacheTest, DifferentFuturesGetDifferentIds) {
  GrammarPtr grammar = CompileCase("regex", "(ab|cd)*e").value();
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  const uint32_t start = matcher.StateId();
  ASSERT_TRUE(matcher.Accept('a'));
  const uint32_t after_a = matcher.StateId();
  matcher.Rollback(1);
  ASSERT_TRUE(matcher.Accept('c'));
  const uint32_t after_c = matcher.StateId();
  EXPECT_NE(after_a, after_c);
  EXPECT_NE(after_a, start);
  ASSERT_TRUE(matcher.Accept('d'));
  const uint32_t after_cd = matcher.StateId();
  ASSERT_TRUE(matcher.AcceptString("ab"));
  EXPECT_EQ(matcher.StateId(), after_cd);  // (ab|cd)* loops back to the same state
  ASSERT_TRUE(matcher.Accept('e'));
  EXPECT_NE(matcher.StateId(), after_cd);  // complete, nothing may follow
}

}  // namespace
}  // namespace tandem::engine::grammar::testing
