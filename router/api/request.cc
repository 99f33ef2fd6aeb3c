#include "router/api/request.h"

#include <array>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/sampler.h"
#include "router/api/json_fields.h"
#include "router/api/request_common.h"
#include "router/api/sampling_params.h"

namespace tandem::router {
namespace {

using api_internal::Find;
using api_internal::Json;
using api_internal::JsonTypeName;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int kOpenAiDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions
constexpr const char* kBatched = "batched requests are not supported; send one prompt per request";

// /generate fields of SGLang's GenerateReqInput that ask for something we do not serve.
constexpr std::array<const char*, 15> kGenerateUnsupportedKeys = {"input_embeds",
                                                                  "image_data",
                                                                  "audio_data",
                                                                  "video_data",
                                                                  "lora_path",
                                                                  "lora_id",
                                                                  "session_params",
                                                                  "custom_logit_processor",
                                                                  "return_hidden_states",
                                                                  "token_ids_logprob",
                                                                  "bootstrap_host",
                                                                  "bootstrap_port",
                                                                  "bootstrap_room",
                                                                  "data_parallel_rank",
                                                                  "modalities"};

// `value` as one prompt's ids: an array of integers. An array of arrays is a batch.
absl::StatusOr<std::vector<int32_t>> ReadIds(const Json& value, const std::string& path) {
  if (value.is_array() && !value.empty() && value[0].is_array()) {
    if (value.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " holds ", value.size(), " prompts: ", kBatched));
    }
    return api_internal::ToIntList(value[0], path + "[0]", 0, kInt32Max);
  }
  return api_internal::ToIntList(value, path, 0, kInt32Max);
}

absl::Status ReadGeneratePrompt(const Json& body, RoutedRequest* request) {
  const Json* text = Find(body, "text");
  const Json* ids = Find(body, "input_ids");
  if (text != nullptr && ids != nullptr) {
    return absl::InvalidArgumentError("give either text or input_ids, not both");
  }
  if (text == nullptr && ids == nullptr) {
    return absl::InvalidArgumentError("one of text or input_ids is required");
  }
  if (text != nullptr) {
    if (text->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("text is a list: ", kBatched));
    }
    ASSIGN_OR_RETURN(request->prompt_text, api_internal::ToString(*text, "text"));
    if (request->prompt_text.empty()) return absl::InvalidArgumentError("text is empty");
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(request->input_ids, ReadIds(*ids, "input_ids"));
  if (request->input_ids.empty()) return absl::InvalidArgumentError("input_ids is empty");
  return absl::OkStatus();
}

// OpenAI's prompt: a string, an array of ids, or a one-element array of either.
absl::Status ReadCompletionsPrompt(const Json& body, RoutedRequest* request) {
  const Json* prompt = Find(body, "prompt");
  if (prompt == nullptr) return absl::InvalidArgumentError("prompt is required");
  if (prompt->is_string()) {
    request->prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    if (prompt->empty()) return absl::InvalidArgumentError("prompt is an empty array");
    const Json& first = (*prompt)[0];
    if (first.is_string() || first.is_array()) {
      if (prompt->size() > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt holds ", prompt->size(), " prompts: ", kBatched));
      }
      if (first.is_string()) {
        request->prompt_text = first.get<std::string>();
      } else {
        ASSIGN_OR_RETURN(request->input_ids,
                         api_internal::ToIntList(first, "prompt[0]", 0, kInt32Max));
      }
    } else {
      ASSIGN_OR_RETURN(request->input_ids,
                       api_internal::ToIntList(*prompt, "prompt", 0, kInt32Max));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt must be a string or an array of token ids, got ", JsonTypeName(*prompt)));
  }
  if (request->prompt_text.empty() && request->input_ids.empty()) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  return absl::OkStatus();
}

absl::StatusOr<RoutedRequest> ParseGenerateJson(const Json& body, const ApiContext& ctx) {
  RoutedRequest request = api_internal::NewRequest(ApiKind::kGenerate);
  RETURN_IF_ERROR(ReadGeneratePrompt(body, &request));
  for (const char* key : kGenerateUnsupportedKeys) {
    const Json* value = Find(body, key);
    if (value != nullptr && api_internal::IsSet(*value)) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is not supported by this server"));
    }
  }
  if (const Json* params = Find(body, "sampling_params"); params != nullptr) {
    if (params->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("sampling_params is a list: ", kBatched));
    }
    RETURN_IF_ERROR(api_internal::ApplySamplingObject(*params, &request.sampling));
  }
  if (const Json* v = Find(body, "stream"); v != nullptr) {
    ASSIGN_OR_RETURN(request.stream, api_internal::ToBool(*v, "stream"));
  }
  if (const Json* v = Find(body, "return_logprob"); v != nullptr) {
    if (v->is_array())
      return absl::InvalidArgumentError(absl::StrCat("return_logprob is a list: ", kBatched));
    ASSIGN_OR_RETURN(request.return_logprob, api_internal::ToBool(*v, "return_logprob"));
  }
  if (const Json* v = Find(body, "top_logprobs_num"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n,
                     api_internal::ToInt(*v, "top_logprobs_num", 0, engine::kMaxTopLogprobs));
    request.top_logprobs = static_cast<int>(n);  // counts only with return_logprob (FinishPrompt)
  }
  if (const Json* v = Find(body, "logprob_start_len"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t start,
                     api_internal::ToInt(*v, "logprob_start_len", -1, kInt32Max));
    request.logprob_start_len = static_cast<int32_t>(start);
  }
  if (const Json* v = Find(body, "return_text_in_logprobs"); v != nullptr) {
    ASSIGN_OR_RETURN(request.return_text_in_logprobs,
                     api_internal::ToBool(*v, "return_text_in_logprobs"));
  }
  RETURN_IF_ERROR(api_internal::ReadRid(body, &request));
  RETURN_IF_ERROR(api_internal::FinishPrompt(ctx, ctx.default_max_new_tokens,
                                             /*add_special_tokens=*/true, &request));
  // As SGLang: a start past the prompt is the client's mistake, not an empty list.
  if (request.return_logprob &&
      request.logprob_start_len >= static_cast<int64_t>(request.input_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logprob_start_len (", request.logprob_start_len,
        ") must be less than the number of input tokens (", request.input_ids.size(), ")"));
  }
  return request;
}

absl::StatusOr<RoutedRequest> ParseCompletionsJson(const Json& body, const ApiContext& ctx) {
  RoutedRequest request = api_internal::NewRequest(ApiKind::kCompletions);
  RETURN_IF_ERROR(api_internal::ReadModel(body, ctx, &request));
  RETURN_IF_ERROR(ReadCompletionsPrompt(body, &request));
  // max_completion_tokens is chat's name; clients that send it everywhere get its meaning here
  // too rather than the default of 16 (it wins over max_tokens, as in chat).
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const Json* v = Find(body, key); v != nullptr) {
      ASSIGN_OR_RETURN(const int64_t n, api_internal::ToInt(*v, key, 0, kInt32Max));
      request.sampling.set_max_new_tokens(static_cast<int32_t>(n));
    }
  }
  if (const Json* v = Find(body, "logprobs"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n, api_internal::ToInt(*v, "logprobs", 0, 5));
    request.return_logprob = true;
    request.top_logprobs = static_cast<int>(n);
  }
  if (const Json* v = Find(body, "echo"); v != nullptr) {
    ASSIGN_OR_RETURN(request.echo, api_internal::ToBool(*v, "echo"));
  }
  // echo with logprobs: the prompt's tokens are scored too, the first one null (as OpenAI).
  if (request.echo && request.return_logprob) request.logprob_start_len = 0;
  if (const Json* v = Find(body, "best_of"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n, api_internal::ToInt(*v, "best_of", 1, kInt32Max));
    if (n != 1) return absl::InvalidArgumentError("best_of must be 1");
  }
  RETURN_IF_ERROR(api_internal::ReadOpenAiCommon(body, &request));
  if (const Json* v = Find(body, "response_format"); v != nullptr) {
    RETURN_IF_ERROR(api_internal::ReadResponseFormat(*v, &request.sampling));
  }
  RETURN_IF_ERROR(api_internal::FinishPrompt(ctx, kOpenAiDefaultMaxTokens,
                                             /*add_special_tokens=*/true, &request));
  return request;
}

}  // namespace

namespace api_internal {

absl::StatusOr<RoutedRequest> ParseRequestJson(ApiKind kind, const Json& json,
                                               const ApiContext& ctx) {
  // Every access above is checked, but a parser bug must still not escape as an exception.
  try {
    switch (kind) {
      case ApiKind::kGenerate:
        return ParseGenerateJson(json, ctx);
      case ApiKind::kCompletions:
        return ParseCompletionsJson(json, ctx);
      case ApiKind::kChatCompletions:
        return ParseChatCompletionsJson(json, ctx);
      case ApiKind::kResponses:
        return ParseResponsesJson(json, ctx);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.what()));
  }
  return absl::InvalidArgumentError("unknown API kind");
}

}  // namespace api_internal

absl::StatusOr<RoutedRequest> ParseRequest(ApiKind kind, std::string_view body,
                                           const ApiContext& ctx) {
  ASSIGN_OR_RETURN(const Json json, api_internal::ParseJsonObject(body, ctx.max_parsed_json_bytes));
  return api_internal::ParseRequestJson(kind, json, ctx);
}

absl::StatusOr<RoutedRequest> ParseGenerate(std::string_view body, const ApiContext& ctx) {
  return ParseRequest(ApiKind::kGenerate, body, ctx);
}

absl::StatusOr<RoutedRequest> ParseCompletions(std::string_view body, const ApiContext& ctx) {
  return ParseRequest(ApiKind::kCompletions, body, ctx);
}

absl::StatusOr<RoutedRequest> ParseChatCompletions(std::string_view body, const ApiContext& ctx) {
  return ParseRequest(ApiKind::kChatCompletions, body, ctx);
}

}  // namespace tandem::router
