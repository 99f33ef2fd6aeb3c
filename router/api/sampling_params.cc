#include "router/api/sampling_params.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tandem::router::api_internal {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr double kFloatMax = std::numeric_limits<float>::max();
constexpr size_t kMaxStopStrings = 64;
constexpr size_t kMaxStopTokenIds = 1024;

absl::Status Unsupported(const std::string& path, const Json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is not supported by this server (got ",
                   Excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace)), ")"));
}

// OpenAI's logit_bias: {"<token id>": bias, ...}, ids in decimal, biases in [-100, 100]. The
// ids' upper bound is the model's vocabulary, which FinishPrompt checks (ApiContext::vocab_size).
absl::Status ReadLogitBias(const Json& value, const std::string& path, proto::SamplingParams* out) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " must be an object mapping token ids to biases, got ", JsonTypeName(value)));
  }
  if (value.size() > engine::kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", value.size(),
                                                   " entries; at most ",
                                                   engine::kMaxLogitBiasEntries, " are allowed"));
  }
  out->clear_logit_bias();
  for (const auto& [key, bias] : value.items()) {
    int32_t id = 0;
    if (key.empty() || key.size() > 10 || !absl::SimpleAtoi(key, &id) || id < 0 ||
        absl::StrCat(id) != key) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " keys must be token ids (decimal integers >= 0), got \"", Excerpt(key), "\""));
    }
    ASSIGN_OR_RETURN(const double v, ToNumber(bias, absl::StrCat(path, "[\"", key, "\"]"),
                                              -engine::kMaxLogitBias, engine::kMaxLogitBias));
    (*out->mutable_logit_bias())[id] = static_cast<float>(v);
  }
  return absl::OkStatus();
}

proto::StructuralTag StructuralTagToProto(const engine::GrammarConstraint& constraint) {
  proto::StructuralTag tag;
  tag.set_tag(constraint.text);
  switch (constraint.tag_form) {
    case engine::grammar::StructuralTagForm::kTriggered:
      tag.set_form(proto::StructuralTag::TRIGGERED);
      break;
    case engine::grammar::StructuralTagForm::kOne:
      tag.set_form(proto::StructuralTag::ONE);
      break;
    case engine::grammar::StructuralTagForm::kOneOrMore:
      tag.set_form(proto::StructuralTag::ONE_OR_MORE);
      break;
    case engine::grammar::StructuralTagForm::kTriggeredAtMostOne:
      tag.set_form(proto::StructuralTag::TRIGGERED_AT_MOST_ONE);
      break;
  }
  tag.set_allow_thinking(constraint.allow_thinking);
  tag.set_thinking_open(constraint.thinking_open);
  return tag;
}

// The "only one constraint" rule: InvalidArgument prefixed with `path` when `out` has one.
absl::Status CheckNoConstraint(const std::string& path, const proto::SamplingParams& out) {
  if (out.constraint_case() != proto::SamplingParams::CONSTRAINT_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": only one of regex, json_schema, ebnf, structural_tag, response_format and "
                     "tool_choice may constrain the output"));
  }
  return absl::OkStatus();
}

void SetConstraint(const engine::GrammarConstraint& constraint, proto::SamplingParams* out) {
  using Kind = engine::GrammarConstraint::Kind;
  switch (constraint.kind) {
    case Kind::kJsonSchema:
      out->set_json_schema(constraint.text);
      break;
    case Kind::kRegex:
      out->set_regex(constraint.text);
      break;
    case Kind::kEbnf:
      out->set_ebnf(constraint.text);
      break;
    case Kind::kJsonObject:
      out->set_json_object(true);
      break;
    case Kind::kStructuralTag:
      *out->mutable_structural_tag() = StructuralTagToProto(constraint);
      break;
    case Kind::kNone:
      break;
  }
}

}  // namespace

absl::Status SetGrammarConstraint(const engine::GrammarConstraint& constraint,
                                  const std::string& path, proto::SamplingParams* out) {
  RETURN_IF_ERROR(CheckNoConstraint(path, *out));
  absl::StatusOr<engine::grammar::GrammarPtr> compiled = engine::CompileConstraint(constraint);
  if (!compiled.ok()) {
    // The compilers name their language ("regex: ...", "ebnf: ..."); a path ending in that
    // name says it already.
    absl::string_view message = compiled.status().message();
    const absl::string_view field = absl::string_view(path).substr(path.rfind('.') + 1);
    if (message.size() > field.size() + 2 && absl::StartsWith(message, field) &&
        message.substr(field.size(), 2) == ": ") {
      message.remove_prefix(field.size() + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
  }
  SetConstraint(constraint, out);
  return absl::OkStatus();
}

absl::Status SetCompiledGrammarConstraint(const engine::GrammarConstraint& constraint,
                                          const std::string& path, proto::SamplingParams* out) {
  RETURN_IF_ERROR(CheckNoConstraint(path, *out));
  SetConstraint(constraint, out);
  return absl::OkStatus();
}

absl::StatusOr<bool> ApplySamplingParam(const std::string& key, const Json& value,
                                        const std::string& path, proto::SamplingParams* out) {
  if (key == "temperature") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, 0.0, kFloatMax));
    out->set_temperature(static_cast<float>(v));
  } else if (key == "top_p") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, 0.0, 1.0));
    if (v <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be in (0, 1], got ", value.dump()));
    }
    out->set_top_p(static_cast<float>(v));
  } else if (key == "top_k") {
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, -1, kInt32Max));
    if (v == 0) {
      // SGLang's SamplingParams.verify refuses 0: "all tokens" is spelled -1.
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be -1 (disabled) or at least 1, got 0"));
    }
    out->set_top_k(static_cast<int32_t>(v));
  } else if (key == "min_p") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, 0.0, 1.0));
    out->set_min_p(static_cast<float>(v));
  } else if (key == "max_new_tokens") {
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, 0, kInt32Max));
    out->set_max_new_tokens(static_cast<int32_t>(v));
  } else if (key == "stop") {
    ASSIGN_OR_RETURN(std::vector<std::string> stops, ToStringOrList(value, path, kMaxStopStrings));
    for (size_t i = 0; i < stops.size(); ++i) {
      if (stops[i].size() > engine::kMaxStopStringBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, value.is_array() ? absl::StrCat("[", i, "]") : "", " is ", stops[i].size(),
            " bytes; a stop string is at most ", engine::kMaxStopStringBytes, " bytes"));
      }
    }
    out->clear_stop();
    for (std::string& s : stops) out->add_stop(std::move(s));
  } else if (key == "stop_token_ids") {
    ASSIGN_OR_RETURN(const std::vector<int32_t> ids, ToIntList(value, path, 0, kInt32Max));
    if (ids.size() > kMaxStopTokenIds) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " has ", ids.size(), " entries; at most ", kMaxStopTokenIds, " are allowed"));
    }
    out->clear_stop_token_ids();
    for (const int32_t id : ids) out->add_stop_token_ids(id);
  } else if (key == "ignore_eos") {
    ASSIGN_OR_RETURN(const bool v, ToBool(value, path));
    out->set_ignore_eos(v);
  } else if (key == "frequency_penalty") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, -2.0, 2.0));
    out->set_frequency_penalty(static_cast<float>(v));
  } else if (key == "presence_penalty") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, -2.0, 2.0));
    out->set_presence_penalty(static_cast<float>(v));
  } else if (key == "repetition_penalty") {
    ASSIGN_OR_RETURN(const double v, ToNumber(value, path, 0.0, 2.0));
    if (v <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be in (0, 2] (1.0 = no penalty), got ", value.dump()));
    }
    out->set_repetition_penalty(static_cast<float>(v));
  } else if (key == "logit_bias") {
    if (!IsSet(value)) return true;  // null or {}: no bias
    RETURN_IF_ERROR(ReadLogitBias(value, path, out));
  } else if (key == "skip_special_tokens") {
    ASSIGN_OR_RETURN(const bool v, ToBool(value, path));
    out->set_skip_special_tokens(v);
  } else if (key == "spaces_between_special_tokens") {
    // Byte-level BPE decoding never inserts spaces between special tokens; true is what we do.
    ASSIGN_OR_RETURN(const bool v, ToBool(value, path));
    if (!v) return Unsupported(path, value);
  } else if (key == "no_stop_trim") {
    ASSIGN_OR_RETURN(const bool v, ToBool(value, path));
    out->set_no_stop_trim(v);
  } else if (key == "seed" || key == "sampling_seed") {
    // OpenAI's range is that of a signed 64-bit integer; a negative seed is kept as its
    // two's-complement bits, so each value still names its own sequence.
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, kInt64Min, kInt64Max));
    out->set_seed(static_cast<uint64_t>(v));
  } else if (key == "n") {
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, 1, kInt32Max));
    if (v != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be 1: one completion per request is supported, got ", v));
    }
  } else if (key == "stream_interval") {
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, 1, kInt32Max));
    out->set_stream_interval(static_cast<int32_t>(v));
  } else if (key == "min_new_tokens" || key == "min_tokens") {
    ASSIGN_OR_RETURN(const int64_t v, ToInt(value, path, 0, kInt32Max));
    out->set_min_new_tokens(static_cast<int32_t>(v));
  } else if (key == "regex" || key == "ebnf" || key == "json_schema") {
    if (!IsSet(value)) return true;  // null or "": unconstrained
    using Kind = engine::GrammarConstraint::Kind;
    engine::GrammarConstraint constraint;
    constraint.kind = key == "regex"  ? Kind::kRegex
                      : key == "ebnf" ? Kind::kEbnf
                                      : Kind::kJsonSchema;
    if (key == "json_schema" && (value.is_object() || value.is_boolean())) {
      constraint.text = value.dump();
    } else {
      ASSIGN_OR_RETURN(constraint.text, ToString(value, path));
    }
    RETURN_IF_ERROR(SetGrammarConstraint(constraint, path, out));
  } else if (key == "structural_tag") {
    if (!IsSet(value)) return true;  // null or "": unconstrained
    // SGLang takes the tag's JSON text; the object itself is accepted too.
    engine::GrammarConstraint constraint;
    constraint.kind = engine::GrammarConstraint::Kind::kStructuralTag;
    if (value.is_object()) {
      constraint.text = value.dump();
    } else {
      ASSIGN_OR_RETURN(constraint.text, ToString(value, path));
    }
    RETURN_IF_ERROR(SetGrammarConstraint(constraint, path, out));
  } else if (key == "custom_params") {
    if (IsSet(value)) return Unsupported(path, value);
  } else {
    return false;
  }
  return true;
}

absl::Status ApplySamplingObject(const Json& object, proto::SamplingParams* out) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_params must be an object, got ", JsonTypeName(object)));
  }
  for (const auto& [key, value] : object.items()) {
    if (value.is_null()) continue;
    const std::string path = JoinPath("sampling_params", key);
    // min_tokens is the OpenAI spelling; /generate takes SGLang's names only.
    ASSIGN_OR_RETURN(const bool known, key == "min_tokens"
                                           ? absl::StatusOr<bool>(false)
                                           : ApplySamplingParam(key, value, path, out));
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a known sampling parameter"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::router::api_internal
