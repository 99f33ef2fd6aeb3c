// Tandem issue 30's bar for the grammar corpus: every case (tests/engine/grammar/corpus: JSON
// Schema, regex, EBNF) sampled by the shipped model at temperature 1 under three seeds, through
// the Scheduler's real sampling path, ends (EOS or the token budget) as a complete string of the
// language: the matcher accepts and completes it, regex outputs fully match under PCRE2, JSON
// Schema outputs parse as JSON (their validation against the schema is
// GrammarJsonSchemaModelSamplesValidate, with python3-jsonschema).
#include <iostream>
#include <map>
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammar/matcher.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/serving/corpus_model_samples.h"

namespace tandem::engine::testing {
namespace {

constexpr int kSeeds = 3;

// Whether `output` fully matches `pattern` under PCRE2 (UTF, anchored at both ends).
bool Pcre2FullMatch(const std::string& pattern, const std::string& output) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  if (code == nullptr) return false;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(output.data()), output.size(), 0, 0,
                             data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

TEST(GrammarCorpusModelTest, EverySampledOutputIsCompleteInTheLanguage) {
  const auto cases = grammar::testing::LoadCorpus();
  ASSERT_GE(cases.size(), 50u);
  auto samples = SampleCorpusWithModel(cases, kSeeds);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), cases.size() * kSeeds);

  std::map<std::string, int> per_kind, per_finish;
  for (const CorpusModelSample& s : *samples) {
    const grammar::testing::CorpusCase& c = s.corpus_case;
    SCOPED_TRACE(c.kind + "/" + c.name + " seed " + std::to_string(s.seed) + ": " + s.output);
    ASSERT_TRUE(s.got.last && s.got.finish.has_value());
    EXPECT_LE(s.got.tokens.size(), static_cast<size_t>(s.max_new_tokens));
    const FinishReason::Kind finish = s.got.finish->kind;
    if (finish == FinishReason::Kind::kLength) {
      EXPECT_EQ(s.got.tokens.size(), static_cast<size_t>(s.max_new_tokens));
    } else {
      EXPECT_EQ(finish, FinishReason::Kind::kStop) << s.got.finish->message;
    }
    ++per_kind[c.kind];
    ++per_finish[finish == FinishReason::Kind::kStop     ? "stop"
                 : finish == FinishReason::Kind::kLength ? "length"
                                                         : "abort"];

    grammar::GrammarMatcher matcher =
        grammar::GrammarMatcher::Create(CompileConstraint(CorpusConstraint(c)).value()).value();
    EXPECT_TRUE(matcher.AcceptString(s.output) && matcher.IsComplete());
    if (c.kind == "regex") {
      EXPECT_TRUE(Pcre2FullMatch(c.grammar.get<std::string>(), s.output)) << "PCRE2 rejects it";
    }
    if (c.kind == "json_schema") {
      EXPECT_TRUE(nlohmann::json::accept(s.output));
    }
  }
  for (const auto& [kind, n] : per_kind) std::cout << kind << ": " << n << " outputs\n";
  for (const auto& [finish, n] : per_finish) std::cout << "finish " << finish << ": " << n << "\n";
}

}  // namespace
}  // namespace tandem::engine::testing
