// GrammarMatcher's contract: refusals leave the state unchanged, rollback and copies, completion
// queries, and the bounds that turn hostile grammars into errors instead of hangs.
#include "engine/grammar/matcher.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/grammar/ebnf_compiler.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/regex_compiler.h"
#include "gtest/gtest.h"

namespace tandem::engine::grammar {
namespace {

GrammarMatcher MatcherFor(absl::StatusOr<GrammarPtr> grammar) {
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  return GrammarMatcher::Create(*grammar).value();
}

TEST(GrammarMatcherTest, RefusedByteLeavesStateUnchanged) {
  GrammarMatcher m = MatcherFor(CompileRegex("ab|ac"));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.Accept('a'));
  EXPECT_FALSE(m.Accept('x'));
  EXPECT_EQ(m.num_bytes(), 1u);
  EXPECT_TRUE(m.next_bytes().test('b'));
  EXPECT_TRUE(m.next_bytes().test('c'));
  EXPECT_EQ(m.next_bytes().count(), 2u);
  EXPECT_TRUE(m.Accept('c'));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.CanContinue());
}

TEST(GrammarMatcherTest, AcceptStringIsAllOrNothing) {
  GrammarMatcher m = MatcherFor(CompileRegex("hello world"));
  EXPECT_TRUE(m.AcceptString("hello"));
  EXPECT_FALSE(m.AcceptString(" worms"));
  EXPECT_EQ(m.num_bytes(), 5u);
  EXPECT_TRUE(m.AcceptString(" world"));
  EXPECT_TRUE(m.IsComplete());
}

TEST(GrammarMatcherTest, RollbackRestoresEarlierState) {
  GrammarMatcher m = MatcherFor(CompileRegex("[0-9]+(\\.[0-9]+)?"));
  ASSERT_TRUE(m.AcceptString("12.5"));
  EXPECT_TRUE(m.IsComplete());
  m.Rollback(2);
  EXPECT_EQ(m.num_bytes(), 2u);
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.next_bytes().test('.'));
  EXPECT_TRUE(m.AcceptString(".75"));
  EXPECT_TRUE(m.IsComplete());
}

TEST(GrammarMatcherTest, CopiesAreIndependent) {
  GrammarMatcher a =
      MatcherFor(CompileJsonSchema(R"({"type": "array", "items": {"type": "integer"}})"));
  ASSERT_TRUE(a.AcceptString("[1"));
  GrammarMatcher b = a;
  EXPECT_TRUE(b.AcceptString("]"));
  EXPECT_TRUE(b.IsComplete());
  EXPECT_FALSE(a.IsComplete());
  EXPECT_TRUE(a.AcceptString(",2]"));
  EXPECT_TRUE(a.IsComplete());
}

TEST(GrammarMatcherTest, MinBytesToComplete) {
  GrammarMatcher m = MatcherFor(CompileJsonSchema(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": false})"));
  EXPECT_EQ(m.MinBytesToComplete(), 7);  // {"a":0}
  ASSERT_TRUE(m.AcceptString("{\"a\":12"));
  EXPECT_EQ(m.MinBytesToComplete(), 1);
  ASSERT_TRUE(m.AcceptString("}"));
  EXPECT_EQ(m.MinBytesToComplete(), 0);
}

TEST(GrammarMatcherTest, MinBytesThroughLeftRecursion) {
  GrammarMatcher m =
      MatcherFor(CompileEbnf("root ::= list \";\"\nlist ::= list \",\" \"x\" | \"x\""));
  EXPECT_EQ(m.MinBytesToComplete(), 2);
  ASSERT_TRUE(m.AcceptString("x,x,"));
  EXPECT_EQ(m.MinBytesToComplete(), 2);
}

TEST(GrammarMatcherTest, AmbiguousGrammarHitsStateLimitQuickly) {
  // Exponentially ambiguous and nullable: the recognizer's state grows with the output; the
  // limits refuse a byte instead of letting one step take unbounded time.
  GrammarLimits limits;
  limits.max_items_per_position = 2000;
  limits.max_work_per_byte = 200000;
  absl::StatusOr<GrammarPtr> grammar = CompileEbnf("root ::= s\ns ::= s s | \"a\" | \"\"", limits);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  GrammarMatcher m = GrammarMatcher::Create(*grammar).value();
  const auto start = std::chrono::steady_clock::now();
  int accepted = 0;
  while (accepted < 100000 && m.Accept('a')) ++accepted;
  EXPECT_LT(accepted, 100000);
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(m.IsComplete());  // the state before the refused byte is intact
}

TEST(GrammarMatcherTest, HugeGrammarIsRefusedAtCompileTime) {
  GrammarLimits limits;
  limits.max_symbols = 10000;
  std::string schema = R"({"enum": [)";
  for (int i = 0; i < 2000; ++i) {
    if (i > 0) schema += ",";
    schema += std::to_string(1000000 + i);
  }
  schema += "]}";
  absl::StatusOr<GrammarPtr> grammar = CompileJsonSchema(schema, limits);
  ASSERT_FALSE(grammar.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(grammar.status())) << grammar.status();
}

// Wide objects compile in linear work: 200,000 properties reach the symbol limit (refused, as
// the router answers a 400) instead of holding a thread for minutes, and a key trie node with
// 300 children (distinct first characters) still excludes exactly the listed keys.
TEST(GrammarMatcherTest, WideObjectsAreBoundedAndExact) {
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 200000; ++i) absl::StrAppend(&wide, i > 0 ? "," : "", "\"p", i, R"(":{})");
  wide += "}}";
  absl::StatusOr<GrammarPtr> refused = CompileJsonSchema(wide);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();

  // 300 one-character keys U+4E00.. of strings, none required, other keys with any value.
  std::string fan = R"({"type":"object","properties":{)";
  auto key = [](int i) {
    const uint32_t cp = 0x4E00 + static_cast<uint32_t>(i);
    return std::string{static_cast<char>(0xE0 | (cp >> 12)),
                       static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                       static_cast<char>(0x80 | (cp & 0x3F))};
  };
  for (int i = 0; i < 300; ++i) {
    absl::StrAppend(&fan, i > 0 ? "," : "", "\"", key(i), R"(":{"type":"string"})");
  }
  fan += "}}";
  const absl::StatusOr<GrammarPtr> grammar = CompileJsonSchema(fan);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  GrammarMatcher listed = MatcherFor(grammar);
  EXPECT_TRUE(listed.AcceptString(absl::StrCat("{\"", key(299), "\":\"x\"}")));
  EXPECT_TRUE(listed.IsComplete());
  GrammarMatcher wrong_type = MatcherFor(grammar);
  EXPECT_FALSE(wrong_type.AcceptString(absl::StrCat("{\"", key(150), "\":7}")));
  GrammarMatcher extra = MatcherFor(grammar);  // an unlisted key takes any value
  EXPECT_TRUE(extra.AcceptString(absl::StrCat("{\"", key(300), "\":[1]}")));
  EXPECT_TRUE(extra.IsComplete());
}

TEST(GrammarMatcherTest, DeeplyNestedSchemaIsRefused) {
  std::string schema;
  for (int i = 0; i < 100; ++i) schema += R"({"type": "array", "items": )";
  schema += R"({"type": "integer"})";
  for (int i = 0; i < 100; ++i) schema += "}";
  absl::StatusOr<GrammarPtr> grammar = CompileJsonSchema(schema);
  ASSERT_FALSE(grammar.ok());
  EXPECT_NE(grammar.status().message().find("nested too deeply"), std::string::npos);
}

TEST(GrammarMatcherTest, DeeplyNestedSchemaTextIsRefusedBeforeParsing) {
  const std::string schema = std::string(100000, '[') + std::string(100000, ']');
  absl::StatusOr<GrammarPtr> grammar = CompileJsonSchema(schema);
  ASSERT_FALSE(grammar.ok());
  EXPECT_NE(grammar.status().message().find("deeper than"), std::string::npos);
}

TEST(GrammarMatcherTest, LongRuleChainCompilesInLinearTime) {
  // Each rule refers to the next, defined after it: a pass-until-no-change fixpoint would need one
  // pass per rule (quadratic); the compiler must stay fast on it.
  std::string ebnf = "root ::= r1\n";
  constexpr int kRules = 40000;
  for (int i = 1; i < kRules; ++i) absl::StrAppend(&ebnf, "r", i, " ::= r", i + 1, "\n");
  absl::StrAppend(&ebnf, "r", kRules, " ::= \"a\"\n");
  GrammarLimits limits;
  limits.max_items_per_position = 100000;  // the initial state predicts the whole chain
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<GrammarPtr> grammar = CompileEbnf(ebnf, limits);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  GrammarMatcher m = MatcherFor(grammar);
  EXPECT_EQ(m.MinBytesToComplete(), 1);
  // Completing the chain after "a" looks back over the whole first state once per rule: more
  // than the per-byte work budget, so the byte is refused rather than taking seconds.
  EXPECT_FALSE(m.Accept('a'));
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
}

TEST(GrammarMatcherTest, AnyJsonObject) {
  GrammarMatcher m = MatcherFor(CompileAnyJsonObject());
  EXPECT_FALSE(m.next_bytes().test('['));
  EXPECT_TRUE(m.AcceptString(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(m.IsComplete());
}

}  // namespace
}  // namespace tandem::engine::grammar
