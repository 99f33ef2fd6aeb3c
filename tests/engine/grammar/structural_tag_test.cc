// The structural tag compiler: triggered structures within free text, the one-call and calls
// forms with an optional thinking block, and the validation that turns malformed or hostile tags
// into errors.
#include "engine/grammar/structural_tag.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/grammar/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::engine::grammar {
namespace {

using ::testing::HasSubstr;

constexpr char kWeather[] =
    R"({"structures": [{"begin": "<function=get_weather>", "schema": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}, "end": "</function>"},
       {"begin": "<function=get_time>", "schema": {"type": "object", "properties": {"tz":
        {"type": "integer", "minimum": -12, "maximum": 14}}}, "end": "</function>"}],
       "triggers": ["<function="]})";

bool Accepts(const absl::StatusOr<GrammarPtr>& grammar, const std::string& text) {
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return false;
  GrammarMatcher matcher = GrammarMatcher::Create(*grammar).value();
  return matcher.AcceptString(text) && matcher.IsComplete();
}

std::string Error(const std::string& tag, StructuralTagForm form = StructuralTagForm::kTriggered) {
  absl::StatusOr<GrammarPtr> grammar = CompileStructuralTag(tag, form, false);
  EXPECT_FALSE(grammar.ok());
  return grammar.ok() ? "" : std::string(grammar.status().message());
}

TEST(StructuralTagTest, TriggerStartsAStructureWithinFreeText) {
  const auto grammar = CompileStructuralTag(kWeather, StructuralTagForm::kTriggered, false);
  EXPECT_TRUE(Accepts(grammar, ""));
  EXPECT_TRUE(Accepts(grammar, "Just text, <b>tags</b> and <func but no trigger."));
  EXPECT_TRUE(
      Accepts(grammar, "Let me check. <function=get_weather>{\"city\": \"Oslo\"}</function>"));
  EXPECT_TRUE(Accepts(grammar,
                      "<function=get_time>{\"tz\": -3}</function> and "
                      "<function=get_weather>{\"city\": \"Rome\"}</function> done <function"));
  EXPECT_TRUE(Accepts(grammar, "<<function=get_time>{}</function>"));  // a trigger after '<'
  // Once the trigger is written, one of its structures must follow, whole.
  EXPECT_FALSE(Accepts(grammar, "<function=launch>{}</function>"));
  EXPECT_FALSE(Accepts(grammar, "<function=get_time>{\"tz\": 15}</function>"));
  EXPECT_FALSE(Accepts(grammar, "<function=get_weather>{}</function>"));  // city is required
  EXPECT_FALSE(Accepts(grammar, "<function=get_weather>{\"city\": \"Oslo\"}"));
  // Tag schemas are strict: listed properties only.
  EXPECT_FALSE(Accepts(grammar, "<function=get_weather>{\"city\": \"a\", \"x\": 1}</function>"));
}

// tool_choice "auto" without parallel_tool_calls: free text, at most one structure, and the
// output ends with it.
TEST(StructuralTagTest, TriggeredAtMostOneEndsWithTheFirstStructure) {
  const auto grammar =
      CompileStructuralTag(kWeather, StructuralTagForm::kTriggeredAtMostOne, false);
  const std::string call = "<function=get_weather>{\"city\": \"Oslo\"}</function>";
  EXPECT_TRUE(Accepts(grammar, ""));
  EXPECT_TRUE(Accepts(grammar, "Just text and <func but no trigger."));
  EXPECT_TRUE(Accepts(grammar, call));
  EXPECT_TRUE(Accepts(grammar, "Let me check. " + call));
  EXPECT_FALSE(Accepts(grammar, call + call));
  EXPECT_FALSE(Accepts(grammar, call + " done"));
  EXPECT_FALSE(Accepts(grammar, call + "\n<function=get_time>{}</function>"));
  EXPECT_FALSE(Accepts(grammar, "<function=get_weather>{}</function>"));  // city is required
  // The same tag in the triggered form takes any number of structures.
  EXPECT_TRUE(
      Accepts(CompileStructuralTag(kWeather, StructuralTagForm::kTriggered, false), call + call));
}

TEST(StructuralTagTest, SeveralTriggersEachWithTheirStructures) {
  const auto grammar = CompileStructuralTag(
      R"({"type": "structural_tag", "structures": [
          {"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"},
          {"begin": "[[b:", "schema": {"enum": ["x", "y"]}, "end": "]]"},
          {"begin": "[[c:", "end": "]]"}], "triggers": ["<a>", "[[" ]})",
      StructuralTagForm::kTriggered, false);
  EXPECT_TRUE(Accepts(grammar, "x <a>12</a> y [[b:\"x\"]] z [[c:[1, {\"k\": null}]]] [ [ <a"));
  EXPECT_FALSE(Accepts(grammar, "[[d:1]]"));
  EXPECT_FALSE(Accepts(grammar, "<a>\"s\"</a>"));
  EXPECT_FALSE(Accepts(grammar, "[[b:\"z\"]]"));
}

TEST(StructuralTagTest, RequiredFormsAndThinking) {
  const auto one = CompileStructuralTag(kWeather, StructuralTagForm::kOne, false);
  const std::string call = "<function=get_weather>{\"city\": \"Oslo\"}</function>";
  EXPECT_TRUE(Accepts(one, call));
  EXPECT_FALSE(Accepts(one, call + "\n" + call));
  EXPECT_FALSE(Accepts(one, "Sure. " + call));
  EXPECT_FALSE(Accepts(one, "<think>x</think>" + call));
  const auto several = CompileStructuralTag(kWeather, StructuralTagForm::kOneOrMore, true);
  EXPECT_TRUE(Accepts(several, call + "\n" + call));
  EXPECT_FALSE(Accepts(several, call + "\n\n" + call));
  EXPECT_TRUE(Accepts(several, "<think>\n<b>a</b> </thin no </think>\n\n" + call));
  EXPECT_FALSE(Accepts(several, "<think>a</think>b</think>" + call));
  EXPECT_FALSE(Accepts(several, "<think>a</think>\n\n\n" + call));
  EXPECT_FALSE(Accepts(several, "<think>a</think>"));
  // The prompt opened the block: it must close before the calls, "<think>" optional.
  const auto open = CompileStructuralTag(kWeather, StructuralTagForm::kOne, true, true);
  EXPECT_TRUE(Accepts(open, "a</think>\n\n" + call));
  EXPECT_TRUE(Accepts(open, "<think>a</think>" + call));
  EXPECT_TRUE(Accepts(open, "</think>" + call));
  EXPECT_FALSE(Accepts(open, call));
  EXPECT_FALSE(Accepts(open, "a</think>b" + call));
}

TEST(StructuralTagTest, MalformedTagsNameTheField) {
  EXPECT_THAT(Error("[1]"), HasSubstr("structural_tag: must be a JSON object"));
  EXPECT_THAT(Error("{"), HasSubstr("structural_tag: not valid JSON"));
  EXPECT_THAT(Error(R"({"structures": [], "triggers": ["<"]})"),
              HasSubstr("structures must be a list of 1 to 256 objects"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a>", "end": 5}], "triggers": ["<a"]})"),
              HasSubstr("structures[0].end must be a string"));
  EXPECT_THAT(Error(R"j({"structures": [{"begin": "(a", "end": ")"}], "triggers": ["<a"]})j"),
              HasSubstr("structures[0].begin does not start with any trigger"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a", "end": ""}], "triggers": ["<a", "a"]})"),
              HasSubstr("triggers[0] contains triggers[1]"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a", "end": ""}], "triggers": []})"),
              HasSubstr("triggers must be a list of 1 to 16 strings"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a", "end": "", "x": 1}], "triggers": ["<"]})"),
              HasSubstr("structures[0].x is not a structure's key"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a", "end": ""}], "triggers": ["<"], "y": 2})"),
              HasSubstr("unknown key 'y'"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<a", "schema": {"type": "integer",
                  "multipleOf": 3}, "end": ""}], "triggers": ["<"]})"),
              HasSubstr("structural_tag: structures[0].schema: json_schema: unsupported keyword "
                        "'multipleOf'"));
}

TEST(StructuralTagTest, HostileSizesAreRefused) {
  const std::string long_begin = absl::StrCat("<", std::string(kMaxTagBytes, 'a'));
  EXPECT_THAT(Error(R"({"structures": [{"begin": ")" + long_begin +
                    R"(", "end": ""}], "triggers": ["<"]})"),
              HasSubstr("structures[0].begin must be at most 1024 bytes"));
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<", "end": ""}], "triggers": [")" +
                    std::string(kMaxTriggerBytes + 1, 'a') + R"("]})"),
              HasSubstr("triggers[0] must be a string of 1 to 64 bytes"));
  // Many structures with large schemas: the grammar's size limit, not memory, stops them.
  std::string structures;
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "string",
      "maxLength": 1000}, "b": {"type": "array", "items": {"type": "integer"}, "maxItems": 1000}}})";
  for (size_t i = 0; i < kMaxStructures; ++i) {
    structures += std::string(i ? "," : "") + R"({"begin": "<f)" + std::to_string(i) +
                  R"(>", "schema": )" + schema + R"(, "end": "</f>"})";
  }
  const auto grammar =
      CompileStructuralTag(R"({"structures": [)" + structures + R"(], "triggers": ["<f"]})",
                           StructuralTagForm::kTriggered, false);
  ASSERT_FALSE(grammar.ok());
  EXPECT_EQ(grammar.status().code(), absl::StatusCode::kResourceExhausted) << grammar.status();
  // Deep nesting is refused before parsing.
  EXPECT_THAT(Error(R"({"structures": [{"begin": "<", "schema": )" + std::string(300, '[') +
                    std::string(300, ']') + R"(, "end": ""}], "triggers": ["<"]})"),
              HasSubstr("nests JSON deeper"));
}

}  // namespace
}  // namespace tandem::engine::grammar
