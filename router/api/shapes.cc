#include "router/api/shapes.h"

#include "absl/strings/str_cat.h"

namespace tandem::router::api_internal {
namespace {

// A logprob as JSON; a missing one (fewer logprobs than ids from a worker) is null.
Json LogprobAt(const std::vector<float>& logprobs, size_t i) {
  if (i >= logprobs.size()) return nullptr;
  return logprobs[i];
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
  return {{"prompt_tokens", counts.prompt_tokens},
          {"completion_tokens", counts.completion_tokens},
          {"total_tokens", counts.prompt_tokens + counts.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", counts.cached_tokens}}}};
}

std::string TokenText(const engine::Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return absl::StrCat("token_id:", id);
  return tokenizer->Decode({id});
}

Json CompletionLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                        const std::vector<float>& logprobs, const TopLogprobList* top,
                        int64_t text_offset_base) {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = top != nullptr ? Json::array() : Json(nullptr);
  Json text_offset = Json::array();
  int64_t offset = text_offset_base;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string text = TokenText(tokenizer, ids[i]);
    text_offset.push_back(offset);
    offset += static_cast<int64_t>(text.size());
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

Json SglangTokenLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& logprobs) {
  Json out = Json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    out.push_back(Json::array({LogprobAt(logprobs, i), ids[i], nullptr}));
  }
  return out;
}

Json SglangTopLogprobs(const TopLogprobList& top) {
  Json out = Json::array();
  for (const proto::TopLogprobs& position : top) {
    Json alternatives = Json::array();
    for (int j = 0; j < position.token_ids_size(); ++j) {
      alternatives.push_back(
          Json::array({AlternativeLogprob(position, j), position.token_ids(j), nullptr}));
    }
    out.push_back(std::move(alternatives));
  }
  return out;
}

}  // namespace tandem::router::api_internal
