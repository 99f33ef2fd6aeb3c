#include "worker/conversions.h"

#include <string>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"

namespace tandem::worker {
namespace {

absl::StatusOr<engine::GrammarConstraint> StructuralTagFromProto(const proto::StructuralTag& tag) {
  using Form = engine::grammar::StructuralTagForm;
  engine::GrammarConstraint constraint{engine::GrammarConstraint::Kind::kStructuralTag, tag.tag()};
  switch (tag.form()) {
    case proto::StructuralTag::TRIGGERED:
      constraint.tag_form = Form::kTriggered;
      break;
    case proto::StructuralTag::ONE:
      constraint.tag_form = Form::kOne;
      break;
    case proto::StructuralTag::ONE_OR_MORE:
      constraint.tag_form = Form::kOneOrMore;
      break;
    case proto::StructuralTag::TRIGGERED_AT_MOST_ONE:
      constraint.tag_form = Form::kTriggeredAtMostOne;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("sampling_params.structural_tag.form ", tag.form(), " is not known"));
  }
  constraint.allow_thinking = tag.allow_thinking();
  constraint.thinking_open = tag.allow_thinking() && tag.thinking_open();
  return constraint;
}

}  // namespace

absl::StatusOr<engine::SamplingParams> SamplingParamsFromProto(const proto::SamplingParams& p,
                                                               int32_t vocab_size,
                                                               engine::RequestSeeds& seeds) {
  engine::SamplingParams s;  // SGLang's defaults
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_max_new_tokens()) s.max_new_tokens = p.max_new_tokens();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  s.min_new_tokens = p.min_new_tokens();
  // A map has no order on the wire: sorted, so every worker applies the same list.
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());
  // A request without a seed still samples reproducibly within itself; its seed is drawn here.
  s.seed = p.has_seed() ? p.seed() : seeds.Next();
  s.stop.assign(p.stop().begin(), p.stop().end());
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.skip_special_tokens = p.skip_special_tokens();
  s.no_stop_trim = p.no_stop_trim();
  s.top_logprobs_num = p.top_logprobs_num();
  switch (p.constraint_case()) {
    case proto::SamplingParams::kJsonSchema:
      s.constraint = {engine::GrammarConstraint::Kind::kJsonSchema, p.json_schema()};
      break;
    case proto::SamplingParams::kRegex:
      s.constraint = {engine::GrammarConstraint::Kind::kRegex, p.regex()};
      break;
    case proto::SamplingParams::kEbnf:
      s.constraint = {engine::GrammarConstraint::Kind::kEbnf, p.ebnf()};
      break;
    case proto::SamplingParams::kJsonObject:
      if (p.json_object()) s.constraint = {engine::GrammarConstraint::Kind::kJsonObject, ""};
      break;
    case proto::SamplingParams::kStructuralTag: {
      absl::StatusOr<engine::GrammarConstraint> constraint =
          StructuralTagFromProto(p.structural_tag());
      if (!constraint.ok()) return constraint.status();
      s.constraint = *std::move(constraint);
      break;
    }
    case proto::SamplingParams::CONSTRAINT_NOT_SET:
      break;
  }
  if (absl::Status st = engine::ValidateSamplingParams(s, vocab_size); !st.ok()) return st;
  return s;
}

proto::FinishReason FinishReasonToProto(const engine::FinishReason& reason) {
  proto::FinishReason out;
  switch (reason.kind) {
    case engine::FinishReason::Kind::kLength:
      out.set_type(proto::FinishReason::LENGTH);
      out.set_length(static_cast<int32_t>(reason.length));
      break;
    case engine::FinishReason::Kind::kStop:
      out.set_type(proto::FinishReason::STOP);
      std::visit(
          [&out](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, int32_t>) {
              out.set_matched_token(m);
            } else if constexpr (std::is_same_v<T, std::string>) {
              out.set_matched_str(m);
            }
          },
          reason.matched);
      break;
    case engine::FinishReason::Kind::kAbort:
      out.set_type(proto::FinishReason::ABORT);
      out.set_message(reason.message);
      break;
  }
  return out;
}

proto::PhaseTimings PhaseTimingsToProto(const LegTimings& t) {
  proto::PhaseTimings out;
  out.set_queue_s(t.queue);
  out.set_prefill_compute_s(t.prefill_compute);
  out.set_transfer_s(t.transfer);
  out.set_first_token_s(t.first_token);
  out.set_decode_s(t.decode);
  return out;
}

void PromptLogprobsToProto(const engine::RequestOutput& out, proto::PromptLogprobs* lps) {
  lps->set_start(static_cast<int32_t>(out.input_logprob_start));
  lps->mutable_logprobs()->Add(out.input_logprobs.begin(), out.input_logprobs.end());
  for (const std::vector<engine::TokenLogprob>& position : out.input_top_logprobs) {
    proto::TopLogprobs* top = lps->add_top_logprobs();
    for (const engine::TokenLogprob& t : position) {
      top->add_token_ids(t.token);
      top->add_logprobs(t.logprob);
    }
  }
}

void AppendOutput(const engine::RequestOutput& out, bool return_logprob,
                  proto::DecodeEvent* event) {
  event->mutable_token_ids()->Add(out.token_ids.begin(), out.token_ids.end());
  if (return_logprob) {
    event->mutable_token_logprobs()->Add(out.logprobs.begin(), out.logprobs.end());
    for (const std::vector<engine::TokenLogprob>& position : out.top_logprobs) {
      proto::TopLogprobs* top = event->add_top_logprobs();
      for (const engine::TokenLogprob& t : position) {
        top->add_token_ids(t.token);
        top->add_logprobs(t.logprob);
      }
    }
  }
  if (return_logprob && out.input_logprob_start >= 0) {
    PromptLogprobsToProto(out, event->mutable_prompt_logprobs());
  }
  event->mutable_text()->append(out.text);
  event->set_prompt_tokens(static_cast<int32_t>(out.prompt_tokens));
  event->set_completion_tokens(static_cast<int32_t>(out.completion_tokens));
  event->set_cached_tokens(static_cast<int32_t>(out.cached_tokens));
  if (out.last) {
    event->set_finished(true);
    // A last output always carries a finish reason except a prefill-only request's, which a
    // decode stream never sees; say so rather than send an unspecified type.
    *event->mutable_finish_reason() = FinishReasonToProto(
        out.finish ? *out.finish
                   : engine::FinishReason::Abort("the request ended without a finish reason"));
  }
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace tandem::worker
