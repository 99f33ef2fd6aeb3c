// The Responses API's answers (router/api/responses.h ResponseShaper): Response objects, the
// OpenAI stream events, reasoning and function-call items, logprobs, usage, and what is stored
// for retrieval (the request side: responses_test.cc).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/response.h"
#include "router/api/responses.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kWeatherTool[] =
    R"({"type":"function","name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}})";

// A parsed /v1/responses request to shape answers for.
RoutedRequest ResponsesRequestFor(const std::string& body, bool reasoning = false) {
  ApiContext ctx = TinyEnglishContext();
  ctx.reasoning_parser = reasoning;
  auto parsed = ParseResponses(body, ctx);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *std::move(parsed) : RoutedRequest();
}

proto::DecodeEvent Text(const std::string& text) {
  proto::DecodeEvent e;
  e.add_token_ids(7);
  e.set_text(text);
  return e;
}

proto::DecodeEvent End(const std::string& text, proto::FinishReason::Type type) {
  proto::DecodeEvent e = Text(text);
  e.set_finished(true);
  e.mutable_finish_reason()->set_type(type);
  e.set_prompt_tokens(9);
  e.set_completion_tokens(4);
  e.set_cached_tokens(2);
  return e;
}

struct SseEvent {
  std::string type;
  Json data;
};

// "event: T\ndata: {...}\n\n" events, checking the framing and that data.type is T.
std::vector<SseEvent> Events(const std::string& sse) {
  std::vector<SseEvent> events;
  size_t pos = 0;
  while (pos < sse.size()) {
    EXPECT_EQ(sse.compare(pos, 7, "event: "), 0) << sse.substr(pos);
    const size_t line = sse.find('\n', pos);
    const size_t end = sse.find("\n\n", pos);
    if (line == std::string::npos || end == std::string::npos) {
      ADD_FAILURE() << "unterminated event: " << sse.substr(pos);
      break;
    }
    SseEvent event;
    event.type = sse.substr(pos + 7, line - pos - 7);
    EXPECT_EQ(sse.compare(line + 1, 6, "data: "), 0);
    event.data = Json::parse(sse.substr(line + 7, end - line - 7));
    EXPECT_EQ(event.data["type"], event.type);
    events.push_back(std::move(event));
    pos = end + 2;
  }
  return events;
}

std::vector<std::string> Types(const std::vector<SseEvent>& events) {
  std::vector<std::string> types;
  for (const SseEvent& e : events) types.push_back(e.type);
  return types;
}

TEST(ResponsesShapeTest, BodyIsTheResponseObjectAndIsStored) {
  const RoutedRequest request =
      ResponsesRequestFor(R"({"input":"Hi","instructions":"Be brief.","max_output_tokens":4})");
  ResponseShaper shaper(request);
  EXPECT_EQ(shaper.response_id(), request.responses->id);
  shaper.Accumulate(Text("Hello"));
  shaper.Accumulate(End(" there", proto::FinishReason::LENGTH));
  ASSERT_TRUE(shaper.FinalStatus().ok());
  EXPECT_FALSE(shaper.ToStore().has_value());  // nothing to keep before the body is made
  const Json body = Json::parse(shaper.Body(0));
  EXPECT_EQ(body["id"], request.responses->id);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(body["instructions"], "Be brief.");
  EXPECT_EQ(body["model"], "tandem-tiny");
  ASSERT_EQ(body["output"].size(), 1u);
  const Json& message = body["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "incomplete");  // its text was cut, as OpenAI marks it
  EXPECT_THAT(message["id"].get<std::string>(), ::testing::MatchesRegex("msg_[0-9a-f]{32}"));
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "Hello there");
  EXPECT_EQ(body["usage"], Json::parse(R"({"input_tokens":9,"input_tokens_details":
      {"cached_tokens":2},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0},
      "total_tokens":13})"));
  const std::optional<StoredResponse> stored = shaper.ToStore();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(Json::parse(stored->body), body);
  EXPECT_EQ(stored->conversation, Json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello there"}])"));
  EXPECT_EQ(stored->input_items.size(), 1u);

  ResponseShaper unstored(ResponsesRequestFor(R"({"input":"Hi","store":false})"));
  unstored.Accumulate(End("x", proto::FinishReason::STOP));
  EXPECT_EQ(Json::parse(unstored.Body(0))["status"], "completed");
  EXPECT_FALSE(unstored.ToStore().has_value());
}

// The answer's ids, one event each, their text as a worker streams it (End's counters last).
std::vector<proto::DecodeEvent> TokenEvents(const std::string& answer,
                                            proto::FinishReason::Type type) {
  const engine::Tokenizer& tokenizer = TinyEnglishTokenizer();
  engine::IncrementalDetokenizer detokenizer(tokenizer);
  const std::vector<int32_t> ids = tokenizer.Encode(answer, false);
  std::vector<proto::DecodeEvent> events;
  for (size_t i = 0; i < ids.size(); ++i) {
    proto::DecodeEvent e;
    e.add_token_ids(ids[i]);
    e.set_text(detokenizer.Push(ids[i]));
    if (i + 1 == ids.size()) {
      e.set_text(e.text() + detokenizer.Finish());
      e.set_finished(true);
      e.mutable_finish_reason()->set_type(type);
      e.set_prompt_tokens(9);
      e.set_completion_tokens(static_cast<int64_t>(ids.size()));
    }
    events.push_back(std::move(e));
  }
  return events;
}

// The first k ids whose decoded text holds "</think>": what reasoning_tokens should say.
int64_t TokensThroughThinkClose(const std::string& answer) {
  const engine::Tokenizer& tokenizer = TinyEnglishTokenizer();
  const std::vector<int32_t> ids = tokenizer.Encode(answer, false);
  for (size_t k = 1; k <= ids.size(); ++k) {
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k));
    if (tokenizer.Decode(prefix).find("</think>") != std::string::npos) return k;
  }
  return -1;
}

Json UsageOf(const std::string& answer, proto::FinishReason::Type type, bool reasoning,
             bool stream) {
  RoutedRequest request = ResponsesRequestFor(
      absl::StrCat(R"({"input":"Weather?","stream":)", stream ? "true" : "false", "}"), reasoning);
  ResponseShaper shaper(request, &TinyEnglishTokenizer());
  std::string sse;
  for (const proto::DecodeEvent& e : TokenEvents(answer, type)) {
    if (stream) {
      sse += shaper.StreamEvent(e);
    } else {
      shaper.Accumulate(e);
    }
  }
  if (!stream) return Json::parse(shaper.Body(0))["usage"];
  const std::vector<SseEvent> events = Events(sse);
  return events.empty() ? Json() : events.back().data["response"]["usage"];
}

// usage.output_tokens_details.reasoning_tokens counts the answer's tokens through "</think>"
// (all of them when the reasoning was cut off), with the router's --reasoning-parser only.
TEST(ResponsesShapeTest, ReasoningTokensAreTheThinkingPart) {
  const std::string answer = "<think>Let me see what the weather is.</think>It is cold in Oslo.";
  const int64_t thinking = TokensThroughThinkClose(answer);
  const int64_t all = static_cast<int64_t>(TinyEnglishTokenizer().Encode(answer, false).size());
  ASSERT_GT(thinking, 5);
  ASSERT_LT(thinking, all);
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    const Json usage = UsageOf(answer, proto::FinishReason::STOP, true, stream);
    EXPECT_EQ(usage["output_tokens"], all);
    EXPECT_EQ(usage["output_tokens_details"]["reasoning_tokens"], thinking);
    const std::string cut = "<think>Still thinking about";
    if (stream) {  // the cut item is marked incomplete in the stream too
      RoutedRequest request = ResponsesRequestFor(R"({"input":"Hi","stream":true})", true);
      ResponseShaper shaper(request, &TinyEnglishTokenizer());
      std::string sse;
      for (const proto::DecodeEvent& e : TokenEvents(cut, proto::FinishReason::LENGTH)) {
        sse += shaper.StreamEvent(e);
      }
      const std::vector<SseEvent> events = Events(sse);
      ASSERT_GE(events.size(), 2u);
      EXPECT_EQ(events[events.size() - 2].type, "response.output_item.done");
      // The (empty) message after the cut reasoning is the answer's last item.
      EXPECT_EQ(events[events.size() - 2].data["item"]["type"], "message");
      EXPECT_EQ(events[events.size() - 2].data["item"]["status"], "incomplete");
      EXPECT_EQ(events.back().type, "response.incomplete");
    }
    EXPECT_EQ(UsageOf(cut, proto::FinishReason::LENGTH, true,
                      stream)["output_tokens_details"]["reasoning_tokens"],
              static_cast<int64_t>(TinyEnglishTokenizer().Encode(cut, false).size()));
    EXPECT_EQ(UsageOf("It is cold.", proto::FinishReason::STOP, true,
                      stream)["output_tokens_details"]["reasoning_tokens"],
              0);
    EXPECT_EQ(UsageOf(answer, proto::FinishReason::STOP, false,
                      stream)["output_tokens_details"]["reasoning_tokens"],
              0);
  }
}

// Chat reports the same count as OpenAI does, in usage.completion_tokens_details, whole and in
// the stream's usage chunk; without separated reasoning the field is left out, as before.
TEST(ResponsesShapeTest, ChatUsageCountsReasoningTokensToo) {
  const std::string answer = "<think>Let me see what the weather is.</think>It is cold in Oslo.";
  const int64_t thinking = TokensThroughThinkClose(answer);
  for (const bool reasoning : {true, false}) {
    ApiContext ctx = TinyEnglishContext();
    ctx.reasoning_parser = reasoning;
    auto whole =
        ParseChatCompletions(R"({"messages":[{"role":"user","content":"Weather?"}]})", ctx);
    auto streamed = ParseChatCompletions(
        R"({"messages":[{"role":"user","content":"Weather?"}],"stream":true,
            "stream_options":{"include_usage":true}})",
        ctx);
    ASSERT_TRUE(whole.ok() && streamed.ok());
    ResponseShaper shaper(*whole, &TinyEnglishTokenizer());
    ResponseShaper stream_shaper(*streamed, &TinyEnglishTokenizer());
    std::string sse;
    for (const proto::DecodeEvent& e : TokenEvents(answer, proto::FinishReason::STOP)) {
      shaper.Accumulate(e);
      sse += stream_shaper.StreamEvent(e);
    }
    const Json usage = Json::parse(shaper.Body(0))["usage"];
    const size_t last = sse.rfind("data: {");
    ASSERT_NE(last, std::string::npos);
    const Json chunk = Json::parse(sse.substr(last + 6, sse.find("\n\n", last) - last - 6));
    EXPECT_EQ(chunk["usage"], usage);
    if (reasoning) {
      EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"], thinking) << usage;
    } else {
      EXPECT_FALSE(usage.contains("completion_tokens_details")) << usage;
    }
  }
}

// A parser that always thinks (deepseek-r1, qwen3-thinking): an answer without "<think>" is
// reasoning until "</think>", whole and streamed, and its tokens through it count as reasoning.
TEST(ResponsesShapeTest, AnAnswerInsideAnOpenThinkBlockIsReasoning) {
  const std::string answer = "Let me see what the weather is.</think>It is cold in Oslo.";
  ApiContext ctx = TinyEnglishContext();
  ctx.reasoning_parser = true;
  ctx.reasoning_always = true;
  auto whole = ParseChatCompletions(R"({"messages":[{"role":"user","content":"Weather?"}]})", ctx);
  auto streamed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"Weather?"}],"stream":true})", ctx);
  ASSERT_TRUE(whole.ok() && streamed.ok());
  ResponseShaper shaper(*whole, &TinyEnglishTokenizer());
  ResponseShaper stream_shaper(*streamed, &TinyEnglishTokenizer());
  std::string reasoning, content;
  for (const proto::DecodeEvent& e : TokenEvents(answer, proto::FinishReason::STOP)) {
    shaper.Accumulate(e);
    const std::string sse = stream_shaper.StreamEvent(e);
    for (size_t at = sse.find("data: {"); at != std::string::npos;
         at = sse.find("data: {", at + 1)) {
      const Json chunk = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
      if (chunk["choices"].empty()) continue;
      const Json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
        reasoning += delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content") && delta["content"].is_string()) {
        content += delta["content"].get<std::string>();
      }
    }
  }
  const Json body = Json::parse(shaper.Body(0));
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Let me see what the weather is.") << message;
  EXPECT_EQ(message["content"], "It is cold in Oslo.") << message;
  EXPECT_EQ(reasoning, "Let me see what the weather is.");
  EXPECT_EQ(content, "It is cold in Oslo.");
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            TokensThroughThinkClose(answer));
}

constexpr char kCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";

TEST(ResponsesShapeTest, CallsAreFunctionCallItems) {
  const RoutedRequest request = ResponsesRequestFor(absl::StrCat(
      R"({"input":"Weather?","tool_choice":"required","tools":[)", kWeatherTool, "]}"));
  ResponseShaper shaper(request);
  shaper.Accumulate(End(kCall, proto::FinishReason::STOP));
  const Json body = Json::parse(shaper.Body(0));
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 1u);  // no empty message beside the call
  const Json& call = body["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["arguments"].get<std::string>()), Json({{"city", "Oslo"}}));
  EXPECT_THAT(call["call_id"].get<std::string>(), ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::MatchesRegex("fc_[0-9a-f]{32}"));
  // The next turn sees the call under the id the client was given.
  const std::optional<StoredResponse> stored = shaper.ToStore();
  ASSERT_TRUE(stored.has_value());
  const Json& turn = stored->conversation.back();
  EXPECT_EQ(turn["tool_calls"][0]["id"], call["call_id"]);
}

TEST(ResponsesShapeTest, StreamEventsFollowTheAnswer) {
  RoutedRequest request = ResponsesRequestFor(
      absl::StrCat(R"({"input":"Weather?","stream":true,"tools":[)", kWeatherTool, "]}"),
      /*reasoning=*/true);
  request.separate_reasoning = true;
  ResponseShaper shaper(request);
  std::string sse;
  for (const char* piece : {"<think>Let me", " see.</think>", "It is ", "cold. "}) {
    sse += shaper.StreamEvent(Text(piece));
  }
  sse += shaper.StreamEvent(End(kCall, proto::FinishReason::STOP));
  EXPECT_EQ(shaper.StreamDone(), "");  // no [DONE] after response.completed
  const std::vector<SseEvent> events = Events(sse);
  EXPECT_THAT(
      Types(events),
      ::testing::ElementsAre(
          "response.created", "response.in_progress", "response.output_item.added",
          "response.content_part.added", "response.reasoning_text.delta",
          "response.reasoning_text.delta", "response.reasoning_text.done",
          "response.content_part.done", "response.output_item.done", "response.output_item.added",
          "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
          "response.output_text.done", "response.content_part.done", "response.output_item.done",
          "response.output_item.added", "response.function_call_arguments.delta",
          "response.function_call_arguments.done", "response.output_item.done",
          "response.completed"));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], i);
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_TRUE(events[0].data["response"]["output"].empty());
  EXPECT_EQ(events[4].data["output_index"], 0);
  EXPECT_EQ(events[6].data["text"], "Let me see.");
  EXPECT_EQ(events[11].data["output_index"], 1);
  EXPECT_EQ(events[11].data["item_id"], events[9].data["item"]["id"]);
  EXPECT_EQ(events[13].data["text"], "It is cold.");
  EXPECT_EQ(events[16].data["output_index"], 2);
  const Json& final = events.back().data["response"];
  EXPECT_EQ(final["status"], "completed");
  ASSERT_EQ(final["output"].size(), 3u);
  EXPECT_EQ(final["output"][0]["type"], "reasoning");
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "Let me see.");
  EXPECT_EQ(final["output"][1]["content"][0]["text"], "It is cold.");
  EXPECT_EQ(final["output"][2]["type"], "function_call");
  EXPECT_EQ(final["output"][2], events[19].data["item"]);
  EXPECT_EQ(final["usage"]["output_tokens"], 4);
  const std::optional<StoredResponse> stored = shaper.ToStore();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(Json::parse(stored->body), final);
  const Json& turn = stored->conversation.back();
  EXPECT_EQ(turn["content"], "It is cold.");
  EXPECT_EQ(turn["tool_calls"][0]["id"], final["output"][2]["call_id"]);
}

proto::DecodeEvent Scored(const std::string& text, int32_t id, bool finished) {
  proto::DecodeEvent e = finished ? End(text, proto::FinishReason::LENGTH) : Text(text);
  e.set_token_ids(0, id);
  e.add_token_logprobs(-0.5f);
  proto::TopLogprobs* top = e.add_top_logprobs();
  for (int32_t alternative : {id, id + 1}) {
    top->add_token_ids(alternative);
    top->add_logprobs(-0.5f - static_cast<float>(alternative - id));
  }
  return e;
}

TEST(ResponsesShapeTest, LogprobsGoOnTheMessageText) {
  const RoutedRequest request = ResponsesRequestFor(
      R"({"input":"x","include":["message.output_text.logprobs"],"top_logprobs":2})");
  EXPECT_TRUE(request.return_logprob);
  EXPECT_EQ(request.top_logprobs, 2);
  EXPECT_EQ(request.sampling.top_logprobs_num(), 2);
  EXPECT_EQ(request.responses->echo["top_logprobs"], 2);
  const int32_t hello = TinyEnglishTokenizer().Encode("Hello", false).front();

  ResponseShaper whole(request, &TinyEnglishTokenizer());
  whole.Accumulate(Scored("Hello", hello, false));
  whole.Accumulate(Scored("Hello", hello, true));
  const Json part = Json::parse(whole.Body(0))["output"][0]["content"][0];
  ASSERT_EQ(part["logprobs"].size(), 2u);
  EXPECT_EQ(part["logprobs"][0]["token"],
            TinyEnglishTokenizer().TokenBytes(hello, /*skip_special_tokens=*/false));
  EXPECT_EQ(part["logprobs"][0]["logprob"], -0.5);
  EXPECT_EQ(part["logprobs"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(part["logprobs"][0]["top_logprobs"][1]["logprob"], -1.5);

  ResponseShaper streamed(request, &TinyEnglishTokenizer());
  std::string sse = streamed.StreamEvent(Scored("Hello", hello, false));
  sse += streamed.StreamEvent(Scored("Hello", hello, true));
  size_t delta_entries = 0;
  Json final;
  for (const SseEvent& event : Events(sse)) {
    if (event.type == "response.output_text.delta") delta_entries += event.data["logprobs"].size();
    if (event.type == "response.incomplete") final = event.data["response"];
  }
  EXPECT_EQ(delta_entries, 2u);
  EXPECT_EQ(final["output"][0]["content"][0], part);

  // Without asking, no entries.
  ResponseShaper plain(ResponsesRequestFor(R"({"input":"x","top_logprobs":0})"));
  plain.Accumulate(End("Hi", proto::FinishReason::STOP));
  EXPECT_TRUE(Json::parse(plain.Body(0))["output"][0]["content"][0]["logprobs"].empty());
}

TEST(ResponsesShapeTest, AnEmptyAnswerStillHasItsMessage) {
  ResponseShaper shaper(ResponsesRequestFor(R"({"input":"x","stream":true})"));
  const std::vector<SseEvent> events =
      Events(shaper.StreamEvent(End("", proto::FinishReason::STOP)));
  ASSERT_FALSE(events.empty());
  const Json& final = events.back().data["response"];
  ASSERT_EQ(final["output"].size(), 1u);
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "");
}

TEST(ResponsesShapeTest, AnIllFormedAnswerIsStoredAsTheClientSawIt) {
  ResponseShaper shaper(ResponsesRequestFor(R"({"input":"x"})"));
  shaper.Accumulate(End("caf\xc3", proto::FinishReason::STOP));
  const Json body = Json::parse(shaper.Body(0));
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "caf\xef\xbf\xbd");
  std::optional<StoredResponse> entry = shaper.ToStore();
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->conversation.back()["content"], "caf\xef\xbf\xbd");
  ResponseStore store(1 << 20);
  store.Put(shaper.response_id(), *std::move(entry));
  ApiContext ctx = TinyEnglishContext();
  ctx.response_store = &store;
  const auto next = ParseResponses(
      absl::StrCat(R"({"input":"y","previous_response_id":")", shaper.response_id(), "\"}"), ctx);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->prompt_text, HasSubstr("caf\xef\xbf\xbd"));
}

TEST(ResponsesShapeTest, AbortsAndErrorsFailTheResponse) {
  ResponseShaper aborted(ResponsesRequestFor(R"({"input":"x","stream":true})"));
  std::string sse = aborted.StreamEvent(Text("Hel"));
  proto::DecodeEvent abort = End("", proto::FinishReason::ABORT);
  abort.mutable_finish_reason()->set_message("aborted by /abort_request");
  sse += aborted.StreamEvent(abort);
  const std::vector<SseEvent> events = Events(sse);
  EXPECT_EQ(events.back().type, "response.failed");
  EXPECT_EQ(events.back().data["response"]["status"], "failed");
  EXPECT_THAT(events.back().data["response"]["error"]["message"].get<std::string>(),
              HasSubstr("aborted by /abort_request"));
  EXPECT_EQ(events.back().data["response"]["output"][0]["content"][0]["text"], "Hel");
  EXPECT_FALSE(aborted.ToStore().has_value());

  ResponseShaper broken(ResponsesRequestFor(R"({"input":"x","stream":true})"));
  std::string broken_sse = broken.StreamEvent(Text("Hel"));
  broken_sse += broken.StreamError(absl::UnavailableError("the decode worker went away"));
  EXPECT_EQ(broken.StreamEvent(Text("lo")), "");  // nothing after the error
  const std::vector<SseEvent> broken_events = Events(broken_sse);
  ASSERT_GE(broken_events.size(), 2u);
  EXPECT_EQ(broken_events[broken_events.size() - 2].type, "error");
  EXPECT_EQ(broken_events[broken_events.size() - 2].data["message"], "the decode worker went away");
  EXPECT_EQ(broken_events.back().type, "response.failed");
  EXPECT_FALSE(broken.ToStore().has_value());

  // Not streamed: an abort is the request's error, as chat's.
  ResponseShaper whole(ResponsesRequestFor(R"({"input":"x"})"));
  whole.Accumulate(abort);
  EXPECT_EQ(whole.FinalStatus().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tandem::router
