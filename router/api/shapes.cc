#include "router/api/shapes.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::router::api_internal {
namespace {

// A logprob as JSON; a missing one (fewer logprobs than ids from a worker) or NaN is null.
Json LogprobAt(const std::vector<float>& logprobs, size_t i) {
  if (i >= logprobs.size() || std::isnan(logprobs[i])) return nullptr;
  return logprobs[i];
}

// Length of the well-formed UTF-8 character at s[i], 0 when the bytes there are not one.
size_t CharLength(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return n;
}

// A token's raw bytes as OpenAI's "bytes" array (empty without a tokenizer).
Json TokenBytes(const engine::Tokenizer* tokenizer, int32_t id) {
  Json bytes = Json::array();
  const std::string raw =
      tokenizer != nullptr ? tokenizer->TokenBytes(id, /*skip_special_tokens=*/false) : "";
  for (const char c : raw) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

// Position i's alternatives; none when the worker sent fewer positions than ids.
const proto::TopLogprobs& TopAt(const TopLogprobList& top, size_t i) {
  static const proto::TopLogprobs* const kNone = new proto::TopLogprobs();
  return i < top.size() ? top[i] : *kNone;
}

// Alternative j of `position`: a logprob missing from a short worker message is null.
Json AlternativeLogprob(const proto::TopLogprobs& position, int j) {
  if (j >= position.logprobs_size()) return nullptr;
  return position.logprobs(j);
}

}  // namespace

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json SglangFinishReason(const proto::FinishReason& reason) {
  switch (reason.type()) {
    case proto::FinishReason::LENGTH:
      return {{"type", "length"}, {"length", reason.length()}};
    case proto::FinishReason::STOP:
      return {{"type", "stop"}, {"matched", MatchedStop(reason)}};
    case proto::FinishReason::ABORT:
      return {{"type", "abort"}, {"message", reason.message()}};
    default:
      return nullptr;
  }
}

Json OpenAiFinishReason(const proto::FinishReason& reason) {
  switch (reason.type()) {
    case proto::FinishReason::LENGTH:
      return "length";
    case proto::FinishReason::STOP:
      return "stop";
    case proto::FinishReason::ABORT:
      return "abort";
    default:
      return nullptr;
  }
}

Json MatchedStop(const proto::FinishReason& reason) {
  if (reason.type() != proto::FinishReason::STOP) return nullptr;
  switch (reason.matched_case()) {
    case proto::FinishReason::kMatchedToken:
      return reason.matched_token();
    case proto::FinishReason::kMatchedStr:
      return reason.matched_str();
    default:
      return nullptr;
  }
}

Json Usage(const UsageCounts& counts) {
  Json usage = {{"prompt_tokens", counts.prompt_tokens},
                {"completion_tokens", counts.completion_tokens},
                {"total_tokens", counts.prompt_tokens + counts.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", counts.cached_tokens}}}};
  if (counts.reasoning_tokens.has_value()) {
    usage["completion_tokens_details"] = {{"reasoning_tokens", *counts.reasoning_tokens}};
  }
  return usage;
}

std::string TokenText(const engine::Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return absl::StrCat("token_id:", id);
  const std::string raw = tokenizer->TokenBytes(id, /*skip_special_tokens=*/false);
  std::string text;
  text.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const size_t n = CharLength(raw, i);
    if (n > 0) {
      text.append(raw, i, n);
      i += n;
    } else {
      absl::StrAppendFormat(&text, "\\x%02x", static_cast<unsigned char>(raw[i]));
      ++i;
    }
  }
  return text;
}

void CharCounter::Add(std::string_view bytes) {
  for (const char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (pending_ > 0 && c >= 0x80 && c <= 0xBF) {
      if (--pending_ == 0) ++chars_;
      continue;
    }
    if (pending_ > 0) ++chars_;  // a cut-off character: one U+FFFD
    pending_ = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      pending_ = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      pending_ = 2;
    } else if (c >= 0xF0 && c <= 0xF4) {
      pending_ = 3;
    } else {
      ++chars_;  // ASCII, or a stray byte shown as U+FFFD
    }
  }
}

Json CompletionLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                        const std::vector<float>& logprobs, const TopLogprobList* top,
                        bool skip_special_tokens, CharCounter* offsets) {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = top != nullptr ? Json::array() : Json(nullptr);
  Json text_offset = Json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string text = TokenText(tokenizer, ids[i]);
    text_offset.push_back(offsets->chars());
    offsets->Add(tokenizer != nullptr ? tokenizer->TokenBytes(ids[i], skip_special_tokens) : text);
    if (top != nullptr) {
      Json alternatives = Json::object();
      const proto::TopLogprobs& position = TopAt(*top, i);
      for (int j = 0; j < position.token_ids_size(); ++j) {
        alternatives.emplace(TokenText(tokenizer, position.token_ids(j)),
                             AlternativeLogprob(position, j));
      }
      alternatives.emplace(text, LogprobAt(logprobs, i));  // kept if already there
      top_logprobs.push_back(std::move(alternatives));
    }
    tokens.push_back(std::move(text));
    token_logprobs.push_back(LogprobAt(logprobs, i));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

Json ChatLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                  const std::vector<float>& logprobs, const TopLogprobList* top) {
  Json content = Json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    Json alternatives = Json::array();
    if (top != nullptr) {
      const proto::TopLogprobs& position = TopAt(*top, i);
      for (int j = 0; j < position.token_ids_size(); ++j) {
        const int32_t id = position.token_ids(j);
        alternatives.push_back({{"token", TokenText(tokenizer, id)},
                                {"logprob", AlternativeLogprob(position, j)},
                                {"bytes", TokenBytes(tokenizer, id)}});
      }
    }
    content.push_back({{"token", TokenText(tokenizer, ids[i])},
                       {"logprob", LogprobAt(logprobs, i)},
                       {"bytes", TokenBytes(tokenizer, ids[i])},
                       {"top_logprobs", std::move(alternatives)}});
  }
  return {{"content", std::move(content)}};
}

Json SglangTokenLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& logprobs,
                         const engine::Tokenizer* tokenizer) {
  Json out = Json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    out.push_back(
        Json::array({LogprobAt(logprobs, i), ids[i],
                     tokenizer != nullptr ? Json(TokenText(tokenizer, ids[i])) : Json(nullptr)}));
  }
  return out;
}

Json SglangTopLogprobs(const TopLogprobList& top, const engine::Tokenizer* tokenizer,
                       size_t null_positions) {
  Json out = Json::array();
  for (size_t i = 0; i < null_positions; ++i) out.push_back(nullptr);
  for (const proto::TopLogprobs& position : top) {
    Json alternatives = Json::array();
    for (int j = 0; j < position.token_ids_size(); ++j) {
      const int32_t id = position.token_ids(j);
      alternatives.push_back(
          Json::array({AlternativeLogprob(position, j), id,
                       tokenizer != nullptr ? Json(TokenText(tokenizer, id)) : Json(nullptr)}));
    }
    out.push_back(std::move(alternatives));
  }
  return out;
}

}  // namespace tandem::router::api_internal
