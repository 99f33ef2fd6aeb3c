#include "router/api/request_common.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_token.h"
#include "common/status.h"
#include "router/api/sampling_params.h"

namespace tandem::router::api_internal {
namespace {

// OpenAI names that map onto SamplingParams, plus SGLang's extensions of its OpenAI API.
constexpr std::array<const char*, 23> kOpenAiSamplingKeys = {"temperature",
                                                             "top_p",
                                                             "n",
                                                             "stop",
                                                             "seed",
                                                             "frequency_penalty",
                                                             "presence_penalty",
                                                             "logit_bias",
                                                             "top_k",
                                                             "min_p",
                                                             "ignore_eos",
                                                             "skip_special_tokens",
                                                             "stop_token_ids",
                                                             "no_stop_trim",
                                                             "min_tokens",
                                                             "repetition_penalty",
                                                             "regex",
                                                             "json_schema",
                                                             "ebnf",
                                                             "structural_tag",
                                                             "spaces_between_special_tokens",
                                                             "custom_params",
                                                             "sampling_seed"};

// Features SGLang's OpenAI server has and we do not: a 400 naming them when set (ignoring them
// would change the answer, or leave out fields the client asked for).
constexpr std::array<const char*, 12> kOpenAiUnsupportedKeys = {"lora_path",
                                                                "suffix",
                                                                "return_hidden_states",
                                                                "session_params",
                                                                "session_id",
                                                                "bootstrap_host",
                                                                "bootstrap_room",
                                                                "stop_regex",
                                                                "custom_logit_processor",
                                                                "return_token_ids",
                                                                "return_prompt_token_ids",
                                                                "return_meta_info"};

// A client name the router may echo (model in responses and errors, user): bounded, and free of
// control characters (it is valid UTF-8 already: the JSON parser checked).
absl::Status CheckName(const std::string& value, const std::string& what) {
  if (value.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be at most ", kMaxNameBytes,
                                                   " bytes, got ", value.size(), " bytes"));
  }
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must not contain control characters or line breaks"));
    }
  }
  return absl::OkStatus();
}

// SGLang's words for a prompt that does not fit (tokenizer_manager's input check).
absl::Status OverContext(const std::string& how_many, int64_t context_length) {
  return absl::InvalidArgumentError(absl::StrCat("The input (", how_many,
                                                 " tokens) is longer than the model's context "
                                                 "length (",
                                                 context_length, " tokens)."));
}

// Unicode normalization (NFC/NFKC composition, e.g. three Hangul jamo into one syllable) shrinks
// text by at most this factor; a token therefore covers at most max_token_bytes * this many
// bytes of the client's text.
constexpr int64_t kMaxNormalizationShrink = 3;

}  // namespace

std::string NewRid() {
  // A rid is a capability: /abort_request takes one request's rid under the client key, and
  // Responses ids (resp_ + a rid) read a stored conversation. So it comes from OpenSSL's
  // generator, which no run of observed ids predicts (an mt19937's state follows from 312 of
  // its outputs).
  std::string rid = RandomHex(16);
  if (rid.size() == 32) return rid;
  // OpenSSL's generator failed (no entropy source): the kernel's, through random_device.
  std::random_device device;
  static constexpr char kHex[] = "0123456789abcdef";
  rid.assign(32, '0');
  uint32_t bits = 0;
  for (size_t i = 0; i < rid.size(); ++i) {
    if (i % 8 == 0) bits = device();
    rid[i] = kHex[bits & 0xf];
    bits >>= 4;
  }
  return rid;
}

RoutedRequest NewRequest(ApiKind kind) {
  RoutedRequest request;
  request.kind = kind;
  request.created = absl::ToUnixSeconds(absl::Now());
  request.sampling.set_skip_special_tokens(true);  // SGLang's default
  return request;
}

absl::Status CheckReasoningEffort(const Json& effort, std::string_view field) {
  static constexpr std::string_view kEfforts[] = {"none",   "minimal", "low",
                                                  "medium", "high",    "xhigh"};
  if (effort.is_string() && std::find(std::begin(kEfforts), std::end(kEfforts),
                                      effort.get<std::string>()) != std::end(kEfforts)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(field),
      " must be one of \"none\", \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\"",
      effort.is_string() ? absl::StrCat(", got '", Excerpt(effort.get<std::string>()), "'")
                         : absl::StrCat(", got ", JsonTypeName(effort))));
}

absl::Status ReadRid(const Json& body, RoutedRequest* request) {
  const Json* rid = Find(body, "rid");
  if (rid == nullptr) {
    request->rid = NewRid();
    return absl::OkStatus();
  }
  if (rid->is_array()) {
    return absl::InvalidArgumentError(
        "rid is a list: batched requests are not supported; send one prompt per request");
  }
  ASSIGN_OR_RETURN(request->rid, ToString(*rid, "rid"));
  RETURN_IF_ERROR(CheckEchoedId(request->rid, "rid", kMaxRidBytes));
  if (request->rid.empty()) request->rid = NewRid();
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadModelName(const Json& body) {
  std::string model;
  if (const Json* value = Find(body, "model"); value != nullptr) {
    ASSIGN_OR_RETURN(model, ToString(*value, "model"));
    RETURN_IF_ERROR(CheckName(model, "model"));
  }
  return model;
}

bool ModelNameServed(std::string_view model, const ApiContext& ctx) {
  if (ctx.any_model_name || model.empty() || model == "default" || model == ctx.served_model_name) {
    return true;
  }
  while (!model.empty() && model.back() == '/') model.remove_suffix(1);
  const size_t slash = model.rfind('/');
  const std::string_view last = slash == std::string_view::npos ? model : model.substr(slash + 1);
  return !last.empty() && (last == ctx.served_model_name || last == ctx.model_dir_name);
}

absl::Status ReadModel(const Json& body, const ApiContext& ctx, RoutedRequest* request) {
  ASSIGN_OR_RETURN(std::string model, ReadModelName(body));
  if (!ModelNameServed(model, ctx)) {
    return absl::NotFoundError(absl::StrCat("the model '", model,
                                            "' does not exist; this server serves '",
                                            ctx.served_model_name, "' (see /v1/models)"));
  }
  request->model = model.empty() ? ctx.served_model_name : std::move(model);
  return absl::OkStatus();
}

absl::Status ReadOpenAiCommon(const Json& body, RoutedRequest* request) {
  if (const Json* v = Find(body, "stream"); v != nullptr) {
    ASSIGN_OR_RETURN(request->stream, ToBool(*v, "stream"));
  }
  if (const Json* options = Find(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stream_options must be an object, got ", JsonTypeName(*options)));
    }
    if (const Json* v = Find(*options, "include_usage"); v != nullptr) {
      ASSIGN_OR_RETURN(request->include_usage, ToBool(*v, "stream_options.include_usage"));
    }
  }
  for (const char* key : kOpenAiSamplingKeys) {
    const Json* value = Find(body, key);
    if (value == nullptr) continue;
    RETURN_IF_ERROR(ApplySamplingParam(key, *value, key, &request->sampling).status());
  }
  for (const char* key : kOpenAiUnsupportedKeys) {
    const Json* value = Find(body, key);
    if (value != nullptr && IsSet(*value)) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is not supported by this server"));
    }
  }
  if (const Json* v = Find(body, "user"); v != nullptr) {
    // Ignored, but a wrong type is still the client's mistake worth naming.
    ASSIGN_OR_RETURN(const std::string user, ToString(*v, "user"));
    RETURN_IF_ERROR(CheckName(user, "user"));
  }
  return ReadRid(body, request);
}

absl::Status FinishPrompt(const ApiContext& ctx, int default_max_new_tokens,
                          bool add_special_tokens, RoutedRequest* request) {
  if (!request->return_logprob) request->top_logprobs = 0;
  request->sampling.set_top_logprobs_num(request->top_logprobs);
  if (request->input_ids.empty() && !request->prompt_text.empty()) {
    if (ctx.tokenizer == nullptr) {
      return absl::FailedPreconditionError(
          "this server has no tokenizer loaded; send the prompt as token ids");
    }
    // Tokenizing costs seconds for tens of megabytes: refuse a prompt that cannot fit first. No
    // token covers more than max_token_bytes * kMaxNormalizationShrink bytes of the text, so
    // this many tokens at least.
    if (ctx.context_length > 0 && ctx.max_token_bytes > 0) {
      const int64_t at_least = static_cast<int64_t>(request->prompt_text.size()) /
                               (int64_t{ctx.max_token_bytes} * kMaxNormalizationShrink);
      if (at_least >= ctx.context_length) {
        return OverContext(absl::StrCat("at least ", at_least), ctx.context_length);
      }
    }
    request->input_ids = ctx.tokenizer->Encode(request->prompt_text, add_special_tokens);
  }
  if (request->input_ids.empty()) {
    return absl::InvalidArgumentError("the prompt is empty");
  }
  if (ctx.tokenizer != nullptr) {
    const int32_t vocab = ctx.tokenizer->vocab_size();
    for (size_t i = 0; i < request->input_ids.size(); ++i) {
      if (request->input_ids[i] >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("input_ids[", i, "] = ", request->input_ids[i],
                         " is outside the vocabulary (size ", vocab, ")"));
      }
    }
  }
  proto::SamplingParams& sampling = request->sampling;
  if (ctx.vocab_size > 0) {
    for (const auto& [id, bias] : sampling.logit_bias()) {
      if (id >= ctx.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("logit_bias: token id ", id,
                         " is outside the model's vocabulary (ids 0 to ", ctx.vocab_size - 1, ")"));
      }
    }
  }
  if (!sampling.has_max_new_tokens()) sampling.set_max_new_tokens(default_max_new_tokens);
  if (ctx.context_length > 0) {
    const int64_t prompt_tokens = static_cast<int64_t>(request->input_ids.size());
    if (prompt_tokens >= ctx.context_length) {
      return OverContext(absl::StrCat(prompt_tokens), ctx.context_length);
    }
    const int64_t room = ctx.context_length - prompt_tokens;
    if (sampling.max_new_tokens() > room) {
      sampling.set_max_new_tokens(static_cast<int32_t>(room));
    }
  }
  // Checked here, after the context clamp, so the 400 says which limit it is (the workers would
  // refuse it too, naming only max_new_tokens).
  if (sampling.min_new_tokens() > sampling.max_new_tokens()) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_new_tokens (min_tokens) is ", sampling.min_new_tokens(),
                     ", more than the request's max_new_tokens of ", sampling.max_new_tokens(),
                     " (max_tokens, or the default, cut to the context left after the prompt)"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::router::api_internal
