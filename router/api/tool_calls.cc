#include "router/api/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "common/json_depth.h"
#include "common/ordered_json.h"
#include "nlohmann/json.hpp"
#include "router/api/json_fields.h"
#include "router/api/request_common.h"

namespace tandem::router::api_internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr size_t kCallIdHexDigits = 24;

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

std::string_view StripLeadingSpace(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  return text;
}

std::string_view StripSpace(std::string_view text) {
  text = StripLeadingSpace(text);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

// The length of the longest suffix of `text` that is a proper prefix of `tag`: text that may be
// the start of the tag and must wait for the next piece.
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k) {
    if (text.ends_with(tag.substr(0, k))) return k;
  }
  return 0;
}

// `text` without its leading whitespace when `*started` is false; sets it once text remains.
std::string_view DropLeadingSpace(std::string_view text, bool* started) {
  if (*started) return text;
  text = StripLeadingSpace(text);
  if (!text.empty()) *started = true;
  return text;
}

}  // namespace

ToolCallSplitter::ToolCallSplitter(ToolCallSyntax syntax, std::vector<std::string> tool_names)
    : syntax_(syntax), tool_names_(std::move(tool_names)) {}

void ToolCallSplitter::EmitContent(std::string_view text, SplitText* out) {
  std::string all = held_space_ + std::string(text);
  size_t end = all.size();
  while (end > 0 && IsSpace(all[end - 1])) --end;
  out->content.append(all, 0, end);
  held_space_ = all.substr(end);
}

void ToolCallSplitter::AddCall(ParsedToolCall call, SplitText* out) {
  held_space_.clear();  // whitespace before a call is not content
  any_call_ = true;
  out->calls.push_back(std::move(call));
}

bool ToolCallSplitter::ParseCall(std::string_view json, ParsedToolCall* call) const {
  // Deeper output is not parsed, so printing it back can never recurse that deep.
  if (JsonNestingDepth(json, kMaxJsonDepth) > kMaxJsonDepth) return false;
  OrderedJson parsed;
  try {
    parsed = ParseOrderedJson(StripSpace(json));
  } catch (const OrderedJson::exception&) {
    return false;  // not JSON: left as text
  }
  if (!parsed.is_object()) return false;
  const auto name = parsed.find("name");
  if (name == parsed.end() || !name->is_string()) return false;
  const std::string name_text = name->get<std::string>();
  if (std::find(tool_names_.begin(), tool_names_.end(), name_text) == tool_names_.end()) {
    return false;
  }
  auto arguments = parsed.find("arguments");
  if (arguments == parsed.end()) arguments = parsed.find("parameters");
  if (arguments != parsed.end() && !arguments->is_object()) return false;
  call->id = "call_" + NewRid().substr(0, kCallIdHexDigits);
  call->name = name_text;
  call->arguments = arguments == parsed.end() ? "{}" : arguments->dump();
  return true;
}

void ToolCallSplitter::FeedQwen(SplitText* out) {
  while (true) {
    if (!inside_call_) {
      const size_t open = buffer_.find(kCallOpen);
      if (open == std::string::npos) {
        const size_t shown = buffer_.size() - PartialTagSuffix(buffer_, kCallOpen);
        EmitContent(std::string_view(buffer_).substr(0, shown), out);
        buffer_.erase(0, shown);
        return;
      }
      EmitContent(std::string_view(buffer_).substr(0, open), out);
      buffer_.erase(0, open + kCallOpen.size());
      inside_call_ = true;
    }
    const size_t close = buffer_.find(kCallClose);
    if (close == std::string::npos) return;
    const std::string body = buffer_.substr(0, close);
    buffer_.erase(0, close + kCallClose.size());
    inside_call_ = false;
    ParsedToolCall call;
    if (ParseCall(body, &call)) {
      AddCall(std::move(call), out);
    } else {
      EmitContent(std::string(kCallOpen) + body + std::string(kCallClose), out);
    }
  }
}

SplitText ToolCallSplitter::Feed(std::string_view text) {
  SplitText out;
  if (syntax_ == ToolCallSyntax::kNone || (llama_decided_ && !llama_json_)) {
    EmitContent(text, &out);
    return out;
  }
  buffer_.append(text);
  if (syntax_ == ToolCallSyntax::kQwen) {
    FeedQwen(&out);
    return out;
  }
  if (llama_json_) return out;  // a call: parsed whole at the end
  const std::string_view rest = StripLeadingSpace(buffer_);
  if (rest.empty()) return out;
  if (rest.size() < kPythonTag.size() && kPythonTag.starts_with(rest)) return out;
  llama_decided_ = true;
  llama_json_ = rest.starts_with("{") || rest.starts_with(kPythonTag);
  if (!llama_json_) {
    EmitContent(buffer_, &out);
    buffer_.clear();
  }
  return out;
}

SplitText ToolCallSplitter::Finish() {
  SplitText out;
  if (syntax_ == ToolCallSyntax::kQwen && inside_call_) {
    EmitContent(std::string(kCallOpen) + buffer_, &out);
  } else if (syntax_ == ToolCallSyntax::kLlama3 && llama_json_) {
    std::string_view text = StripSpace(buffer_);
    if (text.starts_with(kPythonTag)) {
      text = StripLeadingSpace(text.substr(kPythonTag.size()));
    }
    // One object, or several separated by ';' (split where the text before a ';' is JSON).
    std::vector<ParsedToolCall> calls;
    bool ok = true;
    size_t start = 0;
    while (ok && start <= text.size()) {
      size_t end = start;
      ParsedToolCall call;
      bool found = false;
      while (end <= text.size()) {
        end = std::min(text.find(';', end), text.size());
        if (ParseCall(text.substr(start, end - start), &call)) {
          found = true;
          break;
        }
        if (end == text.size()) break;
        ++end;
      }
      ok = found;
      if (found) calls.push_back(std::move(call));
      start = end + 1;
    }
    if (ok && !calls.empty()) {
      for (ParsedToolCall& call : calls) AddCall(std::move(call), &out);
    } else {
      EmitContent(buffer_, &out);
    }
  } else {
    EmitContent(buffer_, &out);
  }
  buffer_.clear();
  inside_call_ = false;
  if (!any_call_) out.content += held_space_;
  held_space_.clear();
  return out;
}

SplitText ToolCallSplitter::SplitAll(ToolCallSyntax syntax, std::vector<std::string> tool_names,
                                     std::string_view text) {
  ToolCallSplitter splitter(syntax, std::move(tool_names));
  SplitText all = splitter.Feed(text);
  SplitText rest = splitter.Finish();
  all.content += rest.content;
  for (ParsedToolCall& call : rest.calls) all.calls.push_back(std::move(call));
  return all;
}

ReasoningSplitter::Split ReasoningSplitter::Feed(std::string_view text) {
  Split out;
  buffer_.append(text);
  if (state_ == State::kStart) {
    const std::string_view rest = StripLeadingSpace(buffer_);
    if (rest.empty()) return out;
    if (rest.starts_with(kThinkOpen)) {
      buffer_ = std::string(rest.substr(kThinkOpen.size()));
      state_ = State::kReasoning;
    } else if (rest.size() < kThinkOpen.size() && kThinkOpen.starts_with(rest)) {
      return out;
    } else if (open_) {
      state_ = State::kReasoning;  // the prompt opened the block
    } else {
      state_ = State::kContent;
      content_started_ = true;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = buffer_.find(kThinkClose);
    const size_t shown = close != std::string::npos
                             ? close
                             : buffer_.size() - PartialTagSuffix(buffer_, kThinkClose);
    std::string piece =
        held_space_ + std::string(DropLeadingSpace(std::string_view(buffer_).substr(0, shown),
                                                   &reasoning_started_));
    size_t end = piece.size();
    while (end > 0 && IsSpace(piece[end - 1])) --end;
    out.reasoning = piece.substr(0, end);
    held_space_ = close != std::string::npos ? "" : piece.substr(end);
    if (close == std::string::npos) {
      buffer_.erase(0, shown);
      return out;
    }
    buffer_.erase(0, close + kThinkClose.size());
    state_ = State::kContent;
  }
  out.content = std::string(DropLeadingSpace(buffer_, &content_started_));
  buffer_.clear();
  return out;
}

ReasoningSplitter::Split ReasoningSplitter::Finish() {
  Split out;
  if (state_ == State::kStart && open_) {
    out.reasoning = std::string(StripSpace(buffer_));  // the start of "<think>", or space
  } else if (state_ == State::kStart) {
    out.content = buffer_;  // only whitespace, or the start of "<think>"
  } else if (state_ == State::kReasoning) {
    // Reasoning cut off before "</think>": what was held is reasoning too.
    const std::string_view rest = DropLeadingSpace(buffer_, &reasoning_started_);
    out.reasoning = std::string(StripSpace(rest));
    if (!out.reasoning.empty()) out.reasoning = held_space_ + out.reasoning;
  }
  buffer_.clear();
  held_space_.clear();
  return out;
}

size_t ReasoningSplitter::ReasoningBytes(std::string_view text, bool open) {
  const std::string_view rest = StripLeadingSpace(text);
  size_t from = text.size() - rest.size();
  if (rest.starts_with(kThinkOpen)) {
    from += kThinkOpen.size();
  } else if (!open) {
    return 0;
  }
  const size_t close = text.find(kThinkClose, from);
  return close == std::string_view::npos ? text.size() : close + kThinkClose.size();
}

ReasoningSplitter::Split ReasoningSplitter::SplitAll(std::string_view text, bool open) {
  ReasoningSplitter splitter(open);
  Split all = splitter.Feed(text);
  Split rest = splitter.Finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  return all;
}

}  // namespace tandem::router::api_internal
