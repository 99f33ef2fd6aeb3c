// Every corpus grammar compiles and accepts / rejects its listed strings; the regex corpus's
// expectations agree with PCRE2; malformed or unsupported grammars fail with a named error.
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammar/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/grammar_corpus.h"

namespace tandem::engine::grammar::testing {
namespace {

using ::testing::HasSubstr;

bool Matches(const GrammarPtr& grammar, const std::string& text) {
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  return matcher.AcceptString(text) && matcher.IsComplete();
}

// PCRE2's verdict on `subject` fully matching `pattern` (UTF mode).
bool Pcre2FullMatch(const std::string& pattern, const std::string& subject) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  EXPECT_NE(code, nullptr) << pattern;
  if (code == nullptr) return false;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0,
                             0, data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

TEST(GrammarCorpusTest, HasAtLeastFiftyGrammars) {
  int schemas = 0, regexes = 0, ebnfs = 0;
  for (const CorpusCase& c : LoadCorpus()) {
    schemas += c.kind == "json_schema";
    regexes += c.kind == "regex";
    ebnfs += c.kind == "ebnf";
  }
  EXPECT_GE(schemas + regexes + ebnfs, 50);
  EXPECT_GE(schemas, 20);
  EXPECT_GE(regexes, 10);
  EXPECT_GE(ebnfs, 10);
}

TEST(GrammarCorpusTest, AcceptsAndRejectsListedStrings) {
  for (const CorpusCase& c : LoadCorpus()) {
    SCOPED_TRACE(c.kind + "/" + c.name);
    absl::StatusOr<GrammarPtr> grammar = CompileCase(c.kind, c.grammar);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    for (const std::string& text : c.accept) EXPECT_TRUE(Matches(*grammar, text)) << text;
    for (const std::string& text : c.reject) EXPECT_FALSE(Matches(*grammar, text)) << text;
  }
}

TEST(GrammarCorpusTest, RegexExpectationsAgreeWithPcre2) {
  for (const CorpusCase& c : LoadCorpus()) {
    if (c.kind != "regex") continue;
    SCOPED_TRACE(c.name);
    const std::string pattern = c.grammar.get<std::string>();
    for (const std::string& text : c.accept) EXPECT_TRUE(Pcre2FullMatch(pattern, text)) << text;
    for (const std::string& text : c.reject) EXPECT_FALSE(Pcre2FullMatch(pattern, text)) << text;
  }
}

TEST(GrammarCorpusTest, SchemaExamplesAreJson) {
  for (const CorpusCase& c : LoadCorpus()) {
    if (c.kind != "json_schema") continue;
    for (const std::string& text : c.accept) {
      EXPECT_TRUE(nlohmann::json::accept(text)) << c.name << ": " << text;
    }
  }
}

TEST(GrammarCorpusTest, UnsupportedOrMalformedGrammarsFailWithNamedError) {
  for (const auto& entry : LoadInvalidCorpus()) {
    const std::string kind = entry.at("kind").get<std::string>();
    SCOPED_TRACE(kind + ": " + entry.at("grammar").dump());
    absl::StatusOr<GrammarPtr> grammar = CompileCase(kind, entry.at("grammar"));
    ASSERT_FALSE(grammar.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(grammar.status()) ||
                absl::IsResourceExhausted(grammar.status()))
        << grammar.status();
    EXPECT_THAT(std::string(grammar.status().message()),
                HasSubstr(entry.at("error").get<std::string>()));
  }
}

}  // namespace
}  // namespace tandem::engine::grammar::testing
