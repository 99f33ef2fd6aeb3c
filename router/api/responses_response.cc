// ResponseShaper's Responses API answers (router/api/responses.h): the Response object, and the
// stream's events. An answer is read for reasoning and tool calls as chat's is (tool_calls.h);
// its output items are, in order: a reasoning item (the "<think>" text, with the router's
// --reasoning-parser), a message item with one output_text part, and a function_call item per
// call. A stream opens an item when its first text arrives and closes it when another kind of
// text (or a call) follows, so its items follow the answer's order.
#include "router/api/response.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/http_types.h"
#include "engine/tokenizer/tokenizer.h"
#include "router/api/request_common.h"
#include "router/api/responses_stream.h"
#include "router/api/shapes.h"
#include "router/api/tool_calls.h"

namespace tandem::router {
namespace api_internal {

std::string ResponsesStream::Event(const char* type, Json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence++;
  return absl::StrCat("event: ", type, "\ndata: ", Dump(fields), "\n\n");
}

std::string ResponsesStream::OpenItem(Open kind) {
  if (open == kind) return "";
  std::string out = Close();
  open = kind;
  item_text.clear();
  item_logprobs = Json::array();
  const bool message = kind == Open::kMessage;
  item_id = absl::StrCat(message ? "msg_" : "rs_", NewRid());
  Json item = message ? Json{{"type", "message"},
                             {"id", item_id},
                             {"status", "in_progress"},
                             {"role", "assistant"},
                             {"content", Json::array()}}
                      : Json{{"type", "reasoning"},
                             {"id", item_id},
                             {"summary", Json::array()},
                             {"content", Json::array()},
                             {"status", "in_progress"}};
  out += Event("response.output_item.added",
               {{"output_index", output_index()}, {"item", std::move(item)}});
  out += Event("response.content_part.added", {{"item_id", item_id},
                                               {"output_index", output_index()},
                                               {"content_index", 0},
                                               {"part", Part(kind, "")}});
  return out;
}

std::string ResponsesStream::Delta(const std::string& text, Json logprobs) {
  item_text += text;
  if (open == Open::kMessage) {
    content += text;
    for (const Json& entry : logprobs) item_logprobs.push_back(entry);
    return Event("response.output_text.delta", {{"item_id", item_id},
                                                {"output_index", output_index()},
                                                {"content_index", 0},
                                                {"delta", text},
                                                {"logprobs", std::move(logprobs)}});
  }
  return Event("response.reasoning_text.delta", {{"item_id", item_id},
                                                 {"output_index", output_index()},
                                                 {"content_index", 0},
                                                 {"delta", text}});
}

std::string ResponsesStream::Close(const char* status) {
  if (open == Open::kNone) return "";
  const bool message = open == Open::kMessage;
  Json part = Part(open, item_text, item_logprobs);
  std::string out;
  Json done = {{"item_id", item_id},
               {"output_index", output_index()},
               {"content_index", 0},
               {"text", item_text}};
  if (message) done["logprobs"] = item_logprobs;
  out += Event(message ? "response.output_text.done" : "response.reasoning_text.done",
               std::move(done));
  out += Event("response.content_part.done", {{"item_id", item_id},
                                              {"output_index", output_index()},
                                              {"content_index", 0},
                                              {"part", part}});
  Json item = message ? MessageItem(item_id, std::move(part), status)
                      : ReasoningItem(item_id, std::move(part), status);
  out += Event("response.output_item.done", {{"output_index", output_index()}, {"item", item}});
  output.push_back(std::move(item));
  open = Open::kNone;
  return out;
}

std::string ResponsesStream::Call(const ParsedToolCall& call) {
  std::string out = Close();
  const std::string id = absl::StrCat("fc_", NewRid());
  Json item = {{"type", "function_call"}, {"id", id},        {"call_id", call.id},
               {"name", call.name},       {"arguments", ""}, {"status", "in_progress"}};
  out += Event("response.output_item.added", {{"output_index", output_index()}, {"item", item}});
  out += Event("response.function_call_arguments.delta",
               {{"item_id", id}, {"output_index", output_index()}, {"delta", call.arguments}});
  out += Event("response.function_call_arguments.done", {{"item_id", id},
                                                         {"output_index", output_index()},
                                                         {"name", call.name},
                                                         {"arguments", call.arguments}});
  item["arguments"] = call.arguments;
  item["status"] = "completed";
  out += Event("response.output_item.done", {{"output_index", output_index()}, {"item", item}});
  output.push_back(std::move(item));
  calls.push_back(ChatCall(call));
  return out;
}

Json ResponsesStream::Part(Open kind, const std::string& text, Json logprobs) {
  if (kind == Open::kReasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", Json::array()},
          {"logprobs", std::move(logprobs)}};
}
Json ResponsesStream::MessageItem(const std::string& id, Json part, const char* status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", Json::array({std::move(part)})}};
}
Json ResponsesStream::ReasoningItem(const std::string& id, Json part, const char* status) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", Json::array()},
          {"content", Json::array({std::move(part)})},
          {"status", status}};
}
Json ResponsesStream::ChatCall(const ParsedToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace api_internal

using api_internal::Json;
using api_internal::ResponsesStream;

ResponseShaper::~ResponseShaper() = default;

std::string ResponseShaper::ResponsesStatus() const {
  switch (final_.finish_reason().type()) {
    case proto::FinishReason::LENGTH:
      return "incomplete";
    case proto::FinishReason::ABORT:
      return "failed";
    default:
      return "completed";
  }
}

Json ResponseShaper::ResponseObject(const std::string& status, Json output) const {
  Json response = responses_ != nullptr ? responses_->echo : Json::object();
  response["id"] = response_id_;
  response["object"] = "response";
  response["created_at"] = created_;
  response["model"] = model_;
  response["status"] = status;
  response["output"] = std::move(output);
  response["error"] = nullptr;
  response["incomplete_details"] = nullptr;
  response["usage"] = nullptr;
  if (status == "in_progress") return response;
  if (status == "incomplete") response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "failed") {
    const std::string& why = final_.finish_reason().message();
    response["error"] = {
        {"code", "server_error"},
        {"message", absl::StrCat("the response was aborted", why.empty() ? "" : ": ", why)}};
  }
  const int64_t input = PromptTokens();
  const int64_t output_tokens = CompletionTokens();
  response["usage"] = {{"input_tokens", input},
                       {"input_tokens_details", {{"cached_tokens", final_.cached_tokens()}}},
                       {"output_tokens", output_tokens},
                       {"output_tokens_details", {{"reasoning_tokens", ReasoningTokens()}}},
                       {"total_tokens", input + output_tokens}};
  return response;
}

int64_t ResponseShaper::ReasoningTokens() const {
  if (!separate_reasoning_ || tokenizer_ == nullptr) return 0;
  const size_t reasoning_bytes =
      api_internal::ReasoningSplitter::ReasoningBytes(text_, reasoning_open_);
  if (reasoning_bytes == 0) return 0;
  // The answer's text is its ids detokenized as they streamed: replay that until the text
  // covers the reasoning.
  engine::IncrementalDetokenizer detokenizer(*tokenizer_, skip_special_tokens_);
  size_t bytes = 0;
  for (size_t i = 0; i < output_ids_.size(); ++i) {
    bytes += detokenizer.Push(output_ids_[i]).size();
    if (bytes >= reasoning_bytes) return static_cast<int64_t>(i + 1);
  }
  return static_cast<int64_t>(output_ids_.size());
}

Json ResponseShaper::ResponsesOutput(Json* assistant_turn) const {
  bool has_calls = false;
  const Json message = ChatMessage(&has_calls);
  Json output = Json::array();
  if (const auto it = message.find("reasoning_content"); it != message.end() && it->is_string()) {
    output.push_back(ResponsesStream::ReasoningItem(
        absl::StrCat("rs_", api_internal::NewRid()),
        ResponsesStream::Part(ResponsesStream::Open::kReasoning, it->get<std::string>())));
  }
  const std::string content = message["content"].is_string() ? message["content"] : "";
  if (!content.empty() || !has_calls) {
    output.push_back(ResponsesStream::MessageItem(
        absl::StrCat("msg_", api_internal::NewRid()),
        ResponsesStream::Part(ResponsesStream::Open::kMessage, content,
                              return_logprob_ ? ChatStreamLogprobs(0)["content"] : Json::array())));
  }
  *assistant_turn = {{"role", "assistant"}, {"content", content}};
  if (has_calls) {
    for (const Json& call : message["tool_calls"]) {
      output.push_back({{"type", "function_call"},
                        {"id", absl::StrCat("fc_", api_internal::NewRid())},
                        {"call_id", call["id"]},
                        {"name", call["function"]["name"]},
                        {"arguments", call["function"]["arguments"]},
                        {"status", "completed"}});
    }
    (*assistant_turn)["tool_calls"] = message["tool_calls"];
  }
  // The text that was cut is the last item's: OpenAI marks that item incomplete too.
  if (ResponsesStatus() == "incomplete" && !output.empty() &&
      output.back()["type"] != "function_call") {
    output.back()["status"] = "incomplete";
  }
  return output;
}

std::string ResponseShaper::ResponsesBody() const {
  Json output = ResponsesOutput(&responses_turn_);
  responses_final_ = api_internal::Dump(ResponseObject(ResponsesStatus(), std::move(output)));
  return responses_final_;
}

std::string ResponseShaper::ResponsesStreamEvents(const proto::DecodeEvent& event) {
  if (responses_stream_ == nullptr) responses_stream_ = std::make_unique<ResponsesStream>();
  ResponsesStream& stream = *responses_stream_;
  std::string out;
  if (!stream.started) {
    stream.started = true;
    const Json in_progress = ResponseObject("in_progress", Json::array());
    out += stream.Event("response.created", {{"response", in_progress}});
    out += stream.Event("response.in_progress", {{"response", in_progress}});
  }
  std::string reasoning;
  const api_internal::SplitText split = SplitAnswer(event, &reasoning);
  if (!reasoning.empty()) {
    out += stream.OpenItem(ResponsesStream::Open::kReasoning);
    out += stream.Delta(reasoning);
  }
  // The logprobs of the tokens not placed yet, for the message's text (all of them: the tokens of
  // reasoning and calls too).
  auto unplaced_logprobs = [&] {
    if (!return_logprob_ || stream.tokens_scored >= output_ids_.size()) return Json::array();
    Json entries = ChatStreamLogprobs(stream.tokens_scored)["content"];
    stream.tokens_scored = output_ids_.size();
    return entries;
  };
  if (!split.content.empty()) {
    out += stream.OpenItem(ResponsesStream::Open::kMessage);
    out += stream.Delta(split.content, unplaced_logprobs());
  }
  for (const api_internal::ParsedToolCall& call : split.calls) out += stream.Call(call);
  if (!event.finished()) return out;

  // An answer with no text and no call still has its (empty) message.
  const bool any_message = stream.open == ResponsesStream::Open::kMessage || !stream.calls.empty();
  bool listed_message = false;
  for (const Json& item : stream.output) listed_message |= item["type"] == "message";
  if (!any_message && !listed_message) out += stream.OpenItem(ResponsesStream::Open::kMessage);
  if (stream.open == ResponsesStream::Open::kMessage) {
    for (const Json& entry : unplaced_logprobs()) stream.item_logprobs.push_back(entry);
  }
  const std::string status = ResponsesStatus();
  // The text that was cut is the last item's: OpenAI marks that item incomplete too.
  out += stream.Close(status == "incomplete" ? "incomplete" : "completed");
  const Json response = ResponseObject(status, stream.output);
  responses_final_ = api_internal::Dump(response);
  responses_turn_ = {{"role", "assistant"}, {"content", stream.content}};
  if (!stream.calls.empty()) responses_turn_["tool_calls"] = stream.calls;
  const std::string type = absl::StrCat("response.", status);
  out += stream.Event(type.c_str(), {{"response", response}});
  return out;
}

std::string ResponseShaper::ResponsesStreamError(const absl::Status& status) {
  finished_ = true;
  if (responses_stream_ == nullptr) responses_stream_ = std::make_unique<ResponsesStream>();
  ResponsesStream& stream = *responses_stream_;
  const int http_status = HttpStatusFor(status);
  const std::string message(status.message());
  std::string out = stream.Event(
      "error",
      {{"code", ErrorTypeForStatus(http_status)}, {"message", message}, {"param", nullptr}});
  Json response = ResponseObject("in_progress", stream.output);
  response["status"] = "failed";
  response["error"] = {{"code", "server_error"}, {"message", message}};
  out += stream.Event("response.failed", {{"response", std::move(response)}});
  responses_final_.clear();  // a failed response is not kept
  return out;
}

std::optional<StoredResponse> ResponseShaper::ToStore() const {
  if (responses_ == nullptr || !responses_->store || responses_final_.empty() ||
      ResponsesStatus() == "failed") {
    return std::nullopt;
  }
  StoredResponse entry;
  entry.body = responses_final_;
  entry.conversation = responses_->conversation;
  // The answer's text as the model wrote it may hold ill-formed UTF-8: stored as the client saw
  // it (U+FFFD), so the next turn's prompt and every dump of the entry are well-formed.
  entry.conversation.push_back(Json::parse(api_internal::Dump(responses_turn_)));
  entry.input_items = responses_->input_items;
  return entry;
}

}  // namespace tandem::router
