// Tool calls and reasoning read back from a chat answer: the splitters over every way a stream
// can cut the text, and ResponseShaper's OpenAI shapes (message.tool_calls, delta.tool_calls,
// finish_reason "tool_calls", reasoning_content).
#include "router/api/tool_calls.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/response.h"

namespace tandem::router::api_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::MatchesRegex;

const std::vector<std::string> kNames = {"get_weather", "get_time"};

// The text fed in pieces cut at `cuts` (byte offsets), everything collected.
SplitText FeedInPieces(ToolCallSyntax syntax, const std::string& text,
                       const std::vector<size_t>& cuts) {
  ToolCallSplitter splitter(syntax, kNames);
  SplitText all;
  size_t from = 0;
  auto collect = [&](SplitText part) {
    all.content += part.content;
    for (ParsedToolCall& call : part.calls) all.calls.push_back(std::move(call));
  };
  for (size_t cut : cuts) {
    collect(splitter.Feed(text.substr(from, cut - from)));
    from = cut;
  }
  collect(splitter.Feed(text.substr(from)));
  collect(splitter.Finish());
  return all;
}

std::vector<std::string> Names(const SplitText& split) {
  std::vector<std::string> names;
  for (const ParsedToolCall& call : split.calls) names.push_back(call.name);
  return names;
}

constexpr char kTwoCalls[] =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
    "</tool_call>";

TEST(ToolCallSplitterTest, QwenCallsAreSplitFromTheTextAtEveryCut) {
  const std::string text = kTwoCalls;
  // Every single cut, and every byte a piece of its own.
  std::vector<std::vector<size_t>> cut_sets;
  for (size_t i = 1; i < text.size(); ++i) cut_sets.push_back({i});
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  cut_sets.push_back(every);
  for (const std::vector<size_t>& cuts : cut_sets) {
    const SplitText split = FeedInPieces(ToolCallSyntax::kQwen, text, cuts);
    ASSERT_EQ(split.content, "Let me check.") << "cut at " << cuts.front();
    ASSERT_THAT(Names(split), ElementsAre("get_weather", "get_time"));
    EXPECT_EQ(split.calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(split.calls[1].arguments, "{}");
    EXPECT_THAT(split.calls[0].id, MatchesRegex("call_[0-9a-f]{24}"));
    EXPECT_NE(split.calls[0].id, split.calls[1].id);
  }
}

TEST(ToolCallSplitterTest, ContentIsShownAsSoonAsItCannotStartACall) {
  ToolCallSplitter splitter(ToolCallSyntax::kQwen, kNames);
  EXPECT_EQ(splitter.Feed("Hello wor").content, "Hello wor");
  EXPECT_EQ(splitter.Feed("ld <tool").content, "ld");  // " <tool" may lead to a call
  EXPECT_EQ(splitter.Feed("box>").content, " <toolbox>");
  const SplitText call = splitter.Feed("<tool_call>{\"name\":\"get_time\"}</tool_call>");
  EXPECT_EQ(call.content, "");
  ASSERT_THAT(Names(call), ElementsAre("get_time"));
  EXPECT_EQ(splitter.Finish().content, "");
}

TEST(ToolCallSplitterTest, MalformedCallsStayContent) {
  for (const std::string body :
       {"{\"name\": \"get_weather\", \"arguments\": {\"city\": }",  // not JSON
        "{\"name\": \"launch\", \"arguments\": {}}",                // not one of the tools
        "{\"arguments\": {}}",                                      // no name
        "{\"name\": \"get_time\", \"arguments\": \"now\"}",         // arguments not an object
        "[1, 2]"}) {
    const std::string text = "<tool_call>\n" + body + "\n</tool_call>";
    const SplitText split = ToolCallSplitter::SplitAll(ToolCallSyntax::kQwen, kNames, text);
    EXPECT_TRUE(split.calls.empty()) << body;
    EXPECT_EQ(split.content, text);
  }
  // Nesting past the JSON depth limit is never parsed (nor printed back recursively).
  const std::string deep =
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"a\": " + std::string(100000, '[') +
      std::string(100000, ']') + "}}</tool_call>";
  const SplitText deep_split = ToolCallSplitter::SplitAll(ToolCallSyntax::kQwen, kNames, deep);
  EXPECT_TRUE(deep_split.calls.empty());
  EXPECT_EQ(deep_split.content, deep);
  // An unfinished call is content too, and a good call beside a bad one still counts.
  const std::string cut = "<tool_call>\n{\"name\": \"get_time\"";
  EXPECT_EQ(ToolCallSplitter::SplitAll(ToolCallSyntax::kQwen, kNames, cut).content, cut);
  const SplitText mixed = ToolCallSplitter::SplitAll(
      ToolCallSyntax::kQwen, kNames,
      "<tool_call>oops</tool_call><tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>");
  EXPECT_EQ(mixed.content, "<tool_call>oops</tool_call>");
  EXPECT_THAT(Names(mixed), ElementsAre("get_time"));
}

TEST(ToolCallSplitterTest, PlainTextIsUnchanged) {
  const std::string text = "  A fortune: <b>luck</b> awaits.\n\n";
  for (ToolCallSyntax syntax :
       {ToolCallSyntax::kNone, ToolCallSyntax::kQwen, ToolCallSyntax::kLlama3}) {
    EXPECT_EQ(FeedInPieces(syntax, text, {3, 5, 14, 30}).content, text);
  }
}

TEST(ToolCallSplitterTest, Llama3JsonCalls) {
  const std::string one = R"({"name": "get_weather", "parameters": {"city": "Oslo"}})";
  SplitText split = FeedInPieces(ToolCallSyntax::kLlama3, "\n" + one, {1, 4, 20});
  EXPECT_EQ(split.content, "");
  ASSERT_THAT(Names(split), ElementsAre("get_weather"));
  EXPECT_EQ(split.calls[0].arguments, R"({"city":"Oslo"})");

  split = ToolCallSplitter::SplitAll(
      ToolCallSyntax::kLlama3, kNames,
      "<|python_tag|>" + one + "; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"a;b\"}}");
  EXPECT_THAT(Names(split), ElementsAre("get_weather", "get_time"));
  EXPECT_EQ(split.calls[1].arguments, R"({"tz":"a;b"})");

  const std::string bad = R"({"name": "nope", "parameters": {}})";
  split = ToolCallSplitter::SplitAll(ToolCallSyntax::kLlama3, kNames, bad);
  EXPECT_TRUE(split.calls.empty());
  EXPECT_EQ(split.content, bad);
}

TEST(ReasoningSplitterTest, ThinkBlockIsSeparatedAtEveryCut) {
  const std::string text = "<think>\nFirst, the weather.\n</think>\n\nIt is sunny.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ReasoningSplitter splitter;
    ReasoningSplitter::Split a = splitter.Feed(text.substr(0, cut));
    ReasoningSplitter::Split b = splitter.Feed(text.substr(cut));
    ReasoningSplitter::Split c = splitter.Finish();
    EXPECT_EQ(a.reasoning + b.reasoning + c.reasoning, "First, the weather.") << cut;
    EXPECT_EQ(a.content + b.content + c.content, "It is sunny.") << cut;
  }
  EXPECT_EQ(ReasoningSplitter::SplitAll("No thinking here.").content, "No thinking here.");
  EXPECT_EQ(ReasoningSplitter::SplitAll("<think>cut off").reasoning, "cut off");
  EXPECT_EQ(ReasoningSplitter::SplitAll("<thin").content, "<thin");
}

// The prompt opened the block (a template ending in "<think>\n", or a parser that always
// thinks): the answer is reasoning until "</think>", with or without a "<think>" of its own.
TEST(ReasoningSplitterTest, AnOpenBlockMakesTheAnswerReasoningUntilItCloses) {
  for (const std::string text : {"First, the weather.\n</think>\n\nIt is sunny.",
                                 "<think>\nFirst, the weather.\n</think>\n\nIt is sunny.",
                                 "\n  First, the weather.</think>It is sunny."}) {
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ReasoningSplitter splitter(/*open=*/true);
      ReasoningSplitter::Split a = splitter.Feed(text.substr(0, cut));
      ReasoningSplitter::Split b = splitter.Feed(text.substr(cut));
      ReasoningSplitter::Split c = splitter.Finish();
      EXPECT_EQ(a.reasoning + b.reasoning + c.reasoning, "First, the weather.") << text << cut;
      EXPECT_EQ(a.content + b.content + c.content, "It is sunny.") << text << cut;
    }
  }
  EXPECT_EQ(ReasoningSplitter::SplitAll("cut off", true).reasoning, "cut off");
  EXPECT_EQ(ReasoningSplitter::SplitAll("cut off", true).content, "");
  EXPECT_EQ(ReasoningSplitter::SplitAll("<thin", true).reasoning, "<thin");
  EXPECT_EQ(ReasoningSplitter::SplitAll("</think>All content.", true).content, "All content.");
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("ab</think>cd", true), 10u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("<think>ab</think>cd", true), 17u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("cut off", true), 7u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("ab</think>cd", false), 0u);
}

TEST(ReasoningSplitterTest, ReasoningBytesRunThroughTheClosingTag) {
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("<think>ab</think>cd"), 17u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("\n <think>ab</think>"), 19u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("<think></think>"), 15u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("<think>cut off"), 14u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("no </think> opened"), 0u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes("<thin"), 0u);
  EXPECT_EQ(ReasoningSplitter::ReasoningBytes(""), 0u);
}

}  // namespace
}  // namespace tandem::router::api_internal

namespace tandem::router {
namespace {

using Json = nlohmann::json;

RoutedRequest ToolRequest(bool stream) {
  RoutedRequest r;
  r.kind = ApiKind::kChatCompletions;
  r.rid = "abc";
  r.model = "m";
  r.input_ids = {1, 2, 3};
  r.created = 1700000000;
  r.stream = stream;
  r.tool_call_syntax = ToolCallSyntax::kQwen;
  r.tool_names = {"get_weather"};
  return r;
}

proto::DecodeEvent Event(const std::string& text, bool finished) {
  proto::DecodeEvent e;
  e.add_token_ids(7);
  e.set_text(text);
  if (finished) {
    e.set_finished(true);
    e.mutable_finish_reason()->set_type(proto::FinishReason::STOP);
    e.set_prompt_tokens(3);
    e.set_completion_tokens(3);
  }
  return e;
}

constexpr char kCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

TEST(ToolCallResponseTest, NonStreamedBodyHasToolCalls) {
  ResponseShaper shaper(ToolRequest(false));
  shaper.Accumulate(Event(kCall, true));
  const Json body = Json::parse(shaper.Body(0));
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city":"Paris"})"));
}

TEST(ToolCallResponseTest, StreamedCallIsOneDeltaAfterTheContent) {
  ResponseShaper shaper(ToolRequest(true));
  std::string sse;
  const std::string text = std::string("Checking.\n") + kCall;
  for (size_t i = 0; i < text.size(); i += 5) {
    sse += shaper.StreamEvent(Event(text.substr(i, 5), i + 5 >= text.size()));
  }
  std::string content;
  std::vector<Json> calls;
  Json finish;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    const Json chunk = Json::parse(sse.substr(pos + 6, end - pos - 6));
    const Json& choice = chunk["choices"][0];
    const Json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) {
      EXPECT_TRUE(calls.empty()) << "content after the call";
      content += delta["content"].get<std::string>();
    }
    if (delta.contains("tool_calls")) {
      for (const Json& c : delta["tool_calls"]) calls.push_back(c);
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    pos = end;
  }
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(ToolCallResponseTest, ReasoningContentWhenSeparated) {
  RoutedRequest r = ToolRequest(false);
  r.tool_call_syntax = ToolCallSyntax::kNone;
  r.separate_reasoning = true;
  ResponseShaper shaper(r);
  shaper.Accumulate(Event("<think>hmm</think>\n\nSunny.", true));
  const Json message = Json::parse(shaper.Body(0))["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "hmm");
  EXPECT_EQ(message["content"], "Sunny.");

  r.stream = true;
  ResponseShaper streamed(r);
  std::string sse = streamed.StreamEvent(Event("<think>hm", false));
  sse += streamed.StreamEvent(Event("m</think>\n\nSunny.", true));
  EXPECT_NE(sse.find(R"("reasoning_content":"hm")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("content":"Sunny.")"), std::string::npos) << sse;
  EXPECT_EQ(sse.find("think>"), std::string::npos) << sse;
}

}  // namespace
}  // namespace tandem::router
