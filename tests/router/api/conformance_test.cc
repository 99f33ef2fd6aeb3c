// Conformance of our response shapes with the providers' own documented examples: each example
// below is OpenAI's (openai/openai-openapi openapi.yaml, the API reference's source) or SGLang's
// (its docs and code), trimmed to the object; our side is the real ResponseShaper fed the same
// request the example shows. ShapeDiff (shape_diff.h) compares shapes, and every difference we
// keep is named in the example's ShapeRules with its reason.
//
// The shaper does not know whether a request ran in PD or plain mode (the events are the same);
// router_cluster_itest's GenerateShapesAndPdEqualsPlain checks the two modes' bodies are equal.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"
#include "router/api/response.h"
#include "tests/router/api/shape_diff.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using conformance::Allowance;
using conformance::Pinned;
using conformance::ShapeDiff;
using conformance::ShapeRules;
using Json = nlohmann::json;

// ---- OpenAI's documented examples (openai/openai-openapi, openapi.yaml, commit 5780008) ----

// paths./completions.post x-oaiMeta, example "No streaming" (the completion object).
constexpr char kCompletion[] = R"({"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7",
  "object":"text_completion","created":1589478378,"model":"VAR_model_id",
  "system_fingerprint":"fp_44709d6fcb",
  "choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,
    "finish_reason":"length"}],
  "usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}})";

// The same object with logprobs 2: the reference shows no filled example, so the choice's
// logprobs follow the schema (components.schemas.CreateCompletionResponse, choices[].logprobs:
// text_offset [integer], token_logprobs [number], tokens [string], top_logprobs [object of
// token -> number]), with the tokens of the example's text.
constexpr char kCompletionLogprobs[] = R"({"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7",
  "object":"text_completion","created":1589478378,"model":"VAR_model_id",
  "system_fingerprint":"fp_44709d6fcb",
  "choices":[{"text":"\n\nThis","index":0,"logprobs":{"tokens":["\n\n","This"],
    "token_logprobs":[-0.25,-1.5],"top_logprobs":[{"\n\n":-0.25,"\n":-2.0},
    {"This":-1.5,"It":-1.75}],"text_offset":[0,2]},"finish_reason":"length"}],
  "usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}})";

// paths./completions.post x-oaiMeta, example "Streaming" (a missing comma after "model" fixed).
constexpr char kCompletionChunk[] = R"({"id":"cmpl-7iA7iJjj8V2zOkCGvWF2hAkDWBQZe",
  "object":"text_completion","created":1690759702,
  "choices":[{"text":"This","index":0,"logprobs":null,"finish_reason":null}],
  "model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb"})";

// paths./chat/completions.post x-oaiMeta, example "Default" (the chat completion object).
constexpr char kChat[] = R"({"id":"chatcmpl-123","object":"chat.completion",
  "created":1677652288,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb",
  "choices":[{"index":0,"message":{"role":"assistant",
    "content":"\n\nHello there, how may I assist you today?"},"logprobs":null,
    "finish_reason":"stop"}],
  "usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,
    "completion_tokens_details":{"reasoning_tokens":0}}})";

// paths./chat/completions.post x-oaiMeta, example "Logprobs" (logprobs true, top_logprobs 2),
// trimmed to its first two tokens.
constexpr char kChatLogprobs[] = R"({"id":"chatcmpl-123","object":"chat.completion",
  "created":1702685778,"model":"gpt-4o-mini",
  "choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},
    "logprobs":{"content":[
      {"token":"Hello","logprob":-0.31725305,"bytes":[72,101,108,108,111],
       "top_logprobs":[{"token":"Hello","logprob":-0.31725305,"bytes":[72,101,108,108,111]},
                       {"token":"Hi","logprob":-1.3190403,"bytes":[72,105]}]},
      {"token":"!","logprob":-0.02380986,"bytes":[33],
       "top_logprobs":[{"token":"!","logprob":-0.02380986,"bytes":[33]},
                       {"token":" there","logprob":-3.787621,"bytes":[32,116,104,101,114,101]}]}]},
    "finish_reason":"stop"}],
  "usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18,
    "completion_tokens_details":{"reasoning_tokens":0}},
  "system_fingerprint":null})";

// paths./chat/completions.post x-oaiMeta, example "Streaming": the first chunk (the role), a
// content chunk and the last chunk (finish_reason).
constexpr char kChatChunkFirst[] = R"({"id":"chatcmpl-123","object":"chat.completion.chunk",
  "created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb",
  "choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,
    "finish_reason":null}]})";
constexpr char kChatChunkContent[] = R"({"id":"chatcmpl-123","object":"chat.completion.chunk",
  "created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb",
  "choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]})";
constexpr char kChatChunkLast[] = R"({"id":"chatcmpl-123","object":"chat.completion.chunk",
  "created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb",
  "choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})";

// The usage chunk of stream_options.include_usage. The reference describes it in words
// (components.schemas.ChatCompletionStreamOptions.include_usage: "an additional chunk ... before
// the data: [DONE] message. The usage field on this chunk shows the token usage statistics for
// the entire request, and the choices field will always be an empty array"); this is that chunk
// with the streaming example's fields and CompletionUsage's required ones. Completions streams
// use the same option and usage with object "text_completion".
constexpr char kChatUsageChunk[] = R"({"id":"chatcmpl-123","object":"chat.completion.chunk",
  "created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb",
  "choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}})";
constexpr char kCompletionUsageChunk[] = R"({"id":"cmpl-7iA7iJjj8V2zOkCGvWF2hAkDWBQZe",
  "object":"text_completion","created":1690759702,"model":"gpt-3.5-turbo-instruct",
  "system_fingerprint":"fp_44709d6fcb","choices":[],
  "usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}})";

// paths./responses.post x-oaiMeta, example "Text input" (the response object).
constexpr char kResponse[] = R"({"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  "object":"response","created_at":1741476542,"status":"completed","error":null,
  "incomplete_details":null,"instructions":null,"max_output_tokens":null,
  "model":"gpt-4.1-2025-04-14",
  "output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
    "status":"completed","role":"assistant",
    "content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...",
      "annotations":[]}]}],
  "parallel_tool_calls":true,"previous_response_id":null,
  "reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,
  "text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,
  "truncation":"disabled",
  "usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,
    "output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},
  "user":null,"metadata":{}})";

// ---- SGLang's ----

// docs.sglang.io basic_usage/native_api.html, "Generate (text generation model)": the printed
// response of POST /generate {"text": "What is the capital of France?"} (the notebook's output,
// as stored in the docs site's markdown), text and output_ids trimmed.
constexpr char kGenerate[] = R"({"text":"  Berne\n\nTo determine","output_ids":[220,8907,811],
  "meta_info":{"id":"93fff4f1dfd3496eb1f725361d64333b",
    "finish_reason":{"type":"length","length":128},"prompt_tokens":7,
    "weight_version":"default","total_retractions":0,"completion_tokens":128,
    "cached_tokens":0,"cached_tokens_details":null,"dp_rank":null,
    "e2e_latency":0.27121597435325384,"response_sent_to_client_ts":1772580196.322954}})";

// A stop finish_reason: sgl-project/sglang python/sglang/srt/managers/schedule_batch.py,
// FINISH_MATCHED_TOKEN / FINISH_MATCHED_STR .to_json(): {"type": "stop", "matched": ...}.
constexpr char kGenerateStopReason[] = R"({"type":"stop","matched":151645})";

// meta_info's logprobs with return_logprob and top_logprobs_num 2: sgl-project/sglang
// python/sglang/srt/managers/tokenizer_manager.py, add_logprob_to_meta_info and
// detokenize_logprob_tokens ((logprob, token_id, None) triples without return_text_in_logprobs;
// the first prompt position's logprob None) and detokenize_top_logprobs_tokens (None for a
// position without alternatives, the first prompt position).
constexpr char kGenerateLogprobMeta[] = R"({
  "input_token_logprobs":[[null,3838,null],[-2.5,374,null]],
  "output_token_logprobs":[[-0.5,220,null],[-0.75,8907,null]],
  "input_top_logprobs":[null,[[-2.5,374,null],[-3.0,525,null]]],
  "output_top_logprobs":[[[-0.5,220,null],[-1.5,12095,null]],
                         [[-0.75,8907,null],[-2.0,12366,null]]]})";

// The documented /generate object ended by a stop (StreamOf's streams end so).
std::string GenerateStopped() {
  Json doc = Json::parse(kGenerate);
  doc["meta_info"]["finish_reason"] = Json::parse(kGenerateStopReason);
  return doc.dump();
}

// ---- Why our shapes may differ (shared by several examples) ----

const Allowance kSystemFingerprint = {
    "system_fingerprint",
    "names OpenAI's backend configuration; we have none to give. The openai SDK types it "
    "Optional[str] = None (openai-python types/chat/chat_completion.py): absent reads as None"};
const Allowance kMatchedStop = {
    "choices[].matched_stop",
    "SGLang's extension, sent by its OpenAI server (CompletionResponseChoice, "
    "ChatCompletionResponseChoice): the stop token id or string that ended the choice"};
const Allowance kPromptTokensDetails = {
    "usage.prompt_tokens_details",
    "documented optional in CompletionUsage; its cached_tokens are the prefix-cache hits"};
const Allowance kCompletionTokensDetails = {
    "usage.completion_tokens_details",
    "documented optional in CompletionUsage (reasoning, audio, predicted-output tokens): none "
    "exist here (docs/api.md: no reasoning models, audio or predicted outputs)"};
const Allowance kUsageNull = {
    "usage",
    "with stream_options.include_usage every chunk before the usage chunk carries usage: null "
    "(ChatCompletionStreamOptions.include_usage)"};
const Allowance kLogprobsNullable = {"choices[].logprobs",
                                     "object or null: null unless logprobs were asked for"};
const Allowance kFinishNullable = {"choices[].finish_reason",
                                   "null in every chunk but the choice's last"};

const std::vector<Json> kCompletionsFinish = {"stop", "length", "content_filter"};
const std::vector<Json> kChatFinish = {"stop", "length", "tool_calls", "content_filter",
                                       "function_call"};

std::vector<Json> With(std::vector<Json> values, Json more) {
  values.push_back(std::move(more));
  return values;
}

ShapeRules CompletionRules() {
  ShapeRules rules;
  rules.omitted = {kSystemFingerprint};
  rules.extra = {kMatchedStop, kPromptTokensDetails};
  rules.nullable = {kLogprobsNullable};
  rules.maps = {{"choices[].logprobs.top_logprobs[]", "keys are the alternatives' tokens"}};
  rules.pinned = {{"object", {"text_completion"}}, {"choices[].finish_reason", kCompletionsFinish}};
  return rules;
}

ShapeRules CompletionChunkRules() {
  ShapeRules rules = CompletionRules();
  rules.extra = {kMatchedStop, kUsageNull};
  rules.nullable.push_back(kFinishNullable);
  rules.pinned = {{"object", {"text_completion"}},
                  {"choices[].finish_reason", With(kCompletionsFinish, nullptr)}};
  return rules;
}

ShapeRules UsageChunkRules(const char* object) {
  ShapeRules rules;
  rules.omitted = {kSystemFingerprint};
  rules.extra = {kPromptTokensDetails};
  rules.pinned = {{"object", {object}}};
  return rules;
}

ShapeRules ChatRules() {
  ShapeRules rules;
  rules.omitted = {kSystemFingerprint, kCompletionTokensDetails};
  rules.extra = {kMatchedStop, kPromptTokensDetails};
  rules.nullable = {kLogprobsNullable};
  rules.pinned = {{"object", {"chat.completion"}},
                  {"choices[].message.role", {"assistant"}},
                  {"choices[].finish_reason", kChatFinish}};
  return rules;
}

ShapeRules ChatChunkRules() {
  ShapeRules rules;
  rules.omitted = {kSystemFingerprint};
  rules.extra = {kUsageNull};
  rules.nullable = {kLogprobsNullable, kFinishNullable};
  rules.pinned = {{"object", {"chat.completion.chunk"}},
                  {"choices[].delta.role", {"assistant"}},
                  {"choices[].finish_reason", With(kChatFinish, nullptr)}};
  return rules;
}

ShapeRules ChatLastChunkRules() {
  ShapeRules rules = ChatChunkRules();
  rules.extra = {kUsageNull,
                 kMatchedStop,
                 {"choices[].delta.content",
                  "every delta field is optional (ChatCompletionStreamResponseDelta): our last "
                  "chunk carries the final token's text with the finish_reason, where OpenAI "
                  "sends an empty delta after it"}};
  return rules;
}

ShapeRules ResponseRules() {
  ShapeRules rules;
  rules.extra = {
      {"background", "documented in the Response object (Response.background): always false"},
      {"max_tool_calls", "documented in the Response object: null, no limit is applied"},
      {"top_logprobs", "documented in the Response object: the request's, 0 by default"},
      {"output[].content[].logprobs",
       "documented in ResponseOutputText (logprobs: array); empty unless asked for"}};
  rules.pinned = {{"object", {"response"}},
                  {"status", {"completed", "incomplete", "failed", "in_progress"}},
                  {"output[].type", {"message", "function_call", "reasoning"}},
                  {"output[].role", {"assistant"}},
                  {"output[].content[].type", {"output_text"}}};
  return rules;
}

ShapeRules GenerateRules() {
  ShapeRules rules;
  rules.omitted = {
      {"meta_info.weight_version",
       "the version set by SGLang's update_weights_* endpoints; weights load at start here "
       "(docs/api.md: n/a), and /get_model_info reports \"default\""},
      {"meta_info.total_retractions",
       "SGLang's per-request count of retractions; the engine's preemptions are a metric "
       "(tandem_engine_preemptions_total), and bench_serving and the documented clients do not "
       "read it"},
      {"meta_info.cached_tokens_details",
       "per-tier hits of SGLang's hierarchical cache, null without one; cached_tokens carries "
       "our one tier"},
      {"meta_info.dp_rank", "data-parallel rank, null without DP attention: there is none here"},
      {"meta_info.response_sent_to_client_ts",
       "a server timestamp for SGLang's request logging; clients time with e2e_latency"}};
  rules.pinned = {{"meta_info.finish_reason.type", {"length", "stop", "abort"}}};
  return rules;
}

// ---- Our side ----

ApiContext Context() {
  ApiContext ctx = TinyEnglishContext();
  ctx.any_model_name = true;  // the documented examples name OpenAI's models
  return ctx;
}

RoutedBatch Batch(ApiKind kind, const std::string& body) {
  auto batch = ParseBatch(kind, body, Context());
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok()) return {};
  for (RoutedRequest& item : batch->items) item.created = 1700000000;
  return *batch;
}

RoutedRequest Single(ApiKind kind, const std::string& body) {
  RoutedBatch batch = Batch(kind, body);
  EXPECT_EQ(batch.items.size(), 1u);
  return batch.items.empty() ? RoutedRequest() : batch.items[0];
}

int32_t Id(const std::string& text) {
  const std::vector<int32_t> ids = TinyEnglishTokenizer().Encode(text, false);
  EXPECT_FALSE(ids.empty()) << text;
  return ids.empty() ? 0 : ids[0];
}

// One decoded token, with two alternatives when `top` (the token itself and another).
proto::DecodeEvent Token(const std::string& text, bool logprobs, bool top) {
  proto::DecodeEvent e;
  const int32_t id = Id(text);
  e.add_token_ids(id);
  e.set_text(text);
  if (logprobs) e.add_token_logprobs(-0.5f);
  if (top) {
    proto::TopLogprobs* t = e.add_top_logprobs();
    t->add_token_ids(id);
    t->add_logprobs(-0.5f);
    t->add_token_ids(Id(" the"));
    t->add_logprobs(-1.25f);
  }
  return e;
}

proto::DecodeEvent Last(const std::string& text, bool logprobs, bool top,
                        proto::FinishReason::Type type = proto::FinishReason::LENGTH) {
  proto::DecodeEvent e = Token(text, logprobs, top);
  e.set_finished(true);
  e.mutable_finish_reason()->set_type(type);
  if (type == proto::FinishReason::LENGTH) e.mutable_finish_reason()->set_length(2);
  if (type == proto::FinishReason::STOP) e.mutable_finish_reason()->set_matched_token(Id(text));
  e.set_prompt_tokens(4);
  e.set_completion_tokens(2);
  e.set_cached_tokens(1);
  return e;
}

// The non-streamed body of `request` after two tokens.
Json BodyOf(const RoutedRequest& request, proto::FinishReason::Type type) {
  const bool logprobs = request.return_logprob, top = request.top_logprobs > 0;
  ResponseShaper shaper(request, &TinyEnglishTokenizer());
  shaper.Accumulate(Token("Hello", logprobs, top));
  shaper.Accumulate(Last(" world", logprobs, top, type));
  EXPECT_TRUE(shaper.FinalStatus().ok());
  return Json::parse(shaper.Body(0.25));
}

// The streamed events of `request` after three tokens, [DONE] included, framing checked.
std::vector<Json> StreamOf(const RoutedRequest& request) {
  const bool logprobs = request.return_logprob, top = request.top_logprobs > 0;
  ResponseShaper shaper(request, &TinyEnglishTokenizer());
  std::string sse = shaper.StreamEvent(Token("Hello", logprobs, top));
  sse += shaper.StreamEvent(Token(" world", logprobs, top));
  sse += shaper.StreamEvent(Last("!", logprobs, top, proto::FinishReason::STOP));
  sse += shaper.StreamDone();
  std::vector<std::string> errors;
  std::vector<Json> events = conformance::SsePayloads(sse, &errors);
  EXPECT_TRUE(errors.empty()) << absl::StrJoin(errors, "\n");
  return events;
}

// Each of `ours` has the documented shape; every omitted/extra allowance was needed by one.
void ExpectConforms(const std::string& name, const std::string& documented,
                    const std::vector<Json>& ours, const ShapeRules& rules) {
  const Json doc = Json::parse(documented);
  std::set<std::string> used;
  for (const Json& one : ours) {
    const std::vector<std::string> problems = ShapeDiff(doc, one, rules, &used);
    EXPECT_TRUE(problems.empty()) << name << ":\n  " << absl::StrJoin(problems, "\n  ")
                                  << "\nours: " << one.dump();
  }
  for (const auto* list : {&rules.omitted, &rules.extra}) {
    for (const Allowance& a : *list) {
      EXPECT_TRUE(used.count(a.path)) << name << ": allowance " << a.path << " is not needed";
    }
  }
}

TEST(ShapeDiffTest, ReportsMissingInventedMistypedAndUnpinned) {
  const Json doc = Json::parse(R"({"a":1,"b":"x","c":[{"d":1.5}],"o":"k"})");
  ShapeRules rules;
  rules.pinned = {{"o", {"k"}}};
  EXPECT_TRUE(ShapeDiff(doc, doc, rules).empty());
  const Json ours = Json::parse(R"({"a":1.5,"c":[{"d":2.0},{"d":"s"}],"e":null,"o":"z"})");
  const std::vector<std::string> problems = ShapeDiff(doc, ours, rules);
  EXPECT_EQ(absl::StrJoin(problems, "|"),
            "a: documented integer, ours float|b: documented, missing from ours|"
            "c[].d: documented float, ours string|o: \"z\" is not a documented value|"
            "e: ours, not in the documented example");
  rules.omitted = {{"b", "why"}};
  rules.extra = {{"e", "why"}};
  rules.any_number = {{"a", "why"}};
  EXPECT_EQ(ShapeDiff(doc, Json::parse(R"({"a":2.5,"c":[],"e":1,"o":"k"})"), rules).size(), 0u);
}

TEST(ShapeDiffTest, SseFramingIsExact) {
  std::vector<std::string> errors;
  EXPECT_EQ(conformance::SsePayloads("data: {}\n\ndata: [DONE]\n\n", &errors).size(), 1u);
  EXPECT_TRUE(errors.empty());
  conformance::SsePayloads("data: {}\n\ndata: [DONE]\n", &errors);
  EXPECT_FALSE(errors.empty());
  errors.clear();
  conformance::SsePayloads("data:{}\n\ndata: [DONE]\n\n", &errors);
  EXPECT_FALSE(errors.empty());
}

TEST(ConformanceTest, OpenAiCompletion) {
  const RoutedRequest r =
      Single(ApiKind::kCompletions, R"({"model":"m","prompt":"Say this is a test",
        "max_tokens":2,"temperature":0})");
  ExpectConforms("completion", kCompletion, {BodyOf(r, proto::FinishReason::LENGTH)},
                 CompletionRules());
}

TEST(ConformanceTest, OpenAiCompletionWithLogprobs) {
  const RoutedRequest r =
      Single(ApiKind::kCompletions, R"({"model":"m","prompt":"Say this is a test",
        "max_tokens":2,"logprobs":2})");
  ExpectConforms("completion logprobs", kCompletionLogprobs, {BodyOf(r, proto::FinishReason::STOP)},
                 CompletionRules());
}

TEST(ConformanceTest, OpenAiCompletionStreamWithUsage) {
  const RoutedRequest r =
      Single(ApiKind::kCompletions, R"({"model":"m","prompt":"Say this is a test",
        "max_tokens":3,"stream":true,"stream_options":{"include_usage":true}})");
  std::vector<Json> events = StreamOf(r);
  ASSERT_EQ(events.size(), 4u);  // three chunks, the usage chunk
  const Json usage = events.back();
  events.pop_back();
  ExpectConforms("completion chunk", kCompletionChunk, events, CompletionChunkRules());
  ExpectConforms("completion usage chunk", kCompletionUsageChunk, {usage},
                 UsageChunkRules("text_completion"));
}

TEST(ConformanceTest, OpenAiChat) {
  const RoutedRequest r = Single(ApiKind::kChatCompletions, R"({"model":"m",
      "messages":[{"role":"system","content":"You are a helpful assistant."},
                  {"role":"user","content":"Hello!"}]})");
  ExpectConforms("chat", kChat, {BodyOf(r, proto::FinishReason::STOP)}, ChatRules());
}

TEST(ConformanceTest, OpenAiResponse) {
  const RoutedRequest r = Single(ApiKind::kResponses, R"({"model":"m",
      "input":"Tell me a three sentence bedtime story about a unicorn."})");
  ExpectConforms("response", kResponse, {BodyOf(r, proto::FinishReason::STOP)}, ResponseRules());
}

TEST(ConformanceTest, OpenAiChatLogprobs) {
  const RoutedRequest r = Single(ApiKind::kChatCompletions, R"({"model":"m",
      "messages":[{"role":"user","content":"Hello!"}],"logprobs":true,"top_logprobs":2})");
  ExpectConforms("chat logprobs", kChatLogprobs, {BodyOf(r, proto::FinishReason::STOP)},
                 ChatRules());
}

TEST(ConformanceTest, OpenAiChatStreamWithUsage) {
  const RoutedRequest r = Single(ApiKind::kChatCompletions, R"({"model":"m",
      "messages":[{"role":"user","content":"Hello!"}],"stream":true,
      "stream_options":{"include_usage":true}})");
  const std::vector<Json> events = StreamOf(r);
  ASSERT_EQ(events.size(), 4u);  // role + "Hello", " world", "!" + finish, usage
  ExpectConforms("chat first chunk", kChatChunkFirst, {events[0]}, ChatChunkRules());
  ExpectConforms("chat content chunk", kChatChunkContent, {events[1]}, ChatChunkRules());
  ExpectConforms("chat last chunk", kChatChunkLast, {events[2]}, ChatLastChunkRules());
  ExpectConforms("chat usage chunk", kChatUsageChunk, {events[3]},
                 UsageChunkRules("chat.completion.chunk"));
}

// n > 1: the documented objects with one choice per index ("choices: can be more than one if
// n is greater than 1"); each choice has the documented choice's shape.
TEST(ConformanceTest, OpenAiNChoices) {
  for (const bool chat : {false, true}) {
    const RoutedBatch batch =
        chat ? Batch(ApiKind::kChatCompletions,
                     R"({"model":"m","messages":[{"role":"user","content":"Hello!"}],"n":2})")
             : Batch(ApiKind::kCompletions, R"({"model":"m","prompt":"Say this","n":2})");
    ASSERT_EQ(batch.items.size(), 2u);
    std::vector<std::unique_ptr<ResponseShaper>> shapers;
    std::vector<const ResponseShaper*> items;
    for (const RoutedRequest& item : batch.items) {
      shapers.push_back(std::make_unique<ResponseShaper>(item, &TinyEnglishTokenizer()));
      shapers.back()->Accumulate(Last("Hi", false, false, proto::FinishReason::STOP));
      items.push_back(shapers.back().get());
    }
    const Json body = Json::parse(ResponseShaper::BatchBody(items, batch.n, 0.25));
    ASSERT_EQ(body["choices"].size(), 2u);
    EXPECT_EQ(body["choices"][0]["index"], 0);
    EXPECT_EQ(body["choices"][1]["index"], 1);
    if (chat) {
      ExpectConforms("chat n=2", kChat, {body}, ChatRules());
    } else {
      ExpectConforms("completion n=2", kCompletion, {body}, CompletionRules());
    }
  }
}

TEST(ConformanceTest, SglangGenerate) {
  ShapeRules rules = GenerateRules();
  const RoutedRequest r = Single(ApiKind::kGenerate, R"({"text":"What is the capital?"})");
  ExpectConforms("generate", kGenerate, {BodyOf(r, proto::FinishReason::LENGTH)}, rules);

  ExpectConforms("generate stop", GenerateStopped(), {BodyOf(r, proto::FinishReason::STOP)}, rules);

  // A list of prompts (and n > 1) answers a list of these objects.
  const RoutedBatch batch = Batch(ApiKind::kGenerate, R"({"text":["a","b"]})");
  std::vector<std::unique_ptr<ResponseShaper>> shapers;
  std::vector<const ResponseShaper*> items;
  for (const RoutedRequest& item : batch.items) {
    shapers.push_back(std::make_unique<ResponseShaper>(item, &TinyEnglishTokenizer()));
    shapers.back()->Accumulate(Last("Hi", false, false));
    items.push_back(shapers.back().get());
  }
  const Json list = Json::parse(ResponseShaper::BatchBody(items, batch.n, 0.25));
  ASSERT_TRUE(list.is_array());
  ExpectConforms("generate list", kGenerate, {list[0], list[1]}, rules);
}

TEST(ConformanceTest, SglangGenerateLogprobs) {
  Json doc = Json::parse(kGenerate);
  doc["meta_info"].update(Json::parse(kGenerateLogprobMeta));
  ShapeRules rules = GenerateRules();
  for (const char* path :
       {"meta_info.input_token_logprobs[]", "meta_info.output_token_logprobs[]",
        "meta_info.input_top_logprobs[][]", "meta_info.output_top_logprobs[][]"}) {
    rules.tuples.push_back({path, "SGLang's (logprob, token_id, text) triples"});
    rules.nullable.push_back({std::string(path) + "[2]", "the text, with return_text_in_logprobs"});
  }
  rules.nullable.push_back(
      {"meta_info.input_token_logprobs[][0]", "the first prompt position has no logprob (None)"});
  rules.nullable.push_back(
      {"meta_info.input_top_logprobs[]", "None for the first prompt position (no alternatives)"});
  const RoutedRequest r = Single(ApiKind::kGenerate, R"({"text":"What is the capital?",
      "return_logprob":true,"top_logprobs_num":2,"logprob_start_len":0})");
  // The prompt's logprobs, as the worker that prefilled reports them.
  ResponseShaper shaper(r, &TinyEnglishTokenizer());
  proto::DecodeEvent first = Token("Hello", true, true);
  first.mutable_prompt_logprobs()->set_start(0);
  for (size_t i = 1; i < r.input_ids.size(); ++i) {
    first.mutable_prompt_logprobs()->add_logprobs(-2.5f);
    proto::TopLogprobs* t = first.mutable_prompt_logprobs()->add_top_logprobs();
    t->add_token_ids(r.input_ids[i]);
    t->add_logprobs(-2.5f);
  }
  shaper.Accumulate(first);
  shaper.Accumulate(Last(" world", true, true));
  ExpectConforms("generate logprobs", doc.dump(), {Json::parse(shaper.Body(0.25))}, rules);
}

// Streamed objects: SGLang's shape with finish_reason null until the last, and e2e_latency only
// on the last (tokenizer_manager sets it once the request finished). A batch's streamed objects
// carry "index" (tokenizer_manager's _handle_batch_request sets result["index"]).
TEST(ConformanceTest, SglangGenerateStream) {
  ShapeRules rules = GenerateRules();
  rules.nullable = {{"meta_info.finish_reason", "null until the last object"}};
  RoutedRequest r = Single(ApiKind::kGenerate, R"({"text":"What is the capital?","stream":true})");
  std::vector<Json> events = StreamOf(r);
  ASSERT_EQ(events.size(), 3u);
  ExpectConforms("generate stream last", GenerateStopped(), {events.back()}, rules);
  events.pop_back();
  rules.omitted.push_back({"meta_info.e2e_latency", "set only once the request finished"});
  ExpectConforms("generate stream", kGenerate, events, rules);

  const RoutedBatch batch =
      Batch(ApiKind::kGenerate, R"({"text":"a","stream":true,"sampling_params":{"n":2}})");
  ASSERT_EQ(batch.items.size(), 2u);
  events = StreamOf(batch.items[1]);
  for (const Json& e : events) EXPECT_EQ(e["index"], 1);
  rules.extra = {{"index", "the item's place in the batch, as SGLang streams a batch"}};
  ExpectConforms("generate batch stream", kGenerate, {events[0], events[1]}, rules);
}

}  // namespace
}  // namespace tandem::router
