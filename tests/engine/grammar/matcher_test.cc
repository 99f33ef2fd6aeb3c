// GrammarMatcher's contract: refusals leave the state unchanged, rollback and copies, completion
// queries, and the bounds that turn hostile grammars into errors instead of hangs.
#include "engine/grammar/matcher.h"

#include <chrono>
#include <string>

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

TEST(GrammarMatcherTest, DeeplyNestedSchemaIsRefused) {
  std::string schema;
  for (int i = 0; i < 100; ++i) schema += R"({"type": "array", "items": )";
  schema += R"({"type": "integer"})";
  for (int i = 0; i < 100; ++i) schema += "}";
  absl::StatusOr<GrammarPtr> grammar = CompileJsonSchema(schema);
  ASSERT_FALSE(grammar.ok());
  EXPECT_NE(grammar.status().message().find("nested too deeply"), std::string::npos);
}

TEST(GrammarMatcherTest, AnyJsonObject) {
  GrammarMatcher m = MatcherFor(CompileAnyJsonObject());
  EXPECT_FALSE(m.next_bytes().test('['));
  EXPECT_TRUE(m.AcceptString(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(m.IsComplete());
}

}  // namespace
}  // namespace tandem::engine::grammar
