// The state of a Responses API stream (internal to router/api; responses_response.cc): the
// sequence of its events and the output items open and done.
//
// Thread-safety: used by one request at a time (not thread-safe).
#ifndef TANDEM_ROUTER_API_RESPONSES_STREAM_H_
#define TANDEM_ROUTER_API_RESPONSES_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "router/api/shapes.h"
#include "router/api/tool_calls.h"

namespace tandem::router::api_internal {

struct ResponsesStream {
  enum class Open { kNone, kReasoning, kMessage };

  bool started = false;
  int64_t sequence = 0;
  Open open = Open::kNone;
  std::string item_id;                 // the open item's
  std::string item_text;               // the open item's text so far
  Json item_logprobs = Json::array();  // the open message's token logprobs so far
  size_t tokens_scored = 0;            // the answer's tokens whose logprobs were placed
  Json output = Json::array();         // the items done, in order
  std::string content;                 // every message text, for the conversation
  Json calls = Json::array();          // the calls as chat's tool_calls, for the conversation

  // One event: `event:` and `data:` lines, the data with its type and sequence number.
  std::string Event(const char* type, Json fields);
  int64_t output_index() const { return static_cast<int64_t>(output.size()); }
  // Opens an item of `kind` unless one is open: closes the one open, then announces the new
  // item and its content part.
  std::string OpenItem(Open kind);
  // The text delta of the open item; a message's carries `logprobs` (its new tokens' entries).
  std::string Delta(const std::string& text, Json logprobs = Json::array());
  // Closes the open item, if any: its text and part done, then the item with `status`
  // ("incomplete" for the last item of an answer cut at max_output_tokens).
  std::string Close(const char* status = "completed");
  // A completed call: its item announced, its arguments in one delta, done.
  std::string Call(const ParsedToolCall& call);

  // The content part of an item of `kind` holding `text`, and the finished items.
  static Json Part(Open kind, const std::string& text, Json logprobs = Json::array());
  static Json MessageItem(const std::string& id, Json part, const char* status = "completed");
  static Json ReasoningItem(const std::string& id, Json part, const char* status = "completed");
  // A call as chat's tool_calls entry.
  static Json ChatCall(const ParsedToolCall& call);
};

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_RESPONSES_STREAM_H_
