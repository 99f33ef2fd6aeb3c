// ResponseShaper's chat answers read for tool calls and reasoning (router/api/tool_calls.h):
// the non-streamed message and the streamed deltas. OpenAI's shapes: message.tool_calls
// [{"id","type":"function","function":{"name","arguments"}}] with content null when only calls
// were written; streamed, each completed call is one delta.tool_calls entry
// [{"index","id","type","function":{"name","arguments"}}]; finish_reason "tool_calls" when the
// answer stopped (not for length or abort) after calling. SGLang's reasoning_content holds the
// "<think>" text, streamed as delta.reasoning_content.
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/api/response.h"
#include "router/api/shapes.h"
#include "router/api/tool_calls.h"

namespace tandem::router {
namespace {

using api_internal::Json;

Json CallJson(const api_internal::ParsedToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

bool ResponseShaper::ParsesChat() const {
  return (kind_ == ApiKind::kChatCompletions || kind_ == ApiKind::kResponses) &&
         (tool_call_syntax_ != ToolCallSyntax::kNone || separate_reasoning_);
}

Json ResponseShaper::ChatMessage(bool* has_tool_calls) const {
  *has_tool_calls = false;
  if (!ParsesChat()) return {{"role", "assistant"}, {"content", text_}};
  std::string reasoning;
  std::string content = text_;
  if (separate_reasoning_) {
    api_internal::ReasoningSplitter::Split split =
        api_internal::ReasoningSplitter::SplitAll(text_, reasoning_open_);
    reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  const api_internal::SplitText split =
      api_internal::ToolCallSplitter::SplitAll(tool_call_syntax_, tool_names_, content);
  Json message = {{"role", "assistant"}};
  *has_tool_calls = !split.calls.empty();
  message["content"] =
      *has_tool_calls && split.content.empty() ? Json(nullptr) : Json(split.content);
  if (separate_reasoning_)
    message["reasoning_content"] = reasoning.empty() ? Json() : Json(reasoning);
  if (*has_tool_calls) {
    Json calls = Json::array();
    for (const api_internal::ParsedToolCall& call : split.calls) calls.push_back(CallJson(call));
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

Json ResponseShaper::ChatStreamLogprobs(size_t first_new_token) const {
  std::vector<int32_t> ids(output_ids_.begin() + static_cast<ptrdiff_t>(first_new_token),
                           output_ids_.end());
  std::vector<float> lps;
  if (first_new_token < logprobs_.size()) {
    lps.assign(logprobs_.begin() + static_cast<ptrdiff_t>(first_new_token), logprobs_.end());
  }
  api_internal::TopLogprobList top;
  if (return_top_ && first_new_token < top_logprobs_.size()) {
    top.assign(top_logprobs_.begin() + static_cast<ptrdiff_t>(first_new_token),
               top_logprobs_.end());
  }
  return api_internal::ChatLogprobs(tokenizer_, ids, lps, return_top_ ? &top : nullptr);
}

api_internal::SplitText ResponseShaper::SplitAnswer(const proto::DecodeEvent& event,
                                                    std::string* reasoning) {
  std::string content = event.text();
  if (reasoning_splitter_ != nullptr) {
    api_internal::ReasoningSplitter::Split split = reasoning_splitter_->Feed(event.text());
    if (event.finished()) {
      api_internal::ReasoningSplitter::Split rest = reasoning_splitter_->Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    *reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (tool_splitter_ == nullptr) return {std::move(content), {}};
  api_internal::SplitText split = tool_splitter_->Feed(content);
  if (event.finished()) {
    api_internal::SplitText rest = tool_splitter_->Finish();
    split.content += rest.content;
    for (api_internal::ParsedToolCall& call : rest.calls) split.calls.push_back(std::move(call));
  }
  return split;
}

std::string ResponseShaper::ParsedChatChunks(const proto::DecodeEvent& event,
                                             size_t first_new_token) {
  std::string reasoning;
  const api_internal::SplitText split = SplitAnswer(event, &reasoning);

  std::vector<Json> deltas;
  if (!reasoning.empty()) deltas.push_back({{"reasoning_content", reasoning}});
  if (!split.content.empty()) deltas.push_back({{"content", split.content}});
  for (const api_internal::ParsedToolCall& call : split.calls) {
    Json entry = CallJson(call);
    entry["index"] = tool_calls_sent_++;
    deltas.push_back({{"tool_calls", Json::array({std::move(entry)})}});
  }
  const bool logprobs_due = return_logprob_ && output_ids_.size() > first_new_token;
  if (deltas.empty() && (event.finished() || !sent_role_ || logprobs_due)) {
    deltas.push_back(Json::object());
  }
  std::string out;
  for (size_t i = 0; i < deltas.size(); ++i) {
    Json delta = std::move(deltas[i]);
    if (!sent_role_) {
      delta["role"] = "assistant";
      if (!delta.contains("content"))
        delta["content"] = delta.contains("tool_calls") ? Json() : Json("");
      sent_role_ = true;
    }
    const bool last = i + 1 == deltas.size();
    Json choice = {{"index", index_}, {"delta", std::move(delta)}};
    choice["logprobs"] = last && logprobs_due ? ChatStreamLogprobs(first_new_token) : Json();
    choice["finish_reason"] = nullptr;
    if (last && event.finished()) {
      choice["finish_reason"] = api_internal::OpenAiFinishReason(final_.finish_reason());
      if (tool_calls_sent_ > 0 && final_.finish_reason().type() == proto::FinishReason::STOP) {
        choice["finish_reason"] = "tool_calls";
      }
      choice["matched_stop"] = api_internal::MatchedStop(final_.finish_reason());
    }
    Json chunk = {{"id", response_id_},
                  {"object", "chat.completion.chunk"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", Json::array({std::move(choice)})}};
    if (include_usage_) chunk["usage"] = nullptr;
    absl::StrAppend(&out, "data: ", api_internal::Dump(chunk), "\n\n");
  }
  if (event.finished() && include_usage_ && !in_batch_) {
    out += UsageChunk(OwnUsage());
  }
  return out;
}

}  // namespace tandem::router
