// Random outputs under the mask (uniform among allowed tokens, a step bound, then the shortest
// completion) are strings of the language: the matcher completes them, regex outputs fully
// match under PCRE2, JSON Schema outputs parse as JSON (their validation against the schema is
// validate_json_samples.py, with python3-jsonschema).
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/grammar/grammar_corpus.h"

namespace tandem::engine::grammar::testing {
namespace {

constexpr int kSeeds = 6;
constexpr int kMaxTokens = 48;

TEST(GrammarSamplingTest, SampledOutputsAreInTheLanguage) {
  const TokenVocabulary& vocab = TinyEnglishVocabulary();
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    GrammarPtr grammar = CompileCase(c.kind, c.grammar).value();
    pcre2_code* code = nullptr;
    if (c.kind == "regex") {
      const std::string pattern = c.grammar.get<std::string>();
      int error = 0;
      PCRE2_SIZE offset = 0;
      code =
          pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
      ASSERT_NE(code, nullptr);
    }
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const std::string output = SampleOutput(grammar, vocab, seed, kMaxTokens);
      GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
      EXPECT_TRUE(matcher.AcceptString(output) && matcher.IsComplete()) << output;
      if (code != nullptr) {
        pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
        EXPECT_GE(pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(output.data()), output.size(), 0,
                              0, data, nullptr),
                  0)
            << "PCRE2 rejects " << output;
        pcre2_match_data_free(data);
      }
      if (c.kind == "json_schema") {
        EXPECT_TRUE(nlohmann::json::accept(output)) << output;
      }
    }
    if (code != nullptr) pcre2_code_free(code);
  }
}

}  // namespace
}  // namespace tandem::engine::grammar::testing
