// Chat requests with tools: tool conversations rendered through the checkpoint's template (here
// Qwen2.5's, which prints tools and tool calls), tool_choice and chat_template_kwargs, and the
// 400s naming the field.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "engine/grammar/constraint.h"
#include "engine/grammar/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// The tandem-tiny-english vocabulary with Qwen2.5-7B-Instruct's chat template.
const engine::Tokenizer& QwenTokenizer() {
  static const engine::Tokenizer* tokenizer = [] {
    const std::string root = TANDEM_SOURCE_DIR;
    nlohmann::json config =
        nlohmann::json::parse(ReadFile(root + "/models/tandem-tiny-english/tokenizer_config.json"));
    config["chat_template"] =
        ReadFile(root + "/tests/engine/jinja_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    auto loaded = engine::Tokenizer::FromStrings(
        ReadFile(root + "/models/tandem-tiny-english/tokenizer.json"), config.dump());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *tokenizer;
}

ApiContext QwenContext() {
  ApiContext ctx;
  ctx.tokenizer = &QwenTokenizer();
  ctx.context_length = 4096;
  return ctx;
}

constexpr char kWeatherTool[] =
    R"({"type":"function","function":{"name":"get_weather","description":"Weather now",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"},)"
    R"("unit":{"enum":["c","f"]}},"required":["city"]}}})";

std::string Body(const std::string& fields) {
  return std::string(R"({"messages":[{"role":"user","content":"Paris?"}],"tools":[)") +
         kWeatherTool + "]" + (fields.empty() ? "" : "," + fields) + "}";
}

std::string Error(const std::string& body) {
  const auto parsed = ParseChatCompletions(body, QwenContext());
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(ChatToolsTest, ToolsReachTheTemplateInTheClientsKeyOrder) {
  const auto parsed = ParseChatCompletions(Body(""), QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->prompt_text,
              HasSubstr("<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
                        "\"get_weather\", \"description\": \"Weather now\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                        "\"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": "
                        "[\"city\"]}}}\n</tools>"));
}

TEST(ChatToolsTest, ToolConversationRendersCallsAndResults) {
  const auto parsed = ParseChatCompletions(
      std::string(R"({"messages":[{"role":"user","content":"Paris?"},)"
                  R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1",)"
                  R"("type":"function","function":{"name":"get_weather",)"
                  R"("arguments":"{\"unit\": \"c\", \"city\": \"Paris\"}"}}]},)"
                  R"({"role":"tool","tool_call_id":"call_1","content":"21"}],"tools":[)") +
          kWeatherTool + "]}",
      QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The arguments string was parsed (printed once, not double-encoded, in its own key order).
  EXPECT_THAT(parsed->prompt_text,
              HasSubstr("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"unit\": \"c\", \"city\": \"Paris\"}}\n</tool_call>"
                        "<|im_end|>\n<|im_start|>user\n<tool_response>\n21\n</tool_response>"
                        "<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(ChatToolsTest, ToolChoiceNoneRendersWithoutTools) {
  const auto none = ParseChatCompletions(Body(R"("tool_choice":"none")"), QwenContext());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(none->prompt_text, ::testing::Not(HasSubstr("<tools>")));
  const auto named = ParseChatCompletions(
      Body(R"("tool_choice":{"type":"function","function":{"name":"get_weather"}})"),
      QwenContext());
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_THAT(named->prompt_text, HasSubstr("\"name\": \"get_weather\""));
}

TEST(ChatToolsTest, ChatTemplateKwargsBecomeTemplateVariables) {
  // The tandem-tiny-english template ignores unknown variables; Qwen2.5's too: the kwargs are only
  // checked to be an object here (their effect is covered by the template tests).
  EXPECT_TRUE(ParseChatCompletions(Body(R"("chat_template_kwargs":{"enable_thinking":false})"),
                                   QwenContext())
                  .ok());
  EXPECT_EQ(Error(Body(R"("chat_template_kwargs":[1])")),
            "chat_template_kwargs must be an object, got array");
}

TEST(ChatToolsTest, Errors) {
  const std::string user = R"({"messages":[{"role":"user","content":"a"}],)";
  EXPECT_EQ(Error(user + R"("tools":{"type":"function"}})"),
            "tools must be an array of functions, got object");
  EXPECT_EQ(Error(user + R"("tools":[{"type":"retrieval","function":{"name":"f"}}]})"),
            "tools[0].type must be \"function\"");
  EXPECT_EQ(Error(user + R"("tools":[{"type":"function","function":{"name":"a b"}}]})"),
            "tools[0].function.name must be a string of 1 to 64 letters, digits, '_' or '-'");
  EXPECT_EQ(
      Error(user + R"("tools":[{"type":"function","function":{"name":"f","parameters":1}}]})"),
      "tools[0].function.parameters must be a JSON Schema object");
  EXPECT_EQ(
      Error(user + R"("tools":[{"type":"function","function":{"name":"f","strict":"yes"}}]})"),
      "tools[0].function.strict must be a boolean");
  EXPECT_EQ(Error(user + R"("tools":[{"type":"function","function":{"name":"f"}},)"
                         R"({"type":"function","function":{"name":"f"}}]})"),
            "tools[1].function.name 'f' names a function twice");
  EXPECT_EQ(Error(user + R"("tool_choice":"required"})"),
            "tool_choice \"required\" needs a non-empty tools list");
  EXPECT_EQ(Error(Body(R"("tool_choice":"any")")),
            "tool_choice 'any' is not supported; use \"none\", \"auto\", \"required\" or "
            "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  EXPECT_EQ(Error(Body(R"("tool_choice":{"type":"function","function":{"name":"nope"}})")),
            "tool_choice.function.name 'nope' is not a function of tools");
  EXPECT_EQ(Error(R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function",)"
                  R"("function":{"name":"f","arguments":"{oops"}}]}]})"),
            "messages[0].tool_calls[0].function.arguments must be a JSON text");
  EXPECT_EQ(Error(R"({"messages":[{"role":"user","content":"a","tool_calls":[]}]})"),
            "messages[0].tool_calls is only allowed on assistant messages");
  EXPECT_EQ(Error(R"({"messages":[{"role":"tool"}]})"), "messages[0].content is required");
}

}  // namespace
}  // namespace tandem::router

namespace tandem::router {
namespace {

// Whether the structural tag a request was constrained with accepts `text` as a whole answer.
bool GrammarAccepts(const RoutedRequest& request, const std::string& text) {
  using engine::grammar::StructuralTagForm;
  const proto::StructuralTag& tag = request.sampling.structural_tag();
  engine::grammar::Constraint constraint;
  constraint.kind = engine::grammar::Constraint::Kind::kStructuralTag;
  constraint.text = tag.tag();
  switch (tag.form()) {
    case proto::StructuralTag::ONE_OR_MORE:
      constraint.tag_form = StructuralTagForm::kOneOrMore;
      break;
    case proto::StructuralTag::ONE:
      constraint.tag_form = StructuralTagForm::kOne;
      break;
    case proto::StructuralTag::TRIGGERED_AT_MOST_ONE:
      constraint.tag_form = StructuralTagForm::kTriggeredAtMostOne;
      break;
    default:
      constraint.tag_form = StructuralTagForm::kTriggered;
  }
  constraint.allow_thinking = tag.allow_thinking();
  constraint.thinking_open = tag.thinking_open();
  auto grammar = engine::grammar::CompileConstraint(constraint);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return false;
  auto matcher = engine::grammar::GrammarMatcher::Create(*grammar);
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return matcher.ok() && matcher->AcceptString(text) && matcher->IsComplete();
}

TEST(ChatToolsGrammarTest, RequiredConstrainsTheAnswerToCallsOfTheTools) {
  const auto parsed = ParseChatCompletions(Body(R"("tool_choice":"required")"), QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tool_call_syntax, ToolCallSyntax::kQwen);
  ASSERT_TRUE(parsed->sampling.has_structural_tag());
  EXPECT_EQ(parsed->sampling.structural_tag().form(), proto::StructuralTag::ONE_OR_MORE);
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"c\"}}\n</tool_call>";
  EXPECT_TRUE(GrammarAccepts(*parsed, call));
  EXPECT_TRUE(GrammarAccepts(*parsed, call + "\n" + call));  // parallel calls by default
  EXPECT_FALSE(GrammarAccepts(*parsed, "Sure!"));
  EXPECT_FALSE(GrammarAccepts(  // unit outside its enum
      *parsed,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"k\"}}\n</tool_call>"));
  EXPECT_FALSE(GrammarAccepts(  // a function not in tools
      *parsed, "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ChatToolsGrammarTest, NamedChoiceAllowsOneCallOfThatFunction) {
  const auto parsed = ParseChatCompletions(
      std::string(R"({"messages":[{"role":"user","content":"x"}],"tools":[)") + kWeatherTool +
          R"(,{"type":"function","function":{"name":"get_time","parameters":{"type":"object",)"
          R"("properties":{"tz":{"type":"string"},"n":{"type":"array","items":{"type":)"
          R"("integer"},"maxItems":2}}}}}],)"
          R"("tool_choice":{"type":"function","function":{"name":"get_time"}}})",
      QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string call =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", \"n\": [1, -20]}}"
      "\n</tool_call>";
  EXPECT_TRUE(GrammarAccepts(*parsed, call));
  EXPECT_FALSE(GrammarAccepts(*parsed, call + "\n" + call));
  EXPECT_FALSE(
      GrammarAccepts(*parsed,
                     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", "
                     "\"n\": [1, 2, 3]}}\n</tool_call>"));
  EXPECT_FALSE(
      GrammarAccepts(*parsed,
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", "
                     "\"unit\": \"c\"}}\n</tool_call>"));
}

TEST(ChatToolsGrammarTest, AutoAndNoneDoNotConstrain) {
  for (const char* choice : {R"("tool_choice":"auto")", R"("tool_choice":"none")"}) {
    const auto parsed = ParseChatCompletions(Body(choice), QwenContext());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_FALSE(parsed->sampling.has_structural_tag());
  }
}

// tool_choice "auto" with parallel_tool_calls false: any text, or at most one call, which ends
// the answer.
TEST(ChatToolsGrammarTest, AutoWithoutParallelCallsEndsWithTheFirstCall) {
  const auto parsed = ParseChatCompletions(
      Body(R"("tool_choice":"auto","parallel_tool_calls":false)"), QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->sampling.has_structural_tag());
  EXPECT_EQ(parsed->sampling.structural_tag().form(), proto::StructuralTag::TRIGGERED_AT_MOST_ONE);
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>";
  EXPECT_TRUE(GrammarAccepts(*parsed, "It is sunny in Paris."));
  EXPECT_TRUE(GrammarAccepts(*parsed, call));
  EXPECT_TRUE(GrammarAccepts(*parsed, "Let me look.\n" + call));
  EXPECT_FALSE(GrammarAccepts(*parsed, call + "\n" + call));
  EXPECT_FALSE(GrammarAccepts(*parsed, call + "\nDone."));
  // Not strict: the arguments are any JSON object.
  EXPECT_TRUE(GrammarAccepts(*parsed,
                             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                             "{\"town\": 1}}\n</tool_call>"));
}

// tool_choice "auto" with a strict function: its calls' arguments follow its parameters (a
// function without strict takes any object); calls may repeat and text may follow.
TEST(ChatToolsGrammarTest, AutoEnforcesStrictFunctionsArguments) {
  const auto parsed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto","tools":[)"
      R"({"type":"function","function":{"name":"get_weather","strict":true,"parameters":)"
      R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],)"
      R"("additionalProperties":false}}},)"
      R"({"type":"function","function":{"name":"log","parameters":{"type":"object",)"
      R"("properties":{"n":{"type":"integer"}},"required":["n"]}}}]})",
      QwenContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->sampling.has_structural_tag());
  EXPECT_EQ(parsed->sampling.structural_tag().form(), proto::StructuralTag::TRIGGERED);
  auto call = [](const std::string& name, const std::string& arguments) {
    return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + arguments +
           "}\n</tool_call>";
  };
  const std::string weather = call("get_weather", R"({"city": "Oslo"})");
  EXPECT_TRUE(GrammarAccepts(*parsed, "No call needed."));
  EXPECT_TRUE(GrammarAccepts(*parsed, weather + "\n" + weather + "\nDone."));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("get_weather", R"({"town": "Oslo"})")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("get_weather", R"({"city": 3})")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("launch", "{}")));
  EXPECT_TRUE(GrammarAccepts(*parsed, call("log", R"({"anything": [1]})")));
  // A constraint of the client's own is left as it is (the tools are then not enforced).
  const auto with_format = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto",)"
      R"("parallel_tool_calls":false,"response_format":{"type":"json_object"},"tools":[)" +
          std::string(kWeatherTool) + "]}",
      QwenContext());
  ASSERT_TRUE(with_format.ok()) << with_format.status();
  EXPECT_TRUE(with_format->sampling.json_object());
}

// A required call of `tool` (one function "f" whose parameters are `parameters`).
absl::StatusOr<RoutedRequest> RequiredCall(const std::string& parameters) {
  return ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[)"
      R"({"type":"function","function":{"name":"f","parameters":)" +
          parameters + "}}]}",
      QwenContext());
}

std::string CallOfF(const std::string& arguments) {
  return "<tool_call>\n{\"name\": \"f\", \"arguments\": " + arguments + "}\n</tool_call>";
}

TEST(ChatToolsGrammarTest, RefsAndStringLengthsAreEnforced) {
  const auto parsed =
      RequiredCall(R"({"type":"object","properties":{"who":{"$ref":"#/$defs/name"},)"
                   R"("tree":{"$ref":"#/definitions/node"}},"required":["who","tree"],)"
                   R"("$defs":{"name":{"type":"string","minLength":2,"maxLength":4}},)"
                   R"("definitions":{"node":{"type":"object","properties":{"kids":{"type":"array",)"
                   R"("items":{"$ref":"#/definitions/node"},"maxItems":2}}}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(GrammarAccepts(*parsed, CallOfF(R"({"who": "Ann", "tree": {"kids": []}})")));
  EXPECT_TRUE(GrammarAccepts(  // recursion through the $ref, escapes count as one character
      *parsed, CallOfF(R"({"who": "\"a\"", "tree": {"kids": [{"kids": []}, {"kids": []}]}})")));
  EXPECT_FALSE(GrammarAccepts(*parsed, CallOfF(R"({"who": "A", "tree": {"kids": []}})")));
  EXPECT_FALSE(GrammarAccepts(*parsed, CallOfF(R"({"who": "Annie", "tree": {"kids": []}})")));
}

TEST(ChatToolsGrammarTest, PatternsAreEnforcedOnTheStringsValue) {
  const auto parsed = RequiredCall(
      R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},)"
      R"("note":{"pattern":"a\"b|\\\\n"},"any":{"type":"string","pattern":"^(?:x.)+$"}},)"
      R"("required":["code","note","any"]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto call = [](const std::string& code, const std::string& note, const std::string& any) {
    return CallOfF(R"({"code": ")" + code + R"(", "note": ")" + note + R"(", "any": ")" + any +
                   R"("})");
  };
  EXPECT_TRUE(GrammarAccepts(*parsed, call("AB-123", "a\\\"b", "xy")));
  // Search semantics without anchors: anything around the match; "\\n" is a backslash then n.
  EXPECT_TRUE(GrammarAccepts(*parsed, call("ZZ-000", "say a\\\"b!", "x\\\"xn")));
  EXPECT_TRUE(GrammarAccepts(*parsed, call("ZZ-000", "\\\\n", "xé")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("AB-12", "a\\\"b", "xy")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("ab-123", "a\\\"b", "xy")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call(" AB-123", "a\\\"b", "xy")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("AB-123", "ab", "xy")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("AB-123", "a\\\"b", "x")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call("AB-123", "a\\\"b", "x\\n")));  // . is not \n
  EXPECT_THAT(Error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required",)"
                    R"("tools":[{"type":"function","function":{"name":"f","parameters":)"
                    R"({"type":"object","properties":{"s":{"pattern":"(a)\\1"}}}}}]})"),
              HasSubstr("tools[0].function.parameters: #/properties/s/pattern: regex: "));
}

TEST(ChatToolsGrammarTest, IntegerBoundsAreExactNumberBoundsOnlyTheSign) {
  const auto parsed = RequiredCall(
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":-12,"maximum":345},)"
      R"("k":{"type":"integer","exclusiveMinimum":0},"x":{"type":"number","minimum":0}},)"
      R"("required":["n","k","x"]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto call = [](int64_t n, const std::string& k, const std::string& x) {
    return CallOfF(R"({"n": )" + std::to_string(n) + R"(, "k": )" + k + R"(, "x": )" + x + "}");
  };
  for (int64_t n = -30; n <= 400; ++n) {
    EXPECT_EQ(GrammarAccepts(*parsed, call(n, "1", "0.5")), n >= -12 && n <= 345) << n;
  }
  EXPECT_FALSE(GrammarAccepts(*parsed, call(1, "0", "1")));
  EXPECT_TRUE(GrammarAccepts(*parsed, call(1, "999999999999999999", "1e5")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call(1, "2", "-1")));
  EXPECT_FALSE(GrammarAccepts(*parsed, call(1, "02", "1")));
}

TEST(ChatToolsGrammarTest, UnenforceableSchemasAreRefused) {
  EXPECT_EQ(
      Error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[)"
            R"({"type":"function","function":{"name":"f","parameters":{"type":"object",)"
            R"("properties":{"n":{"type":"integer","multipleOf":2}}}}}]})"),
      "tools[0].function.parameters: json_schema: unsupported keyword 'multipleOf' at "
      "'#/properties/n'");
  EXPECT_EQ(
      Error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[)"
            R"({"type":"function","function":{"name":"f","parameters":{"$ref":"#/$defs/no"}}}]})"),
      "tools[0].function.parameters: json_schema: unresolved reference '#/$defs/no' at '#/$ref'");
  EXPECT_EQ(
      Error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[)"
            R"({"type":"function","function":{"name":"f","parameters":{"type":"object",)"
            R"("properties":{"n":{"type":"integer","minimum":5,"maximum":4}}}}}]})"),
      "tools[0].function.parameters: json_schema: the bounds leave no integer at '#/properties/n'");
  // A schema that matches nothing is found in the whole grammar, not in one tool's schema: the
  // message still says where it came from.
  EXPECT_EQ(
      Error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[)"
            R"({"type":"function","function":{"name":"f","parameters":{"$defs":{"a":)"
            R"({"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}}}]})"),
      "tool_choice: the grammar made from the tools' parameters: the grammar matches no string");
  EXPECT_THAT(Error(Body(R"("tool_choice":"required","response_format":{"type":"json_object"})")),
              HasSubstr("only one of regex, json_schema, ebnf, structural_tag, response_format and "
                        "tool_choice"));
}

}  // namespace
}  // namespace tandem::router

namespace tandem::router {
namespace {

// The tandem-tiny-english vocabulary with Llama 3.2's chat template (the Llama-3 family).
const engine::Tokenizer& LlamaTokenizer() {
  static const engine::Tokenizer* tokenizer = [] {
    const std::string root = TANDEM_SOURCE_DIR;
    nlohmann::json config =
        nlohmann::json::parse(ReadFile(root + "/models/tandem-tiny-english/tokenizer_config.json"));
    config["chat_template"] =
        ReadFile(root + "/tests/engine/jinja_templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
    config["bos_token"] = "<|im_start|>";
    auto loaded = engine::Tokenizer::FromStrings(
        ReadFile(root + "/models/tandem-tiny-english/tokenizer.json"), config.dump());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *tokenizer;
}

TEST(ChatToolsGrammarTest, Llama3TemplatesUseTheJsonCallSyntax) {
  ApiContext ctx = QwenContext();
  ctx.tokenizer = &LlamaTokenizer();
  const auto parsed = ParseChatCompletions(Body(R"("tool_choice":"required")"), ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tool_call_syntax, ToolCallSyntax::kLlama3);
  EXPECT_TRUE(GrammarAccepts(
      *parsed, R"({"name": "get_weather", "parameters": {"city": "Oslo", "unit": "f"}})"));
  EXPECT_FALSE(GrammarAccepts(*parsed, "<tool_call>\n{\"name\": \"get_weather\"}"));
}

// The tandem-tiny-english vocabulary with Qwen3's chat template (thinking by default).
const engine::Tokenizer& Qwen3Tokenizer() {
  static const engine::Tokenizer* tokenizer = [] {
    const std::string root = TANDEM_SOURCE_DIR;
    nlohmann::json config =
        nlohmann::json::parse(ReadFile(root + "/models/tandem-tiny-english/tokenizer_config.json"));
    config["chat_template"] = ReadFile(root + "/tests/engine/jinja_templates/Qwen-Qwen3.jinja");
    auto loaded = engine::Tokenizer::FromStrings(
        ReadFile(root + "/models/tandem-tiny-english/tokenizer.json"), config.dump());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *tokenizer;
}

TEST(ChatToolsGrammarTest, Qwen3MayThinkBeforeARequiredCall) {
  ApiContext ctx = QwenContext();
  ctx.tokenizer = &Qwen3Tokenizer();
  ASSERT_EQ(ctx.tokenizer->chat_family(), engine::ChatFamily::kQwen3);
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"c\"}}\n</tool_call>";
  const std::string thought = "<think>\nThe user wants <b>Paris</b>; </thin no.\n</think>\n\n";
  for (const char* choice :
       {R"("tool_choice":"required")",
        R"("tool_choice":{"type":"function","function":{"name":"get_weather"}})"}) {
    const auto parsed = ParseChatCompletions(Body(choice), ctx);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(GrammarAccepts(*parsed, call));
    EXPECT_TRUE(GrammarAccepts(*parsed, thought + call));
    EXPECT_TRUE(GrammarAccepts(*parsed, "<think></think>" + call));
    // One block, ended by the first "</think>", and nothing but the call after it.
    EXPECT_FALSE(GrammarAccepts(*parsed, "<think>a</think>b</think>" + call));
    EXPECT_FALSE(GrammarAccepts(*parsed, thought + thought + call));
    EXPECT_FALSE(GrammarAccepts(*parsed, thought + "Sure! " + call));
    EXPECT_FALSE(GrammarAccepts(*parsed, thought));
  }
  // enable_thinking false: the template closes the block in the prompt; the answer is the call.
  const auto off = ParseChatCompletions(
      Body(R"("tool_choice":"required","chat_template_kwargs":{"enable_thinking":false})"), ctx);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(GrammarAccepts(*off, call));
  EXPECT_FALSE(GrammarAccepts(*off, thought + call));
  // Qwen2.5 templates do not think.
  const auto qwen25 = ParseChatCompletions(Body(R"("tool_choice":"required")"), QwenContext());
  ASSERT_TRUE(qwen25.ok()) << qwen25.status();
  EXPECT_FALSE(GrammarAccepts(*qwen25, thought + call));
}

TEST(ChatToolsGrammarTest, ReasoningEffortNoneTurnsQwen3ThinkingOff) {
  ApiContext ctx = QwenContext();
  ctx.tokenizer = &Qwen3Tokenizer();
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"c\"}}\n</tool_call>";
  const std::string thought = "<think>\nParis.\n</think>\n\n";
  // As chat_template_kwargs {"enable_thinking": false}: the same prompt, no thinking allowed.
  const auto off =
      ParseChatCompletions(Body(R"("tool_choice":"required","reasoning_effort":"none")"), ctx);
  ASSERT_TRUE(off.ok()) << off.status();
  const auto kwargs_off = ParseChatCompletions(
      Body(R"("tool_choice":"required","chat_template_kwargs":{"enable_thinking":false})"), ctx);
  ASSERT_TRUE(kwargs_off.ok()) << kwargs_off.status();
  EXPECT_EQ(off->prompt_text, kwargs_off->prompt_text);
  EXPECT_TRUE(GrammarAccepts(*off, call));
  EXPECT_FALSE(GrammarAccepts(*off, thought + call));
  // chat_template_kwargs wins; other efforts change nothing.
  for (const char* fields : {R"("tool_choice":"required","reasoning_effort":"none",)"
                             R"("chat_template_kwargs":{"enable_thinking":true})",
                             R"("tool_choice":"required","reasoning_effort":"low")"}) {
    const auto on = ParseChatCompletions(Body(fields), ctx);
    ASSERT_TRUE(on.ok()) << on.status();
    EXPECT_TRUE(GrammarAccepts(*on, thought + call)) << fields;
  }
  // OpenAI's efforts only.
  for (const char* fields : {R"("reasoning_effort":"extreme")", R"("reasoning_effort":1)"}) {
    const auto bad = ParseChatCompletions(Body(fields), ctx);
    ASSERT_FALSE(bad.ok()) << fields;
    EXPECT_THAT(bad.status().message(),
                HasSubstr("reasoning_effort must be one of \"none\", \"minimal\", \"low\""));
  }
}

TEST(ChatToolsTest, SeparateReasoningNeedsTheRoutersParser) {
  ApiContext ctx = QwenContext();
  const std::string plain = R"({"messages":[{"role":"user","content":"x"}]})";
  const std::string off =
      R"({"messages":[{"role":"user","content":"x"}],"separate_reasoning":false})";
  EXPECT_FALSE(ParseChatCompletions(plain, ctx)->separate_reasoning);
  ctx.reasoning_parser = true;
  EXPECT_TRUE(ParseChatCompletions(plain, ctx)->separate_reasoning);  // SGLang's default
  EXPECT_FALSE(ParseChatCompletions(off, ctx)->separate_reasoning);
  EXPECT_EQ(Error(R"({"messages":[{"role":"user","content":"x"}],"separate_reasoning":1})"),
            "separate_reasoning must be a boolean, got integer");
}

// A prompt that ends inside a <think> block (a thinking template's) has the model close it
// before the call tool_choice requires; with the block closed in the prompt, the call comes first.
TEST(ChatToolsGrammarTest, RequiredCallsFollowTheBlockThePromptOpened) {
  ApiContext ctx = QwenContext();
  ctx.reasoning_parser = true;
  const auto body = [&](const std::string& prompt) {
    nlohmann::json ids = nlohmann::json::array();
    for (int32_t id : QwenTokenizer().Encode(prompt, /*add_special_tokens=*/false)) {
      ids.push_back(id);
    }
    return Body(absl::StrCat(R"("tool_choice":"required","input_ids":)", ids.dump()));
  };
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const auto open = ParseChatCompletions(body("<|im_start|>assistant\n<think>\n"), ctx);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_TRUE(open->reasoning_open);
  EXPECT_TRUE(GrammarAccepts(*open, "Paris it is.\n</think>\n\n" + call));
  EXPECT_TRUE(GrammarAccepts(*open, "<think>Paris.</think>" + call));
  EXPECT_FALSE(GrammarAccepts(*open, call));  // still inside the block
  EXPECT_FALSE(GrammarAccepts(*open, "Paris.</think>\n\nSure: " + call));
  const auto closed =
      ParseChatCompletions(body("<|im_start|>assistant\n<think>\n\n</think>\n\n"), ctx);
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_TRUE(GrammarAccepts(*closed, call));
  EXPECT_FALSE(GrammarAccepts(*closed, "Paris.</think>" + call));
}

// The answer starts as reasoning when the prompt ends inside a <think> block (a thinking
// template's generation prompt, here given as input_ids) or the parser always thinks.
TEST(ChatToolsTest, APromptEndingInThinkOpensTheReasoning) {
  ApiContext ctx = QwenContext();
  ctx.reasoning_parser = true;
  const std::string plain = R"({"messages":[{"role":"user","content":"x"}]})";
  EXPECT_FALSE(ParseChatCompletions(plain, ctx)->reasoning_open);
  const auto body = [&](const std::string& prompt, const std::string& extra) {
    nlohmann::json ids = nlohmann::json::array();
    for (int32_t id : QwenTokenizer().Encode(prompt, /*add_special_tokens=*/false)) {
      ids.push_back(id);
    }
    return absl::StrCat(R"({"messages":[{"role":"user","content":"x"}],"input_ids":)", ids.dump(),
                        extra, "}");
  };
  const std::string thinking = "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n";
  EXPECT_TRUE(ParseChatCompletions(body(thinking, ""), ctx)->reasoning_open);
  EXPECT_FALSE(
      ParseChatCompletions(body(thinking, R"(,"separate_reasoning":false)"), ctx)->reasoning_open);
  EXPECT_FALSE(ParseChatCompletions(body("<|im_start|>assistant\n<think>\n\n</think>\n\n", ""), ctx)
                   ->reasoning_open);
  ctx.reasoning_always = true;  // deepseek-r1, qwen3-thinking
  EXPECT_TRUE(ParseChatCompletions(plain, ctx)->reasoning_open);
  ctx.reasoning_parser = false;
  ctx.reasoning_always = false;
  EXPECT_FALSE(ParseChatCompletions(body(thinking, ""), ctx)->reasoning_open);
}

}  // namespace
}  // namespace tandem::router
