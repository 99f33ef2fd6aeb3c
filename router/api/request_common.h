// Steps shared by router/api's three parsers: request ids, the model check, the OpenAI fields
// that completions and chat have in common, and the prompt checks every request ends with.
//
// Thread-safety: pure functions (NewRid uses a thread-local generator). Internal to router/api.
#ifndef TANDEM_ROUTER_API_REQUEST_COMMON_H_
#define TANDEM_ROUTER_API_REQUEST_COMMON_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "router/api/json_fields.h"
#include "router/api/request.h"

namespace tandem::router::api_internal {

// A fresh request id: 32 lowercase hex digits of OpenSSL's generator (128 unpredictable bits,
// as SGLang's uuid4().hex).
std::string NewRid();

// A request with the defaults every API shares: kind, created = now, skip_special_tokens true.
RoutedRequest NewRequest(ApiKind kind);

// OK when `effort` is one of OpenAI's reasoning efforts ("none", "minimal", "low", "medium",
// "high", "xhigh"); otherwise a 400 naming `field` (chat's reasoning_effort, Responses'
// reasoning.effort).
absl::Status CheckReasoningEffort(const Json& effort, std::string_view field);

// Reads "rid" (a string; an array is a batched request, rejected) or generates one.
absl::Status ReadRid(const Json& body, RoutedRequest* request);

// The body's "model" ("" when absent): a string of at most 256 bytes without control characters.
absl::StatusOr<std::string> ReadModelName(const Json& body);

// Reads "model" (ReadModelName) and checks that it names the served model (ModelNameServed);
// NotFound (a 404) naming the served model otherwise. request->model (echoed in the response)
// is the name given, or the served name when absent or empty.
absl::Status ReadModel(const Json& body, const ApiContext& ctx, RoutedRequest* request);

// True when `model` names the model this router serves: empty, "default" (what SGLang's clients
// send), ctx.served_model_name, or a path whose last component is the served name or
// ctx.model_dir_name (a client given the model's directory, e.g. bench_serving --model
// /models/Qwen3-8B); any name with ctx.any_model_name.
bool ModelNameServed(std::string_view model, const ApiContext& ctx);

// The OpenAI fields completions and chat share: stream, stream_options, the sampling names
// (temperature, top_p, n, stop, seed, penalties, logit_bias and SGLang's extras), and the
// SGLang/OpenAI features we do not serve (400 when set). Every other key is ignored.
absl::Status ReadOpenAiCommon(const Json& body, RoutedRequest* request);

// Tokenizes request->prompt_text when input_ids is empty (`add_special_tokens` as the tokenizer's
// Encode), then checks the ids (non-empty, inside the vocabulary), sets max_new_tokens to
// `default_max_new_tokens` when the client gave none and applies the context length: a prompt
// of context_length tokens or more is rejected, a longer max_new_tokens is clamped (as SGLang).
absl::Status FinishPrompt(const ApiContext& ctx, int default_max_new_tokens,
                          bool add_special_tokens, RoutedRequest* request);

// The parser for `kind` (one prompt, one choice) on an already parsed body; never throws.
absl::StatusOr<RoutedRequest> ParseRequestJson(ApiKind kind, const Json& body,
                                               const ApiContext& ctx);

// OpenAI's response_format (chat; completions too, as vLLM and SGLang take it there):
// {"type": "text"}, {"type": "json_object"} (any JSON object), {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}, "strict": ...}} or SGLang's {"type":
// "structural_tag", "structures": [...], "triggers": [...]} (engine/grammar/structural_tag.h),
// set on `sampling` as its one grammar constraint. Errors name response_format (chat_request.cc).
absl::Status ReadResponseFormat(const Json& format, proto::SamplingParams* sampling);

// The chat parser on an already parsed body (chat_request.cc).
absl::StatusOr<RoutedRequest> ParseChatCompletionsJson(const Json& body, const ApiContext& ctx);

// The /v1/responses parser on an already parsed body (responses_request.cc).
absl::StatusOr<RoutedRequest> ParseResponsesJson(const Json& body, const ApiContext& ctx);

// Chat "messages" (null when absent) as the conversation the chat template renders: a non-empty
// array of at most 4096 messages of the roles and content parts chat completions serve
// (chat_request.cc). Errors name the message and field.
absl::StatusOr<std::vector<engine::ChatMessage>> ReadConversation(const Json* messages);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_REQUEST_COMMON_H_
