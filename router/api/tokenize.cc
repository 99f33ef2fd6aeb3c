#include "router/api/tokenize.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/api/chat_tools.h"
#include "router/api/json_fields.h"
#include "router/api/request.h"
#include "router/api/request_common.h"

namespace tandem::router {
namespace {

using api_internal::Find;
using api_internal::Json;
using api_internal::JsonTypeName;

// The body as one object whose `model`, when given, has the form every request's must have.
absl::StatusOr<Json> ParseBody(std::string_view body, size_t max_parsed_bytes) {
  ASSIGN_OR_RETURN(Json json, api_internal::ParseJsonObject(body, max_parsed_bytes));
  RETURN_IF_ERROR(api_internal::ReadModelName(json).status());
  return json;
}

absl::StatusOr<bool> FlagOr(const Json& body, const char* key, bool fallback) {
  const Json* v = Find(body, key);
  if (v == nullptr) return fallback;
  return api_internal::ToBool(*v, key);
}

absl::Status CheckItems(const Json& list, const char* what) {
  if (list.size() > kMaxTokenizeItems) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", list.size(), " entries; at most ",
                                                   kMaxTokenizeItems, " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TokenizeBody(std::string_view body, const engine::Tokenizer& tokenizer,
                                         int max_model_len, size_t max_parsed_json_bytes) {
  ASSIGN_OR_RETURN(const Json json, ParseBody(body, max_parsed_json_bytes));
  const Json* prompt = Find(json, "prompt");
  const Json* messages = Find(json, "messages");
  if ((prompt == nullptr) == (messages == nullptr)) {
    return absl::InvalidArgumentError("give exactly one of prompt and messages");
  }
  Json answer;
  answer["max_model_len"] = max_model_len;
  if (messages != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<engine::ChatMessage> conversation,
                     api_internal::ReadConversation(messages));
    ASSIGN_OR_RETURN(const api_internal::ChatTools tools, api_internal::ReadChatTools(json));
    ASSIGN_OR_RETURN(const engine::ChatTemplateOptions options,
                     api_internal::TemplateOptions(json, tools));
    ASSIGN_OR_RETURN(const std::string text, tokenizer.ApplyChatTemplate(conversation, options),
                     "cannot apply the chat template: ");
    // The rendered template carries its special tokens, as a chat request's does.
    const std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special_tokens=*/false);
    answer["count"] = ids.size();
    answer["tokens"] = ids;
    return answer.dump();
  }
  ASSIGN_OR_RETURN(const bool add_special, FlagOr(json, "add_special_tokens", true));
  if (prompt->is_string()) {
    const std::vector<int32_t> ids = tokenizer.Encode(prompt->get<std::string>(), add_special);
    answer["count"] = ids.size();
    answer["tokens"] = ids;
    return answer.dump();
  }
  if (!prompt->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt must be a string or an array of strings, got ", JsonTypeName(*prompt)));
  }
  RETURN_IF_ERROR(CheckItems(*prompt, "prompt"));
  Json tokens = Json::array();
  Json counts = Json::array();
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    if (!item.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt[", i, "] must be a string, got ", JsonTypeName(item)));
    }
    const std::vector<int32_t> ids = tokenizer.Encode(item.get<std::string>(), add_special);
    counts.push_back(ids.size());
    tokens.push_back(ids);
  }
  answer["count"] = std::move(counts);
  answer["tokens"] = std::move(tokens);
  return answer.dump();
}

absl::StatusOr<std::string> DetokenizeBody(std::string_view body,
                                           const engine::Tokenizer& tokenizer,
                                           size_t max_parsed_json_bytes) {
  ASSIGN_OR_RETURN(const Json json, ParseBody(body, max_parsed_json_bytes));
  const Json* tokens = Find(json, "tokens");
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens is required");
  if (!tokens->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens must be an array of token ids or of id arrays, got ", JsonTypeName(*tokens)));
  }
  ASSIGN_OR_RETURN(const bool skip_special, FlagOr(json, "skip_special_tokens", true));
  const int64_t last_id = int64_t{tokenizer.vocab_size()} - 1;
  Json answer;
  // An empty list is one empty sequence (SGLang's answer to []).
  if (tokens->empty() || !(*tokens)[0].is_array()) {
    ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                     api_internal::ToIntList(*tokens, "tokens", 0, last_id));
    answer["text"] = tokenizer.Decode(ids, skip_special);
    return answer.dump();
  }
  RETURN_IF_ERROR(CheckItems(*tokens, "tokens"));
  Json texts = Json::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    ASSIGN_OR_RETURN(
        const std::vector<int32_t> ids,
        api_internal::ToIntList((*tokens)[i], absl::StrCat("tokens[", i, "]"), 0, last_id));
    texts.push_back(tokenizer.Decode(ids, skip_special));
  }
  answer["text"] = std::move(texts);
  return answer.dump();
}

}  // namespace tandem::router
