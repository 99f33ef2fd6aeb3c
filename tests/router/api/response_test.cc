// ResponseShaper, ErrorResponse and ModelsBody: every body and SSE shape, compared as parsed JSON
// objects (strings only for the SSE framing).
#include "router/api/response.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

RoutedRequest Request(ApiKind kind) {
  RoutedRequest r;
  r.kind = kind;
  r.rid = "abc";
  r.model = "tandem-tiny";
  r.input_ids = {1, 2, 3};
  r.created = 1700000000;
  return r;
}

proto::DecodeEvent Tokens(std::vector<int32_t> ids, const std::string& text,
                          std::vector<float> logprobs = {}) {
  proto::DecodeEvent e;
  for (int32_t id : ids) e.add_token_ids(id);
  for (float lp : logprobs) e.add_token_logprobs(lp);
  e.set_text(text);
  return e;
}

proto::DecodeEvent Final(std::vector<int32_t> ids, const std::string& text,
                         proto::FinishReason::Type type, std::vector<float> logprobs = {}) {
  proto::DecodeEvent e = Tokens(std::move(ids), text, std::move(logprobs));
  e.set_finished(true);
  e.mutable_finish_reason()->set_type(type);
  e.set_prompt_tokens(3);
  e.set_completion_tokens(3);
  e.set_cached_tokens(2);
  return e;
}

// The JSON objects of "data: {...}\n\n" events, checking the framing; "[DONE]" becomes a string.
std::vector<Json> SseEvents(const std::string& sse) {
  std::vector<Json> events;
  size_t pos = 0;
  while (pos < sse.size()) {
    EXPECT_EQ(sse.compare(pos, 6, "data: "), 0) << sse.substr(pos);
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    EXPECT_EQ(payload.find('\n'), std::string::npos);
    events.push_back(payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload));
    pos = end + 2;
  }
  return events;
}

TEST(ResponseShaperTest, GenerateBody) {
  RoutedRequest r = Request(ApiKind::kGenerate);
  r.return_logprob = true;
  ResponseShaper shaper(r);
  shaper.Accumulate(Tokens({10, 11}, "Hello", {-0.5f, -0.25f}));
  proto::DecodeEvent last = Final({12}, " world", proto::FinishReason::STOP, {-1.0f});
  last.mutable_finish_reason()->set_matched_token(12);
  shaper.Accumulate(last);
  ASSERT_TRUE(shaper.FinalStatus().ok());
  const Json expected = Json::parse(R"({"text":"Hello world","output_ids":[10,11,12],
      "meta_info":{"id":"abc","finish_reason":{"type":"stop","matched":12},"prompt_tokens":3,
      "completion_tokens":3,"cached_tokens":2,"e2e_latency":1.5,
      "input_token_logprobs":[[null,3,null]],
      "output_token_logprobs":[[-0.5,10,null],[-0.25,11,null],[-1.0,12,null]]}})");
  EXPECT_EQ(Json::parse(shaper.Body(1.5)), expected);
  EXPECT_EQ(shaper.response_id(), "abc");
}

// Adds one position's alternatives (id, logprob) to `e`.
void AddTop(proto::DecodeEvent* e, std::vector<std::pair<int32_t, float>> alternatives) {
  proto::TopLogprobs* top = e->add_top_logprobs();
  for (const auto& [id, lp] : alternatives) {
    top->add_token_ids(id);
    top->add_logprobs(lp);
  }
}

TEST(ResponseShaperTest, GenerateTopLogprobs) {
  RoutedRequest r = Request(ApiKind::kGenerate);
  r.return_logprob = true;
  r.top_logprobs = 2;
  ResponseShaper shaper(r);
  proto::DecodeEvent first = Tokens({10}, "Hi", {-0.5f});
  AddTop(&first, {{10, -0.5f}, {3, -1.5f}});
  shaper.Accumulate(first);
  proto::DecodeEvent last = Final({12}, "!", proto::FinishReason::LENGTH, {-2.0f});
  AddTop(&last, {{7, -0.25f}, {12, -2.0f}});
  shaper.Accumulate(last);
  const Json meta = Json::parse(shaper.Body(0))["meta_info"];
  EXPECT_EQ(meta["output_token_logprobs"], Json::parse("[[-0.5,10,null],[-2.0,12,null]]"));
  EXPECT_EQ(meta["output_top_logprobs"],
            Json::parse("[[[-0.5,10,null],[-1.5,3,null]],[[-0.25,7,null],[-2.0,12,null]]]"));
  // Not asked for: not there, whatever the worker sent.
  RoutedRequest plain = Request(ApiKind::kGenerate);
  plain.return_logprob = true;
  ResponseShaper without(plain);
  without.Accumulate(last);
  EXPECT_FALSE(Json::parse(without.Body(0))["meta_info"].contains("output_top_logprobs"));
}

TEST(ResponseShaperTest, ChatAndCompletionsTopLogprobs) {
  proto::DecodeEvent last = Final({7, 8}, "xy", proto::FinishReason::STOP, {-0.125f, -3.0f});
  AddTop(&last, {{7, -0.125f}, {2, -2.5f}});
  AddTop(&last, {{1, -0.5f}, {2, -1.0f}});  // the chosen token (8) is not among them
  RoutedRequest chat = Request(ApiKind::kChatCompletions);
  chat.return_logprob = true;
  chat.top_logprobs = 2;
  ResponseShaper chat_shaper(chat);
  chat_shaper.Accumulate(last);
  EXPECT_EQ(Json::parse(chat_shaper.Body(0))["choices"][0]["logprobs"], Json::parse(R"({"content":[
      {"token":"token_id:7","logprob":-0.125,"bytes":[],"top_logprobs":[
        {"token":"token_id:7","logprob":-0.125,"bytes":[]},
        {"token":"token_id:2","logprob":-2.5,"bytes":[]}]},
      {"token":"token_id:8","logprob":-3.0,"bytes":[],"top_logprobs":[
        {"token":"token_id:1","logprob":-0.5,"bytes":[]},
        {"token":"token_id:2","logprob":-1.0,"bytes":[]}]}]})"));

  RoutedRequest cmp = Request(ApiKind::kCompletions);
  cmp.return_logprob = true;
  cmp.top_logprobs = 2;
  cmp.stream = true;
  ResponseShaper cmp_shaper(cmp);
  proto::DecodeEvent head = Tokens({5}, "a", {-0.75f});
  AddTop(&head, {{5, -0.75f}, {6, -1.0f}});
  std::vector<Json> events = SseEvents(cmp_shaper.StreamEvent(head));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["top_logprobs"],
            Json::parse(R"([{"token_id:5":-0.75,"token_id:6":-1.0}])"));
  // The next chunk carries only its own positions; the chosen token joins the alternatives.
  events = SseEvents(cmp_shaper.StreamEvent(last));
  ASSERT_GE(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["top_logprobs"],
            Json::parse(R"([{"token_id:7":-0.125,"token_id:2":-2.5},
                            {"token_id:1":-0.5,"token_id:2":-1.0,"token_id:8":-3.0}])"));
}

TEST(ResponseShaperTest, GenerateFinishReasons) {
  ResponseShaper length(Request(ApiKind::kGenerate));
  proto::DecodeEvent e = Final({1}, "a", proto::FinishReason::LENGTH);
  e.mutable_finish_reason()->set_length(1);
  length.Accumulate(e);
  EXPECT_EQ(Json::parse(length.Body(0))["meta_info"]["finish_reason"],
            Json::parse(R"({"type":"length","length":1})"));
  EXPECT_FALSE(Json::parse(length.Body(0))["meta_info"].contains("output_token_logprobs"));

  ResponseShaper eos(Request(ApiKind::kGenerate));
  eos.Accumulate(Final({1}, "a", proto::FinishReason::STOP));
  EXPECT_EQ(Json::parse(eos.Body(0))["meta_info"]["finish_reason"],
            Json::parse(R"({"type":"stop","matched":null})"));

  ResponseShaper stop_str(Request(ApiKind::kGenerate));
  e = Final({1}, "a", proto::FinishReason::STOP);
  e.mutable_finish_reason()->set_matched_str("\n\n");
  stop_str.Accumulate(e);
  EXPECT_EQ(Json::parse(stop_str.Body(0))["meta_info"]["finish_reason"],
            Json::parse(R"({"type":"stop","matched":"\n\n"})"));
}

TEST(ResponseShaperTest, NonStreamAbortIsAnError) {
  ResponseShaper shaper(Request(ApiKind::kCompletions));
  shaper.Accumulate(Tokens({1}, "a"));
  proto::DecodeEvent e = Final({}, "", proto::FinishReason::ABORT);
  e.mutable_finish_reason()->set_message("worker shutting down");
  shaper.Accumulate(e);
  const absl::Status status = shaper.FinalStatus();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "the request was aborted: worker shutting down");
  const HttpResponse response = ErrorResponse(status);
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(Json::parse(response.body)["error"]["message"],
            "the request was aborted: worker shutting down");
}

TEST(ResponseShaperTest, MissingFinalEventIsAnError) {
  ResponseShaper shaper(Request(ApiKind::kGenerate));
  shaper.Accumulate(Tokens({1}, "a"));
  EXPECT_EQ(shaper.FinalStatus().code(), absl::StatusCode::kInternal);
}

TEST(ResponseShaperTest, GenerateStreamIsCumulative) {
  ResponseShaper shaper(Request(ApiKind::kGenerate));
  const std::vector<Json> first = SseEvents(shaper.StreamEvent(Tokens({10}, "Hel")));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], Json::parse(R"({"text":"Hel","output_ids":[10],"meta_info":{"id":"abc",
      "finish_reason":null,"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}})"));
  EXPECT_EQ(shaper.StreamEvent(Tokens({}, "")), "");  // nothing new
  const std::vector<Json> last =
      SseEvents(shaper.StreamEvent(Final({11, 12}, "lo!", proto::FinishReason::LENGTH)));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["text"], "Hello!");
  EXPECT_EQ(last[0]["output_ids"], Json::parse("[10,11,12]"));
  EXPECT_EQ(last[0]["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_EQ(last[0]["meta_info"]["cached_tokens"], 2);
  EXPECT_GE(last[0]["meta_info"]["e2e_latency"].get<double>(), 0.0);
  EXPECT_EQ(shaper.StreamEvent(Tokens({1}, "late")), "");  // nothing after the final event
  EXPECT_EQ(shaper.StreamDone(), "data: [DONE]\n\n");
}

TEST(ResponseShaperTest, CompletionsBodyWithLogprobs) {
  RoutedRequest r = Request(ApiKind::kCompletions);
  r.return_logprob = true;
  ResponseShaper shaper(r, &TinyEnglishTokenizer());
  const std::vector<int32_t> ids = TinyEnglishTokenizer().Encode("Hi there", false);
  ASSERT_GE(ids.size(), 2u);
  std::vector<float> lps(ids.size(), -0.5f);
  shaper.Accumulate(Final(ids, "Hi there", proto::FinishReason::LENGTH, lps));
  const Json body = Json::parse(shaper.Body(0.1));
  EXPECT_EQ(body["id"], "cmpl-abc");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "tandem-tiny");
  ASSERT_EQ(body["choices"].size(), 1u);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["text"], "Hi there");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_TRUE(choice["matched_stop"].is_null());
  std::string joined;
  for (const Json& t : choice["logprobs"]["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "Hi there");
  EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), ids.size());
  EXPECT_EQ(choice["logprobs"]["text_offset"][0], 0);
  EXPECT_TRUE(choice["logprobs"]["top_logprobs"].is_null());
  EXPECT_EQ(body["usage"], Json::parse(R"({"prompt_tokens":3,"completion_tokens":3,
      "total_tokens":6,"prompt_tokens_details":{"cached_tokens":2}})"));
}

TEST(ResponseShaperTest, ChatBody) {
  ResponseShaper shaper(Request(ApiKind::kChatCompletions));
  shaper.Accumulate(Tokens({5}, "Good "));
  shaper.Accumulate(Final({6}, "luck", proto::FinishReason::STOP));
  const Json expected = Json::parse(R"({"id":"chatcmpl-abc","object":"chat.completion",
      "created":1700000000,"model":"tandem-tiny","choices":[{"index":0,
      "message":{"role":"assistant","content":"Good luck"},"logprobs":null,
      "finish_reason":"stop","matched_stop":null}],"usage":{"prompt_tokens":3,
      "completion_tokens":3,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":2}}})");
  EXPECT_EQ(Json::parse(shaper.Body(0)), expected);
}

TEST(ResponseShaperTest, ChatLogprobsWithoutTokenizerNameTheIds) {
  RoutedRequest r = Request(ApiKind::kChatCompletions);
  r.return_logprob = true;
  ResponseShaper shaper(r);
  shaper.Accumulate(Final({7}, "x", proto::FinishReason::STOP, {-0.125f}));
  EXPECT_EQ(Json::parse(shaper.Body(0))["choices"][0]["logprobs"],
            Json::parse(R"({"content":[{"token":"token_id:7","logprob":-0.125,"bytes":[],
                "top_logprobs":[]}]})"));
}

TEST(ResponseShaperTest, ChatStreamWithUsage) {
  RoutedRequest r = Request(ApiKind::kChatCompletions);
  r.stream = true;
  r.include_usage = true;
  ResponseShaper shaper(r);
  std::string sse = shaper.StreamEvent(Tokens({5}, "Good "));
  sse += shaper.StreamEvent(Tokens({9}, ""));  // an incomplete character: nothing to send
  sse += shaper.StreamEvent(Final({6}, "luck", proto::FinishReason::LENGTH));
  sse += shaper.StreamDone();
  const std::vector<Json> events = SseEvents(sse);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0], Json::parse(R"({"id":"chatcmpl-abc","object":"chat.completion.chunk",
      "created":1700000000,"model":"tandem-tiny","choices":[{"index":0,
      "delta":{"role":"assistant","content":"Good "},"logprobs":null,"finish_reason":null}],
      "usage":null})"));
  EXPECT_EQ(events[1], Json::parse(R"({"id":"chatcmpl-abc","object":"chat.completion.chunk",
      "created":1700000000,"model":"tandem-tiny","choices":[{"index":0,
      "delta":{"content":"luck"},"logprobs":null,"finish_reason":"length","matched_stop":null}],
      "usage":null})"));
  EXPECT_EQ(events[2], Json::parse(R"({"id":"chatcmpl-abc","object":"chat.completion.chunk",
      "created":1700000000,"model":"tandem-tiny","choices":[],"usage":{"prompt_tokens":3,
      "completion_tokens":3,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":2}}})"));
  EXPECT_EQ(events[3], "[DONE]");
}

TEST(ResponseShaperTest, ChatStreamFirstChunkCarriesTheRoleEvenWithoutText) {
  ResponseShaper shaper(Request(ApiKind::kChatCompletions));
  const std::vector<Json> events = SseEvents(shaper.StreamEvent(Tokens({9}, "")));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], Json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_FALSE(events[0].contains("usage"));  // only with include_usage
  EXPECT_EQ(shaper.StreamEvent(Tokens({9}, "")), "");
}

TEST(ResponseShaperTest, CompletionsStreamWithLogprobsAndAbort) {
  RoutedRequest r = Request(ApiKind::kCompletions);
  r.stream = true;
  r.return_logprob = true;
  ResponseShaper shaper(r);
  std::vector<Json> events = SseEvents(shaper.StreamEvent(Tokens({4, 5}, "ab", {-1.f, -2.f})));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], Json::parse(R"({"id":"cmpl-abc","object":"text_completion",
      "created":1700000000,"model":"tandem-tiny","choices":[{"index":0,"text":"ab",
      "logprobs":{"tokens":["token_id:4","token_id:5"],"token_logprobs":[-1.0,-2.0],
      "top_logprobs":null,"text_offset":[0,10]},"finish_reason":null}]})"));
  proto::DecodeEvent abort = Final({}, "", proto::FinishReason::ABORT);
  abort.mutable_finish_reason()->set_message("drained");
  events = SseEvents(shaper.StreamEvent(abort));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["finish_reason"], "abort");
  EXPECT_EQ(events[0]["choices"][0]["text"], "");
}

TEST(ResponseShaperTest, CompletionsStreamWithoutUsage) {
  RoutedRequest r = Request(ApiKind::kCompletions);
  r.model = "a \"quoted\" model";
  ResponseShaper shaper(r);
  std::string sse = shaper.StreamEvent(Tokens({4}, "line\n\"q\" \xc3\xa9"));
  sse += shaper.StreamEvent(Tokens({5}, ""));  // nothing to show
  sse += shaper.StreamEvent(Final({6}, "", proto::FinishReason::STOP));
  const std::vector<Json> events = SseEvents(sse);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], Json::parse(R"({"id":"cmpl-abc","object":"text_completion",
      "created":1700000000,"model":"a \"quoted\" model","choices":[{"index":0,
      "text":"line\n\"q\" \u00e9","logprobs":null,"finish_reason":null}]})"));
  EXPECT_EQ(events[1], Json::parse(R"({"id":"cmpl-abc","object":"text_completion",
      "created":1700000000,"model":"a \"quoted\" model","choices":[{"index":0,"text":"",
      "logprobs":null,"finish_reason":"stop","matched_stop":null}]})"));
}

TEST(ResponseShaperTest, StreamErrorEndsTheStream) {
  ResponseShaper shaper(Request(ApiKind::kChatCompletions));
  const std::string sse = shaper.StreamError(absl::UnavailableError("prefill worker lost"));
  const std::vector<Json> events = SseEvents(sse);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], Json::parse(R"({"error":{"message":"prefill worker lost",
      "type":"service_unavailable","param":null,"code":503}})"));
  EXPECT_EQ(shaper.StreamEvent(Tokens({1}, "x")), "");
}

TEST(ErrorResponseTest, StatusCodes) {
  EXPECT_EQ(ErrorResponse(absl::InvalidArgumentError("x")).status, 400);
  EXPECT_EQ(ErrorResponse(absl::FailedPreconditionError("x")).status, 400);
  EXPECT_EQ(ErrorResponse(absl::NotFoundError("x")).status, 404);
  EXPECT_EQ(ErrorResponse(absl::ResourceExhaustedError("x")).status, 429);
  EXPECT_EQ(ErrorResponse(absl::DeadlineExceededError("timed out in the queue")).status, 408);
  EXPECT_EQ(ErrorResponse(absl::DeadlineExceededError("worker did not answer")).status, 504);
  EXPECT_EQ(ErrorResponse(absl::UnavailableError("x")).status, 503);
  EXPECT_EQ(ErrorResponse(absl::UnauthenticatedError("x")).status, 401);
  EXPECT_EQ(ErrorResponse(absl::PermissionDeniedError("x")).status, 403);
  EXPECT_EQ(ErrorResponse(absl::InternalError("x")).status, 500);
  EXPECT_EQ(ErrorResponse(absl::OkStatus()).status, 500);
  const HttpResponse r = ErrorResponse(absl::InvalidArgumentError("messages must not be empty"));
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"error":{"message":"messages must not be empty",
      "type":"invalid_request_error","param":null,"code":400}})"));
}

TEST(ModelsBodyTest, Shape) {
  EXPECT_EQ(Json::parse(ModelsBody("tandem-tiny", 42, 512)),
            Json::parse(R"({"object":"list","data":[{"id":"tandem-tiny","object":"model",
                "created":42,"owned_by":"tandem","root":"tandem-tiny","max_model_len":512}]})"));
  // SGLang's card: max_model_len is optional, null when the context length is unknown.
  EXPECT_TRUE(Json::parse(ModelsBody("tandem-tiny", 42, 0))["data"][0]["max_model_len"].is_null());
}

}  // namespace
}  // namespace tandem::router
