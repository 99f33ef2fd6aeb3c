// Response shaping for tandem-router: the decode leg's events (proto::DecodeEvent) become the
// client's JSON body or SSE stream in the shape of the request's API (SGLang /generate, OpenAI
// text_completion, chat.completion / chat.completion.chunk, the Responses API's response object
// and stream events (responses_response.cc, shapes in router/api/responses.h)), plus the error
// bodies.
//
// Shapes:
// - /generate, non-stream: {"text","output_ids","meta_info":{"id","finish_reason",
//   "prompt_tokens","completion_tokens","cached_tokens","e2e_latency"
//   [,"output_token_logprobs":[[logprob,token_id,null],...]]}}; finish_reason is SGLang's object
//   ({"type":"length","length":N} | {"type":"stop","matched":id|"str"|null} |
//   {"type":"abort","message":...}). Streaming: the same object per `data:` line with the text
//   and output_ids CUMULATIVE (as SGLang sends them), finish_reason null until the last one.
//   With return_logprob, meta_info also has "input_token_logprobs" (the prompt from
//   logprob_start_len, or its last token by default; the first entry's logprob null, as
//   SGLang) and, with top_logprobs_num, "input_top_logprobs" (first entry null) and
//   "output_top_logprobs"; the triples' third element is the token's text with
//   return_text_in_logprobs, else null.
// - Completions echo: the prompt's text comes first (in the first chunk when streaming); with
//   logprobs, the prompt's tokens come first too, the first one's logprob and top_logprobs null
//   (as OpenAI); text_offset counts characters of the returned text.
// - OpenAI: finish_reason LENGTH -> "length", STOP -> "stop", ABORT -> "abort" in stream chunks.
//
// Aborts: a non-stream request whose final event is an ABORT must not look like a success, so
// Body() is then not used: call FinalStatus(), which is non-OK (Unavailable with the worker's
// message) and send ErrorResponse(status) — SGLang answers an aborted non-stream request with an
// error JSON too. In a stream, the abort ends the stream with finish_reason "abort" in the last
// chunk, as SGLang does.
//
// Batches (RoutedBatch: a list of prompts, n > 1): one shaper per item, built from the item's
// RoutedRequest. An item's OpenAI chunks carry its index as choices[0].index and the response
// id of the whole request; its streamed /generate objects carry "index" (as SGLang's); its
// stream leaves the usage chunk to BatchStreamUsage. BatchBody merges the items' answers.
//
// Thread-safety: a ResponseShaper is used by one request at a time (not thread-safe); the free
// functions are pure.
#ifndef TANDEM_ROUTER_API_RESPONSE_H_
#define TANDEM_ROUTER_API_RESPONSE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/http_types.h"
#include "nlohmann/json.hpp"
#include "proto/worker.pb.h"
#include "router/api/request.h"
#include "router/api/responses.h"
#include "router/api/shapes.h"

namespace tandem::router {

namespace api_internal {
class ToolCallSplitter;
class ReasoningSplitter;
struct ResponsesStream;
struct SplitText;
}  // namespace api_internal

// Turns the decode leg's events (proto::DecodeEvent, each with the NEW tokens/text since the
// previous one; the last has finished=true, finish_reason, counters, timings) into the client's
// response in the shape of the request's ApiKind. One per request; not thread-safe. Copies what
// it needs from `request`, which need not outlive it. `tokenizer` (optional, borrowed, must
// outlive the shaper; the router always passes its own) gives the token texts of logprobs
// and echo's text of a prompt sent as ids; without it token texts read "token_id:<id>".
class ResponseShaper {
 public:
  explicit ResponseShaper(const RoutedRequest& request,
                          const engine::Tokenizer* tokenizer = nullptr);
  ~ResponseShaper();
  ResponseShaper(const ResponseShaper&) = delete;
  ResponseShaper& operator=(const ResponseShaper&) = delete;

  // Streaming: the SSE bytes to send for this event ("data: {...}\n\n", possibly several
  // events, e.g. OpenAI's final chunk with finish_reason then a usage chunk), "" if nothing.
  std::string StreamEvent(const proto::DecodeEvent& event);
  // Streaming: what ends the stream: "data: [DONE]\n\n" ("" for the Responses API, whose
  // last event says it ended).
  std::string StreamDone();
  // Streaming: an error after the stream started, as SGLang/OpenAI send it
  // ("data: {\"error\":{...}}\n\n"), followed by nothing else.
  std::string StreamError(const absl::Status& status);
  // Non-streaming: accumulate every event, then the one JSON body.
  void Accumulate(const proto::DecodeEvent& event);
  std::string Body(double e2e_latency_s) const;  // /generate meta_info.e2e_latency
  // Non-streaming: OK once a finished event that is not an ABORT was accumulated; Unavailable
  // naming the worker's abort message after an ABORT; Internal when no final event arrived.
  // Check it before Body(): a non-OK status is answered with ErrorResponse().
  absl::Status FinalStatus() const;

  // The id of the response object ("cmpl-<rid>", "chatcmpl-<rid>", "resp_<hex>" or the rid for
  // /generate).
  const std::string& response_id() const { return response_id_; }

  // A Responses API answer to keep (its request asked to be stored, and it completed or was cut
  // short, not failed), once its body was made (Body(), or the final stream event): the entry
  // for ResponseStore::Put under response_id(). nullopt otherwise.
  std::optional<StoredResponse> ToStore() const;

  // Non-streaming batch: the one body for all of a batch's items (each accumulated with
  // FinalStatus OK), in item order. /generate: a JSON list of the items' objects (SGLang's
  // shape). OpenAI: one object whose choices are the items' choices and whose usage sums
  // theirs, each prompt's tokens counted once (items k with k % n == 0, as OpenAI counts them).
  static std::string BatchBody(const std::vector<const ResponseShaper*>& items, int n,
                               double e2e_latency_s);
  // Streaming batch: what goes before [DONE] once every item finished: OpenAI's usage chunk
  // with the summed usage when stream_options.include_usage was set, else "".
  static std::string BatchStreamUsage(const std::vector<const ResponseShaper*>& items, int n);

 private:
  // The events' tokens, logprobs and text appended; the final event kept.
  void Append(const proto::DecodeEvent& event);
  // With `with_index`, the object carries the item's "index" (streamed batches).
  std::string GenerateObject(double e2e_latency_s, bool with_index = false) const;
  std::string UsageChunk(const api_internal::UsageCounts& usage) const;
  // This answer's usage (reasoning counted for chat that separates it).
  api_internal::UsageCounts OwnUsage() const;
  // A batch's usage: `item`'s added to `*usage`, its prompt only when `counts_prompt` (the
  // n choices of one prompt share it).
  static void AddUsage(const ResponseShaper& item, bool counts_prompt,
                       api_internal::UsageCounts* usage);
  std::string OpenAiStreamChunks(const proto::DecodeEvent& event, size_t first_new_token);
  std::string OpenAiBody() const;
  nlohmann::json OpenAiChoice() const;  // choices[] entry of a non-streamed body
  // Chat whose answer is read for tool calls or reasoning (chat_response.cc).
  bool ParsesChat() const;
  // Chat, non-streamed: the message ({"role","content"[,"reasoning_content"][,"tool_calls"]})
  // and whether it holds tool calls.
  nlohmann::json ChatMessage(bool* has_tool_calls) const;
  // An event's text split as the answer streams: reasoning (with the reasoning splitter) into
  // `*reasoning`, the content and the calls completed (with the tool splitter); the splitters'
  // held text too when the event is the last.
  api_internal::SplitText SplitAnswer(const proto::DecodeEvent& event, std::string* reasoning);
  // Chat, streamed, with ParsesChat(): the chunks for this event (reasoning, content and
  // completed calls as deltas; the finish reason on the last).
  std::string ParsedChatChunks(const proto::DecodeEvent& event, size_t first_new_token);
  // The Responses API (responses_response.cc): the Response object with `status` and `output`
  // (usage too unless in progress), the output items of a whole answer, and a stream's events.
  nlohmann::json ResponseObject(const std::string& status, nlohmann::json output) const;
  std::string ResponsesStatus() const;  // "completed", "incomplete" or "failed"
  nlohmann::json ResponsesOutput(nlohmann::json* assistant_turn) const;
  std::string ResponsesBody() const;
  std::string ResponsesStreamEvents(const proto::DecodeEvent& event);
  std::string ResponsesStreamError(const absl::Status& status);
  // Chat, streamed: the logprobs of the tokens from `first_new_token` on.
  nlohmann::json ChatStreamLogprobs(size_t first_new_token) const;
  int64_t PromptTokens() const;
  // The prompt positions scored: [start, prompt length), start's logprob null.
  int64_t InputLogprobStart() const;
  // The prompt's ids from InputLogprobStart() on, their logprobs (NaN for the first) and
  // alternatives (none for the first).
  void InputLogprobs(std::vector<int32_t>* ids, std::vector<float>* logprobs,
                     std::vector<proto::TopLogprobs>* top) const;
  // Completions echo: the prompt's text (decoded when it was sent as ids).
  std::string EchoText() const;
  int64_t CompletionTokens() const;
  // Of the answer's tokens, those of its "<think>" reasoning (through "</think>"), counted by
  // detokenizing the answer's ids; 0 without separated reasoning or without a tokenizer.
  int64_t ReasoningTokens() const;

  const ApiKind kind_;
  const std::string rid_;
  const std::string response_id_;
  const std::string model_;
  const int64_t created_;
  const int index_;      // choices[].index / SGLang "index" of a batch item; 0 otherwise
  const bool in_batch_;  // an item of a batch (RoutedRequest::batch_rid set)
  const bool return_logprob_;
  const bool return_top_;  // alternatives per position were asked for (top_logprobs > 0)
  const bool include_usage_;
  const int64_t routed_prompt_tokens_;  // until the worker reports its own count
  const engine::Tokenizer* const tokenizer_;
  const bool echo_;                     // completions: the prompt text first
  const bool return_text_in_logprobs_;  // /generate: token texts in the triples
  const bool skip_special_tokens_;
  const int32_t logprob_start_len_;
  const std::string prompt_text_;  // as the client sent it ("" for token ids)
  // The prompt (with return_logprob or echo): /generate's input_token_logprobs, echo.
  const std::vector<int32_t> input_ids_;
  const ToolCallSyntax tool_call_syntax_;      // chat: how tool calls are written
  const std::vector<std::string> tool_names_;  // the functions calls may name
  const bool separate_reasoning_;              // chat: <think> goes to reasoning_content
  const bool reasoning_open_;  // RoutedRequest::reasoning_open: the answer starts as reasoning
  const std::shared_ptr<const ResponsesRequest> responses_;  // kResponses only
  // kResponses: the stream's items and events so far; the final Response object's text and the
  // assistant turn it adds to the conversation, once made.
  std::unique_ptr<api_internal::ResponsesStream> responses_stream_;
  mutable std::string responses_final_;
  mutable nlohmann::json responses_turn_;
  // Chat streams with ParsesChat(): the splitters, fed each event's text.
  std::unique_ptr<api_internal::ReasoningSplitter> reasoning_splitter_;
  std::unique_ptr<api_internal::ToolCallSplitter> tool_splitter_;
  int tool_calls_sent_ = 0;  // delta.tool_calls[].index of the next streamed call
  const absl::Time start_;   // for the streamed /generate e2e_latency
  // OpenAI streams: a chunk's JSON up to the choice's fields ({"id":...,"choices":[{"index":0,).
  std::string stream_chunk_head_;
  // /generate: the rid as a JSON string, rendered once.
  std::string rid_json_;

  // Accumulated over the events.
  std::string text_;
  std::vector<int32_t> output_ids_;
  std::vector<float> logprobs_;
  std::vector<proto::TopLogprobs> top_logprobs_;  // with return_top_
  bool finished_ = false;   // a final event arrived, or the stream ended with an error
  bool sent_role_ = false;  // chat stream: the first chunk carries the assistant role
  bool sent_echo_ = false;  // completions stream: the first chunk carries the prompt
  api_internal::CharCounter stream_offsets_;  // completions stream: text_offset so far
  bool has_prompt_logprobs_ = false;
  proto::PromptLogprobs prompt_logprobs_;  // from the worker that prefilled
  proto::DecodeEvent final_;               // the final event (counters, finish reason)
};

// `status` carrying an explicit HTTP status for ErrorResponse/HttpStatusFor (e.g. 413 for a
// request too large to send to a worker, which no absl code says). `status` must not be OK.
absl::Status WithHttpStatus(absl::Status status, int http_status);

// The HTTP status and JSON error body ({"error":{"message","type","param","code"}}, OpenAI
// shape) for a Status: the status set by WithHttpStatus if any, else InvalidArgument 400, NotFound
// 404, AlreadyExists 409, ResourceExhausted 429, DeadlineExceeded 408 when the message mentions the
// queue (queue timeout) else 504, Unavailable 503, Unauthenticated 401, PermissionDenied 403,
// FailedPrecondition 400, else 500. An OK status is a programming error and yields a 500.
HttpResponse ErrorResponse(const absl::Status& status);

// The HTTP status ErrorResponse uses for `status`.
int HttpStatusFor(const absl::Status& status);

// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by","root",
// "max_model_len"}]} (max_model_len is SGLang's and vLLM's card field: the context length, null
// when `context_length` is 0, unknown).
std::string ModelsBody(const std::string& id, int64_t created, int context_length);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_API_RESPONSE_H_
