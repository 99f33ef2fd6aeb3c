// Property: the trie-walked token mask equals a slow reference that feeds every token's bytes
// to a fresh copy of the matcher, at prefixes of the corpus's accepted strings and along
// sampled outputs, on the shipped model's vocabulary. So the mask never excludes a token that
// keeps the output valid, and never admits one that does not; EOS exactly when complete.
#include <string>
#include <vector>

#include "engine/grammar/token_mask.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/grammar_corpus.h"

namespace tandem::engine::grammar::testing {
namespace {

std::vector<uint32_t> ReferenceMask(const GrammarMatcher& matcher, const TokenVocabulary& vocab) {
  std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()), 0);
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    bool allowed = false;
    if (vocab.is_eos(id)) {
      allowed = matcher.IsComplete();
    } else if (!vocab.token_bytes(id).empty()) {
      GrammarMatcher copy = matcher;
      allowed = copy.AcceptString(vocab.token_bytes(id));
      // Whatever a token leads to can still be finished.
      if (allowed) {
        EXPECT_TRUE(copy.IsComplete() || copy.CanContinue());
      }
    }
    if (allowed) mask[id / 32] |= 1u << (id % 32);
  }
  return mask;
}

void ExpectMaskMatchesReference(GrammarMatcher& matcher, const TokenVocabulary& vocab,
                                const std::string& where) {
  std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
  const size_t bytes_before = matcher.num_bytes();
  ComputeTokenMask(matcher, vocab, mask);
  EXPECT_EQ(matcher.num_bytes(), bytes_before);
  const std::vector<uint32_t> reference = ReferenceMask(matcher, vocab);
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (MaskAllows(mask, id) != MaskAllows(reference, id)) {
      ADD_FAILURE() << where << ": token " << id << " \"" << vocab.token_bytes(id)
                    << "\" mask=" << MaskAllows(mask, id)
                    << " reference=" << MaskAllows(reference, id);
      return;
    }
  }
}

// Up to `count` prefix lengths of `text`, spread evenly, always including 0 and the whole.
std::vector<size_t> PrefixLengths(const std::string& text, size_t count) {
  std::vector<size_t> lengths;
  for (size_t i = 0; i < count; ++i) {
    const size_t length = text.size() * i / (count - 1);
    if (lengths.empty() || lengths.back() != length) lengths.push_back(length);
  }
  return lengths;
}

TEST(TokenMaskTest, MatchesReferenceWalkOnCorpusPrefixes) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  ASSERT_GT(vocab.vocab_size(), 1000);
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    absl::StatusOr<GrammarPtr> grammar = CompileCase(c.kind, c.grammar);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    for (const std::string& text : c.accept) {
      for (size_t length : PrefixLengths(text, 6)) {
        GrammarMatcher matcher = GrammarMatcher::Create(*grammar).value();
        ASSERT_TRUE(matcher.AcceptString(text.substr(0, length)));
        ExpectMaskMatchesReference(matcher, vocab, text.substr(0, length));
      }
    }
  }
}

TEST(TokenMaskTest, MatchesReferenceWalkAlongSampledOutputs) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    std::vector<int32_t> tokens;
    SampleOutput(grammar, vocab, /*seed=*/7, /*max_tokens=*/24, &tokens);
    GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
    for (size_t i = 0; i < tokens.size(); i += 3) {
      ExpectMaskMatchesReference(matcher, vocab, "after " + std::to_string(i) + " tokens");
      for (size_t j = i; j < i + 3 && j < tokens.size(); ++j) {
        ASSERT_TRUE(AcceptToken(matcher, vocab, tokens[j]));
      }
    }
  }
}

TEST(TokenMaskTest, EosOnlyWhenComplete) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  ASSERT_FALSE(vocab.eos_token_ids().empty());
  const int32_t eos = vocab.eos_token_ids()[0];
  GrammarPtr grammar = CompileCase("regex", "ab?").value();
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
  ComputeTokenMask(matcher, vocab, mask);
  EXPECT_FALSE(MaskAllows(mask, eos));
  EXPECT_FALSE(AcceptToken(matcher, vocab, eos));
  ASSERT_TRUE(matcher.Accept('a'));
  ComputeTokenMask(matcher, vocab, mask);
  EXPECT_TRUE(MaskAllows(mask, eos));
  EXPECT_TRUE(AcceptToken(matcher, vocab, eos));
}

}  // namespace
}  // namespace tandem::engine::grammar::testing
