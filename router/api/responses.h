// OpenAI's Responses API (POST /v1/responses) on the chat pipeline: a request's `input` items
// (and `instructions`, and the conversation of its `previous_response_id`) become chat messages
// that the chat parser renders with the template; the answer comes back as a Response object, or
// as Response stream events (router/api/responses_response.cc). Responses asked to be stored
// (`store`, true by default, as OpenAI) are kept in a bounded ResponseStore, so a client can read
// one back and continue a conversation from it.
//
// Decisions, where OpenAI leaves room or we serve a subset:
// - Text only: `input` is a string or a list of items: messages (role user, system, developer
//   (read as system) or assistant; content a string or input_text / output_text parts, refusal
//   parts on assistant turns), function_call and function_call_output items (a call made in an
//   earlier turn and its result), and reasoning items, which are skipped (templates drop past
//   reasoning). Images, files, audio, item references and every other item type are 400s naming
//   the item.
// - Tools: function tools only ({"type":"function","name","description","parameters","strict"});
//   built-in tools (web search, file search, code interpreter, MCP...) are 400s.
//   `tool_choice` "auto", "none", "required" or {"type":"function","name"}. Calls are read from
//   the answer as chat reads them (router/api/tool_calls.h) and come back as function_call items.
// - `text.format` {"type":"text"|"json_object"|"json_schema" (name, schema, strict)} constrains
//   the answer as chat's response_format does; `reasoning.effort` "none" turns thinking off as
//   chat's reasoning_effort does; with the router's --reasoning-parser, "<think>" text comes
//   back as a reasoning item.
// - `max_output_tokens`, `temperature`, `top_p`, `parallel_tool_calls`, `metadata` (at most 16
//   string pairs, keys up to 64 and values up to 512 characters, as OpenAI), `user`,
//   `truncation` ("disabled"; "auto" is accepted and changes nothing: a conversation over the
//   context is a 400), `include` (ignored but for logprobs) and SGLang's sampling extras (top_k,
//   min_p, seed, stop, penalties) as chat reads them. Not served, each a 400 when set:
//   `background`, `conversation`, `prompt` (stored prompt templates).
// - Logprobs: `include` "message.output_text.logprobs" or `top_logprobs` > 0 (up to 20
//   alternatives) returns them on the output_text part (and each output_text.delta event), in
//   chat's entry shape ({"token","logprob","bytes","top_logprobs"}). They cover every token of the
//   answer, the tokens of reasoning and of calls included (one list, on the message's text).
// - Ids: "resp_" + 32 hex digits, fresh for every response (the request's rid, x-request-id,
//   stays the rid); items "msg_", "rs_", "fc_" likewise.
// - Status: "completed"; "incomplete" with incomplete_details.reason "max_output_tokens" when
//   the answer was cut at max_output_tokens (or the context); "failed" with an error when a
//   worker aborted the answer (a non-streamed one is answered with the error instead, as chat).
// - Usage: input_tokens (cached_tokens as the workers count them), output_tokens, total_tokens;
//   output_tokens_details.reasoning_tokens counts the answer's tokens through "</think>" when
//   reasoning is separated (0 otherwise).
// - Streams: OpenAI's event sequence (response.created, response.in_progress,
//   response.output_item.added, response.content_part.added, response.output_text.delta ...
//   .done, response.reasoning_text.*, response.function_call_arguments.delta / .done,
//   response.output_item.done, then response.completed, response.incomplete or
//   response.failed), each with `event:` and a sequence_number; no "[DONE]" follows.
//
// Thread-safety: ParseResponses is pure but for the store it reads; ResponseStore is
// thread-safe.
#ifndef TANDEM_ROUTER_API_RESPONSES_H_
#define TANDEM_ROUTER_API_RESPONSES_H_

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"

namespace tandem::router {

// What a /v1/responses request carries beyond its RoutedRequest (RoutedRequest::responses).
struct ResponsesRequest {
  std::string id;  // "resp_<32 hex>"
  // The request's settings a Response object repeats (instructions, max_output_tokens,
  // metadata, tools, ...), defaults filled in.
  nlohmann::json echo;
  bool store = true;
  // The conversation as chat messages: the previous response's, then this request's input
  // (instructions are not part of it: they hold for one response, as OpenAI's).
  nlohmann::json conversation;
  // This request's input as Response items with ids (GET /v1/responses/{id}/input_items).
  nlohmann::json input_items;
};

// A response kept for GET /v1/responses/{id} and for previous_response_id.
struct StoredResponse {
  std::string body;             // the Response object's JSON text
  nlohmann::json conversation;  // chat messages up to and including this response's answer
  nlohmann::json input_items;   // ResponsesRequest::input_items
  size_t bytes = 0;             // what the entry is counted as against the store's bound
};

// Stored responses by id, least recently used first out once their bytes pass the bound.
// Thread-safe.
class ResponseStore {
 public:
  // `max_bytes` 0 stores nothing.
  explicit ResponseStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Keeps `response` under `id` (replacing an entry of that id); an entry larger than the whole
  // bound is not kept. Sets response->bytes.
  void Put(const std::string& id, StoredResponse response) ABSL_LOCKS_EXCLUDED(mu_);
  // The entry, or null; a hit counts as a use.
  std::shared_ptr<const StoredResponse> Get(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // True when an entry was removed.
  bool Delete(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);

  size_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const StoredResponse> response;
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Parses and validates a /v1/responses body into the RoutedRequest the chat pipeline serves
// (kind kResponses, `responses` set). `ctx.response_store` (may be null) answers
// previous_response_id; an unknown one is NotFound (404). Errors name the field
// ("input[2].content[0].type ..."). Never throws.
absl::StatusOr<RoutedRequest> ParseResponses(std::string_view body, const ApiContext& ctx);

// GET /v1/responses/{id}/input_items: {"object":"list","data","first_id","last_id","has_more"}
// of `items` from the query's `after` (an item id), `limit` (1-100, default 20) and `order`
// ("desc", the default, or "asc"). A bad query value is InvalidArgument naming it.
absl::StatusOr<std::string> InputItemsPage(const nlohmann::json& items, std::string_view order,
                                           std::string_view after, std::string_view limit);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_API_RESPONSES_H_
