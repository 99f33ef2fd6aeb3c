#include "router/api/response.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/api/responses_stream.h"
#include "router/api/shapes.h"
#include "router/api/tool_calls.h"

namespace tandem::router {
namespace {

using api_internal::Dump;
using api_internal::Json;

// The Status payload type URL under which WithHttpStatus keeps the HTTP status.
constexpr char kHttpStatusPayload[] = "type.tandem/router.http_status";

std::string ResponseIdFor(const RoutedRequest& request) {
  const std::string& rid = request.batch_rid.empty() ? request.rid : request.batch_rid;
  switch (request.kind) {
    case ApiKind::kCompletions:
      return "cmpl-" + rid;
    case ApiKind::kChatCompletions:
      return "chatcmpl-" + rid;
    case ApiKind::kResponses:
      return request.responses != nullptr ? request.responses->id : "resp_" + rid;
    case ApiKind::kGenerate:
      break;
  }
  return request.rid;  // /generate: each item's meta_info.id is its own rid
}

// Chat and the Responses API read answers for tool calls and reasoning alike.
bool ChatLike(ApiKind kind) {
  return kind == ApiKind::kChatCompletions || kind == ApiKind::kResponses;
}

std::string SseData(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }

}  // namespace

ResponseShaper::ResponseShaper(const RoutedRequest& request, const engine::Tokenizer* tokenizer)
    : kind_(request.kind),
      rid_(request.rid),
      response_id_(ResponseIdFor(request)),
      model_(request.model),
      created_(request.created),
      index_(request.index),
      in_batch_(!request.batch_rid.empty()),
      return_logprob_(request.return_logprob),
      return_top_(request.return_logprob && request.top_logprobs > 0),
      include_usage_(request.include_usage),
      routed_prompt_tokens_(static_cast<int64_t>(request.input_ids.size())),
      tokenizer_(tokenizer),
      echo_(request.kind == ApiKind::kCompletions && request.echo),
      return_text_in_logprobs_(request.return_text_in_logprobs),
      skip_special_tokens_(request.sampling.skip_special_tokens()),
      logprob_start_len_(request.logprob_start_len),
      prompt_text_(echo_ ? request.prompt_text : std::string()),
      input_ids_(request.return_logprob || echo_ ? request.input_ids : std::vector<int32_t>()),
      tool_call_syntax_(ChatLike(request.kind) ? request.tool_call_syntax : ToolCallSyntax::kNone),
      tool_names_(request.tool_names),
      separate_reasoning_(ChatLike(request.kind) && request.separate_reasoning),
      reasoning_open_(separate_reasoning_ && request.reasoning_open),
      responses_(request.kind == ApiKind::kResponses ? request.responses : nullptr),
      start_(absl::Now()) {
  if (ParsesChat()) {
    if (separate_reasoning_) {
      reasoning_splitter_ = std::make_unique<api_internal::ReasoningSplitter>(reasoning_open_);
    }
    tool_splitter_ =
        std::make_unique<api_internal::ToolCallSplitter>(tool_call_syntax_, tool_names_);
  }
  if (kind_ == ApiKind::kGenerate) rid_json_ = Dump(Json(rid_));
  if (kind_ != ApiKind::kGenerate) {
    const char* object =
        kind_ == ApiKind::kChatCompletions ? "chat.completion.chunk" : "text_completion";
    stream_chunk_head_ = absl::StrCat("{\"id\":", Dump(response_id_), ",\"object\":\"", object,
                                      "\",\"created\":", created_, ",\"model\":", Dump(model_),
                                      ",\"choices\":[{\"index\":", index_, ",");
  }
}

void ResponseShaper::Append(const proto::DecodeEvent& event) {
  text_ += event.text();
  output_ids_.insert(output_ids_.end(), event.token_ids().begin(), event.token_ids().end());
  logprobs_.insert(logprobs_.end(), event.token_logprobs().begin(), event.token_logprobs().end());
  if (return_top_) {
    top_logprobs_.insert(top_logprobs_.end(), event.top_logprobs().begin(),
                         event.top_logprobs().end());
  }
  if (event.has_prompt_logprobs() && !has_prompt_logprobs_) {
    has_prompt_logprobs_ = true;
    prompt_logprobs_ = event.prompt_logprobs();
  }
  if (event.finished()) {
    finished_ = true;
    final_ = event;
  }
}

int64_t ResponseShaper::InputLogprobStart() const {
  const int64_t n = static_cast<int64_t>(input_ids_.size());
  if (has_prompt_logprobs_) return std::clamp<int64_t>(prompt_logprobs_.start(), 0, n - 1);
  return logprob_start_len_ < 0 ? n - 1 : std::min<int64_t>(logprob_start_len_, n - 1);
}

void ResponseShaper::InputLogprobs(std::vector<int32_t>* ids, std::vector<float>* logprobs,
                                   std::vector<proto::TopLogprobs>* top) const {
  if (input_ids_.empty()) return;
  const int64_t start = InputLogprobStart();
  ids->assign(input_ids_.begin() + start, input_ids_.end());
  logprobs->push_back(std::numeric_limits<float>::quiet_NaN());
  top->emplace_back();
  if (!has_prompt_logprobs_) return;
  logprobs->insert(logprobs->end(), prompt_logprobs_.logprobs().begin(),
                   prompt_logprobs_.logprobs().end());
  top->insert(top->end(), prompt_logprobs_.top_logprobs().begin(),
              prompt_logprobs_.top_logprobs().end());
}

std::string ResponseShaper::EchoText() const {
  if (!prompt_text_.empty() || tokenizer_ == nullptr) return prompt_text_;
  return tokenizer_->Decode(input_ids_, skip_special_tokens_);
}

int64_t ResponseShaper::PromptTokens() const {
  return final_.prompt_tokens() > 0 ? final_.prompt_tokens() : routed_prompt_tokens_;
}

int64_t ResponseShaper::CompletionTokens() const {
  return final_.completion_tokens() > 0 ? final_.completion_tokens()
                                        : static_cast<int64_t>(output_ids_.size());
}

// Written directly rather than through a JSON DOM (this runs once per non-streamed request and
// once per streamed event). The bytes are those Dump() gives for the same object: nlohmann's
// object keeps its keys sorted, so they are written here in sorted order; strings and the
// floating-point latency are still rendered by nlohmann, so escaping and number format match.
std::string ResponseShaper::GenerateObject(double e2e_latency_s, bool with_index) const {
  std::string out;
  out.reserve(160 + text_.size() + 8 * output_ids_.size());
  out += '{';
  if (with_index) absl::StrAppend(&out, "\"index\":", index_, ",");
  absl::StrAppend(&out, "\"meta_info\":{\"cached_tokens\":", final_.cached_tokens(),
                  ",\"completion_tokens\":", CompletionTokens());
  if (finished_) absl::StrAppend(&out, ",\"e2e_latency\":", Dump(Json(e2e_latency_s)));
  out += ",\"finish_reason\":";
  const proto::FinishReason& reason = final_.finish_reason();
  if (!finished_) {
    out += "null";
  } else if (reason.type() == proto::FinishReason::LENGTH) {
    absl::StrAppend(&out, "{\"length\":", reason.length(), ",\"type\":\"length\"}");
  } else {
    out += Dump(api_internal::SglangFinishReason(reason));
  }
  absl::StrAppend(&out, ",\"id\":", rid_json_);
  if (return_logprob_) {
    const engine::Tokenizer* texts = return_text_in_logprobs_ ? tokenizer_ : nullptr;
    std::vector<int32_t> input_ids;
    std::vector<float> input_logprobs;
    api_internal::TopLogprobList input_top;
    InputLogprobs(&input_ids, &input_logprobs, &input_top);
    absl::StrAppend(&out, ",\"input_token_logprobs\":",
                    Dump(api_internal::SglangTokenLogprobs(input_ids, input_logprobs, texts)));
    if (return_top_) {
      // The first prompt position has no alternatives: null, as SGLang.
      if (!input_top.empty()) input_top.erase(input_top.begin());
      absl::StrAppend(&out, ",\"input_top_logprobs\":",
                      Dump(api_internal::SglangTopLogprobs(input_top, texts, 1)));
    }
    absl::StrAppend(&out, ",\"output_token_logprobs\":",
                    Dump(api_internal::SglangTokenLogprobs(output_ids_, logprobs_, texts)));
    if (return_top_) {
      absl::StrAppend(&out, ",\"output_top_logprobs\":",
                      Dump(api_internal::SglangTopLogprobs(top_logprobs_, texts)));
    }
  }
  absl::StrAppend(&out, ",\"prompt_tokens\":", PromptTokens(), "},\"output_ids\":[");
  for (size_t i = 0; i < output_ids_.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, output_ids_[i]);
  }
  absl::StrAppend(&out, "],\"text\":", Dump(Json(text_)), "}");
  return out;
}

std::string ResponseShaper::StreamEvent(const proto::DecodeEvent& event) {
  if (finished_) return "";  // nothing follows the final event or an error
  const size_t first_new_token = output_ids_.size();
  Append(event);
  if (kind_ == ApiKind::kGenerate) {
    if (event.token_ids_size() == 0 && event.text().empty() && !event.finished()) return "";
    return SseData(GenerateObject(absl::ToDoubleSeconds(absl::Now() - start_), in_batch_));
  }
  if (kind_ == ApiKind::kResponses) return ResponsesStreamEvents(event);
  return OpenAiStreamChunks(event, first_new_token);
}

std::string ResponseShaper::OpenAiStreamChunks(const proto::DecodeEvent& event,
                                               size_t first_new_token) {
  const bool has_new_tokens = event.token_ids_size() > 0;
  // Completions echo: the first chunk carries the prompt (and its logprobs) before the text.
  const bool echo_now = echo_ && !sent_echo_;
  // Tokens that completed no character yet carry nothing to show unless logprobs were asked for.
  if (!event.finished() && event.text().empty() && !(return_logprob_ && has_new_tokens) &&
      !echo_now) {
    if (kind_ != ApiKind::kChatCompletions || sent_role_) return "";
  }
  const bool chat = kind_ == ApiKind::kChatCompletions;
  if (chat && ParsesChat()) return ParsedChatChunks(event, first_new_token);
  sent_echo_ = true;
  const std::string text = echo_now ? EchoText() + event.text() : event.text();
  if (!event.finished() && !return_logprob_) {
    // The per-token hot path: the fixed head was rendered once; only the text is escaped here.
    std::string out = absl::StrCat("data: ", stream_chunk_head_);
    if (chat) {
      absl::StrAppend(&out, "\"delta\":{", sent_role_ ? "" : "\"role\":\"assistant\",",
                      "\"content\":", Dump(event.text()), "}");
      sent_role_ = true;
    } else {
      absl::StrAppend(&out, "\"text\":", Dump(text));
    }
    absl::StrAppend(&out, ",\"logprobs\":null,\"finish_reason\":null}]",
                    include_usage_ ? ",\"usage\":null" : "", "}\n\n");
    return out;
  }
  Json choice = {{"index", index_}};
  if (chat) {
    Json delta = Json::object();
    if (!sent_role_) {
      delta["role"] = "assistant";
      sent_role_ = true;
    }
    if (!event.text().empty() || delta.contains("role")) delta["content"] = event.text();
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  Json logprobs = nullptr;
  if (return_logprob_) {
    std::vector<int32_t> ids;
    std::vector<float> lps;
    api_internal::TopLogprobList top;
    if (echo_now) InputLogprobs(&ids, &lps, &top);
    const size_t echoed = ids.size();
    ids.insert(ids.end(), output_ids_.begin() + static_cast<ptrdiff_t>(first_new_token),
               output_ids_.end());
    lps.resize(echoed, std::numeric_limits<float>::quiet_NaN());  // short worker lists: null
    lps.insert(
        lps.end(),
        logprobs_.begin() + static_cast<ptrdiff_t>(std::min(first_new_token, logprobs_.size())),
        logprobs_.end());
    top.resize(echoed);
    if (return_top_ && first_new_token < top_logprobs_.size()) {
      top.insert(top.end(), top_logprobs_.begin() + static_cast<ptrdiff_t>(first_new_token),
                 top_logprobs_.end());
    }
    const api_internal::TopLogprobList* top_or_null = return_top_ ? &top : nullptr;
    logprobs = chat ? api_internal::ChatLogprobs(tokenizer_, ids, lps, top_or_null)
                    : api_internal::CompletionLogprobs(tokenizer_, ids, lps, top_or_null,
                                                       skip_special_tokens_, &stream_offsets_);
    if (echo_now && return_top_ && echoed > 0) logprobs["top_logprobs"][0] = nullptr;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] =
      event.finished() ? api_internal::OpenAiFinishReason(final_.finish_reason()) : Json(nullptr);
  if (event.finished()) choice["matched_stop"] = api_internal::MatchedStop(final_.finish_reason());

  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  Json chunk = {{"id", response_id_},
                {"object", object},
                {"created", created_},
                {"model", model_},
                {"choices", Json::array({std::move(choice)})}};
  if (include_usage_) chunk["usage"] = nullptr;  // as OpenAI: null on every content chunk
  std::string out = SseData(Dump(chunk));
  // A batch's usage chunk comes once, after every item finished (BatchStreamUsage).
  if (event.finished() && include_usage_ && !in_batch_) {
    out += UsageChunk(OwnUsage());
  }
  return out;
}

api_internal::UsageCounts ResponseShaper::OwnUsage() const {
  api_internal::UsageCounts usage;
  usage.prompt_tokens = PromptTokens();
  usage.completion_tokens = CompletionTokens();
  usage.cached_tokens = final_.cached_tokens();
  if (kind_ == ApiKind::kChatCompletions && separate_reasoning_) {
    usage.reasoning_tokens = ReasoningTokens();
  }
  return usage;
}

std::string ResponseShaper::UsageChunk(const api_internal::UsageCounts& usage) const {
  const bool chat = kind_ == ApiKind::kChatCompletions;
  const Json usage_chunk = {
      {"id", response_id_},       {"object", chat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},      {"model", model_},
      {"choices", Json::array()}, {"usage", api_internal::Usage(usage)}};
  return SseData(Dump(usage_chunk));
}

std::string ResponseShaper::StreamDone() {
  return kind_ == ApiKind::kResponses ? "" : "data: [DONE]\n\n";
}

std::string ResponseShaper::StreamError(const absl::Status& status) {
  if (kind_ == ApiKind::kResponses) return ResponsesStreamError(status);
  finished_ = true;
  return SseData(ErrorJson(HttpStatusFor(status), std::string(status.message())));
}

void ResponseShaper::Accumulate(const proto::DecodeEvent& event) {
  if (finished_) return;
  Append(event);
}

absl::Status ResponseShaper::FinalStatus() const {
  if (!finished_) {
    return absl::InternalError("the decode stream ended without its final event");
  }
  if (final_.finish_reason().type() == proto::FinishReason::ABORT) {
    const std::string& why = final_.finish_reason().message();
    return absl::UnavailableError(
        absl::StrCat("the request was aborted", why.empty() ? "" : ": ", why));
  }
  return absl::OkStatus();
}

std::string ResponseShaper::Body(double e2e_latency_s) const {
  if (kind_ == ApiKind::kGenerate) return GenerateObject(e2e_latency_s);
  if (kind_ == ApiKind::kResponses) return ResponsesBody();
  return OpenAiBody();
}

std::string ResponseShaper::OpenAiBody() const {
  const bool chat = kind_ == ApiKind::kChatCompletions;
  const Json body = {{"id", response_id_},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", created_},
                     {"model", model_},
                     {"choices", Json::array({OpenAiChoice()})},
                     {"usage", api_internal::Usage(OwnUsage())}};
  return Dump(body);
}

void ResponseShaper::AddUsage(const ResponseShaper& item, bool counts_prompt,
                              api_internal::UsageCounts* usage) {
  const api_internal::UsageCounts own = item.OwnUsage();
  if (counts_prompt) {
    usage->prompt_tokens += own.prompt_tokens;
    usage->cached_tokens += own.cached_tokens;
  }
  usage->completion_tokens += own.completion_tokens;
  if (own.reasoning_tokens.has_value()) {
    usage->reasoning_tokens = usage->reasoning_tokens.value_or(0) + *own.reasoning_tokens;
  }
}

std::string ResponseShaper::BatchBody(const std::vector<const ResponseShaper*>& items, int n,
                                      double e2e_latency_s) {
  if (items.empty()) return "[]";
  const ResponseShaper& first = *items.front();
  if (first.kind_ == ApiKind::kGenerate) {
    std::string out = "[";
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) out += ',';
      out += items[k]->GenerateObject(e2e_latency_s);
    }
    out += ']';
    return out;
  }
  Json choices = Json::array();
  api_internal::UsageCounts usage;
  for (size_t k = 0; k < items.size(); ++k) {
    choices.push_back(items[k]->OpenAiChoice());
    AddUsage(*items[k], n <= 1 || k % static_cast<size_t>(n) == 0, &usage);
  }
  const bool chat = first.kind_ == ApiKind::kChatCompletions;
  const Json body = {
      {"id", first.response_id_},      {"object", chat ? "chat.completion" : "text_completion"},
      {"created", first.created_},     {"model", first.model_},
      {"choices", std::move(choices)}, {"usage", api_internal::Usage(usage)}};
  return Dump(body);
}

std::string ResponseShaper::BatchStreamUsage(const std::vector<const ResponseShaper*>& items,
                                             int n) {
  if (items.empty() || items.front()->kind_ == ApiKind::kGenerate ||
      !items.front()->include_usage_) {
    return "";
  }
  api_internal::UsageCounts usage;
  for (size_t k = 0; k < items.size(); ++k) {
    AddUsage(*items[k], n <= 1 || k % static_cast<size_t>(n) == 0, &usage);
  }
  return items.front()->UsageChunk(usage);
}

nlohmann::json ResponseShaper::OpenAiChoice() const {
  const bool chat = kind_ == ApiKind::kChatCompletions;
  Json choice = {{"index", index_}};
  bool has_tool_calls = false;
  if (chat) {
    choice["message"] = ChatMessage(&has_tool_calls);
  } else {
    choice["text"] = echo_ ? EchoText() + text_ : text_;
  }
  Json logprobs = nullptr;
  if (return_logprob_ && chat) {
    const api_internal::TopLogprobList* top = return_top_ ? &top_logprobs_ : nullptr;
    logprobs = api_internal::ChatLogprobs(tokenizer_, output_ids_, logprobs_, top);
  } else if (return_logprob_) {
    std::vector<int32_t> ids;
    std::vector<float> lps;
    api_internal::TopLogprobList top;
    if (echo_) InputLogprobs(&ids, &lps, &top);
    const size_t echoed = ids.size();
    ids.insert(ids.end(), output_ids_.begin(), output_ids_.end());
    lps.resize(echoed, std::numeric_limits<float>::quiet_NaN());
    lps.insert(lps.end(), logprobs_.begin(), logprobs_.end());
    top.resize(echoed);
    top.insert(top.end(), top_logprobs_.begin(), top_logprobs_.end());
    api_internal::CharCounter offsets;
    logprobs = api_internal::CompletionLogprobs(tokenizer_, ids, lps, return_top_ ? &top : nullptr,
                                                skip_special_tokens_, &offsets);
    if (echo_ && return_top_ && echoed > 0) logprobs["top_logprobs"][0] = nullptr;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = api_internal::OpenAiFinishReason(final_.finish_reason());
  if (has_tool_calls && final_.finish_reason().type() == proto::FinishReason::STOP) {
    choice["finish_reason"] = "tool_calls";
  }
  choice["matched_stop"] = api_internal::MatchedStop(final_.finish_reason());
  return choice;
}

absl::Status WithHttpStatus(absl::Status status, int http_status) {
  status.SetPayload(kHttpStatusPayload, absl::Cord(absl::StrCat(http_status)));
  return status;
}

int HttpStatusFor(const absl::Status& status) {
  if (const auto explicit_status = status.GetPayload(kHttpStatusPayload)) {
    int code = 0;
    if (absl::SimpleAtoi(std::string(*explicit_status), &code) && code >= 400 && code <= 599) {
      return code;
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kDeadlineExceeded:
      // A request that waited too long in the router's queue is the client's 408; an upstream
      // worker that did not answer in time is a gateway timeout.
      return absl::StrContains(absl::AsciiStrToLower(status.message()), "queue") ? 408 : 504;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    default:
      return 500;
  }
}

HttpResponse ErrorResponse(const absl::Status& status) {
  if (status.ok())
    return HttpResponse::Error(500, "internal error: an error response for an OK status");
  return HttpResponse::Error(HttpStatusFor(status), std::string(status.message()));
}

std::string ModelsBody(const std::string& id, int64_t created, int context_length) {
  const Json body = {
      {"object", "list"},
      {"data", Json::array({{{"id", id},
                             {"object", "model"},
                             {"created", created},
                             {"owned_by", "tandem"},
                             {"root", id},
                             {"max_model_len",
                              context_length > 0 ? Json(context_length) : Json(nullptr)}}})}};
  return Dump(body);
}

}  // namespace tandem::router
