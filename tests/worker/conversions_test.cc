// Conversions between the Worker service's messages and the engine's types: every field, every
// finish reason shape, defaults for unset fields, and bad values named in INVALID_ARGUMENT.
#include "worker/conversions.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"

namespace tandem::worker {
namespace {

constexpr int32_t kVocab = 3072;

engine::RequestSeeds& Seeds() {
  static engine::RequestSeeds seeds;
  return seeds;
}

TEST(SamplingParamsFromProtoTest, UnsetFieldsTakeSglangDefaults) {
  proto::SamplingParams p;
  auto s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->temperature, 1.0f);
  EXPECT_EQ(s->top_p, 1.0f);
  EXPECT_EQ(s->top_k, -1);
  EXPECT_EQ(s->min_p, 0.0f);
  EXPECT_EQ(s->max_new_tokens, 128);
  EXPECT_EQ(s->frequency_penalty, 0.0f);
  EXPECT_EQ(s->presence_penalty, 0.0f);
  EXPECT_TRUE(s->stop.empty());
  EXPECT_TRUE(s->stop_token_ids.empty());
  EXPECT_FALSE(s->ignore_eos);
  // proto3 bools cannot be unset: the value sent is used (the router resolves SGLang's default).
  EXPECT_FALSE(s->skip_special_tokens);
  EXPECT_FALSE(s->no_stop_trim);
}

TEST(SamplingParamsFromProtoTest, UnseededRequestsGetDifferentSeeds) {
  proto::SamplingParams p;
  auto a = SamplingParamsFromProto(p, kVocab, Seeds());
  auto b = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->seed, b->seed);
}

// --random-seed: the unseeded requests of a worker restarted with the same seed get the same
// seeds in the same order; a request's own seed is kept and draws nothing.
TEST(SamplingParamsFromProtoTest, RandomSeedMakesUnseededSeedsReproducible) {
  auto draw = [](engine::RequestSeeds& seeds) {
    proto::SamplingParams unseeded, seeded;
    seeded.set_seed(7);
    std::vector<uint64_t> out;
    for (int i = 0; i < 3; ++i) {
      out.push_back(SamplingParamsFromProto(unseeded, kVocab, seeds)->seed);
      out.push_back(SamplingParamsFromProto(seeded, kVocab, seeds)->seed);
    }
    return out;
  };
  engine::RequestSeeds first_run(42), restarted(42), other(43);
  const std::vector<uint64_t> seeds = draw(first_run);
  EXPECT_EQ(draw(restarted), seeds);
  EXPECT_NE(draw(other), seeds);
  std::mt19937_64 sequence(42);
  EXPECT_EQ(seeds, (std::vector<uint64_t>{sequence(), 7, sequence(), 7, sequence(), 7}));
}

TEST(SamplingParamsFromProtoTest, GrammarConstraintIsCarried) {
  using Kind = engine::GrammarConstraint::Kind;
  proto::SamplingParams p;
  auto s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->constraint.kind, Kind::kNone);
  p.set_json_schema(R"({"type": "integer"})");
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  EXPECT_EQ(s->constraint.kind, Kind::kJsonSchema);
  EXPECT_EQ(s->constraint.text, R"({"type": "integer"})");
  p.set_regex("[a-z]+");
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  EXPECT_EQ(s->constraint.kind, Kind::kRegex);
  EXPECT_EQ(s->constraint.text, "[a-z]+");
  p.set_ebnf("root ::= \"x\"");
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  EXPECT_EQ(s->constraint.kind, Kind::kEbnf);
  p.set_json_object(true);
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  EXPECT_EQ(s->constraint.kind, Kind::kJsonObject);
  p.mutable_structural_tag()->set_tag("{}");
  p.mutable_structural_tag()->set_form(proto::StructuralTag::ONE_OR_MORE);
  p.mutable_structural_tag()->set_allow_thinking(true);
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->constraint.kind, Kind::kStructuralTag);
  EXPECT_EQ(s->constraint.text, "{}");
  EXPECT_EQ(s->constraint.tag_form, engine::grammar::StructuralTagForm::kOneOrMore);
  EXPECT_TRUE(s->constraint.allow_thinking);
  EXPECT_FALSE(s->constraint.thinking_open);
  p.mutable_structural_tag()->set_thinking_open(true);
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->constraint.thinking_open);
  p.mutable_structural_tag()->set_allow_thinking(false);  // open only means something with it
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->constraint.thinking_open);
  p.mutable_structural_tag()->set_form(proto::StructuralTag::TRIGGERED_AT_MOST_ONE);
  s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->constraint.tag_form, engine::grammar::StructuralTagForm::kTriggeredAtMostOne);
  p.mutable_structural_tag()->set_form(static_cast<proto::StructuralTag::Form>(7));
  EXPECT_EQ(SamplingParamsFromProto(p, kVocab, Seeds()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SamplingParamsFromProtoTest, EveryFieldIsCarried) {
  proto::SamplingParams p;
  p.set_temperature(0.7f);
  p.set_top_p(0.9f);
  p.set_top_k(40);
  p.set_min_p(0.05f);
  p.set_max_new_tokens(77);
  p.add_stop("\n\n");
  p.add_stop("END");
  p.add_stop_token_ids(5);
  p.add_stop_token_ids(3071);
  p.set_ignore_eos(true);
  p.set_frequency_penalty(0.5f);
  p.set_presence_penalty(-0.25f);
  p.set_repetition_penalty(1.25f);
  p.set_min_new_tokens(3);
  (*p.mutable_logit_bias())[3071] = -100.0f;
  (*p.mutable_logit_bias())[7] = 2.5f;
  (*p.mutable_logit_bias())[0] = 1.0f;
  p.set_seed(0);  // an explicit 0 is a seed, not "unset"
  p.set_skip_special_tokens(true);
  p.set_no_stop_trim(true);
  auto s = SamplingParamsFromProto(p, kVocab, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->temperature, 0.7f);
  EXPECT_EQ(s->top_p, 0.9f);
  EXPECT_EQ(s->top_k, 40);
  EXPECT_EQ(s->min_p, 0.05f);
  EXPECT_EQ(s->max_new_tokens, 77);
  EXPECT_EQ(s->stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(s->stop_token_ids, (std::vector<int32_t>{5, 3071}));
  EXPECT_TRUE(s->ignore_eos);
  EXPECT_EQ(s->frequency_penalty, 0.5f);
  EXPECT_EQ(s->presence_penalty, -0.25f);
  EXPECT_EQ(s->repetition_penalty, 1.25f);
  EXPECT_EQ(s->min_new_tokens, 3);
  // Sorted by token id, whatever order the map gave.
  EXPECT_EQ(s->logit_bias,
            (std::vector<std::pair<int32_t, float>>{{0, 1.0f}, {7, 2.5f}, {3071, -100.0f}}));
  EXPECT_EQ(s->seed, 0u);
  EXPECT_TRUE(s->skip_special_tokens);
  EXPECT_TRUE(s->no_stop_trim);
}

TEST(SamplingParamsFromProtoTest, BadValuesAreInvalidArgumentNamingTheField) {
  struct Case {
    void (*set)(proto::SamplingParams*);
    const char* field;
  } cases[] = {
      {[](proto::SamplingParams* p) { p->set_temperature(-1); }, "sampling_params.temperature"},
      {[](proto::SamplingParams* p) { p->set_temperature(NAN); }, "sampling_params.temperature"},
      {[](proto::SamplingParams* p) { p->set_top_p(2); }, "sampling_params.top_p"},
      {[](proto::SamplingParams* p) { p->set_top_p(0); }, "sampling_params.top_p"},
      {[](proto::SamplingParams* p) { p->set_top_k(-2); }, "sampling_params.top_k"},
      {[](proto::SamplingParams* p) { p->set_min_p(1.5f); }, "sampling_params.min_p"},
      {[](proto::SamplingParams* p) { p->set_max_new_tokens(-1); },
       "sampling_params.max_new_tokens"},
      {[](proto::SamplingParams* p) { p->set_frequency_penalty(3); },
       "sampling_params.frequency_penalty"},
      {[](proto::SamplingParams* p) { p->set_presence_penalty(-3); },
       "sampling_params.presence_penalty"},
      {[](proto::SamplingParams* p) { p->add_stop(""); }, "sampling_params.stop[0]"},
      {[](proto::SamplingParams* p) { p->add_stop("\xff\xfe"); }, "sampling_params.stop[0]"},
      {[](proto::SamplingParams* p) {
         p->add_stop_token_ids(1);
         p->add_stop_token_ids(kVocab);
       },
       "sampling_params.stop_token_ids[1]"},
  };
  for (const Case& c : cases) {
    proto::SamplingParams p;
    c.set(&p);
    auto s = SamplingParamsFromProto(p, kVocab, Seeds());
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.status().message().find(c.field), std::string::npos) << s.status();
  }
}

TEST(FinishReasonToProtoTest, EveryShape) {
  proto::FinishReason length = FinishReasonToProto(engine::FinishReason::Length(12));
  EXPECT_EQ(length.type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(length.length(), 12);
  EXPECT_EQ(length.matched_case(), proto::FinishReason::MATCHED_NOT_SET);

  proto::FinishReason token = FinishReasonToProto(engine::FinishReason::StopToken(3069));
  EXPECT_EQ(token.type(), proto::FinishReason::STOP);
  EXPECT_EQ(token.matched_case(), proto::FinishReason::kMatchedToken);
  EXPECT_EQ(token.matched_token(), 3069);

  proto::FinishReason str = FinishReasonToProto(engine::FinishReason::StopString("\n\n"));
  EXPECT_EQ(str.type(), proto::FinishReason::STOP);
  EXPECT_EQ(str.matched_case(), proto::FinishReason::kMatchedStr);
  EXPECT_EQ(str.matched_str(), "\n\n");

  engine::FinishReason eos;
  eos.kind = engine::FinishReason::Kind::kStop;  // matched nothing recorded
  proto::FinishReason bare = FinishReasonToProto(eos);
  EXPECT_EQ(bare.type(), proto::FinishReason::STOP);
  EXPECT_EQ(bare.matched_case(), proto::FinishReason::MATCHED_NOT_SET);

  proto::FinishReason abort = FinishReasonToProto(engine::FinishReason::Abort("client left"));
  EXPECT_EQ(abort.type(), proto::FinishReason::ABORT);
  EXPECT_EQ(abort.message(), "client left");
}

TEST(PhaseTimingsToProtoTest, EveryPhase) {
  LegTimings t{0.5, 1.25, 0.125, 1.875, 3.5};
  proto::PhaseTimings p = PhaseTimingsToProto(t);
  EXPECT_EQ(p.queue_s(), 0.5);
  EXPECT_EQ(p.prefill_compute_s(), 1.25);
  EXPECT_EQ(p.transfer_s(), 0.125);
  EXPECT_EQ(p.first_token_s(), 1.875);
  EXPECT_EQ(p.decode_s(), 3.5);
}

engine::RequestOutput Output(std::vector<int32_t> tokens, std::vector<float> logprobs,
                             std::string text) {
  engine::RequestOutput o;
  o.rid = "r";
  o.token_ids = std::move(tokens);
  o.logprobs = std::move(logprobs);
  o.text = std::move(text);
  o.prompt_tokens = 9;
  o.cached_tokens = 4;
  return o;
}

TEST(AppendOutputTest, AccumulatesTokensTextAndEndsWithTheFinish) {
  proto::DecodeEvent event;
  engine::RequestOutput first = Output({1, 2}, {-0.5f, -0.25f}, "he");
  first.completion_tokens = 2;
  AppendOutput(first, /*return_logprob=*/true, &event);
  EXPECT_FALSE(event.finished());
  EXPECT_FALSE(event.has_finish_reason());
  engine::RequestOutput last = Output({3}, {-1.0f}, "llo");
  last.completion_tokens = 3;
  last.last = true;
  last.finish = engine::FinishReason::Length(3);
  AppendOutput(last, true, &event);
  EXPECT_EQ(std::vector<int32_t>(event.token_ids().begin(), event.token_ids().end()),
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(event.token_logprobs().begin(), event.token_logprobs().end()),
            (std::vector<float>{-0.5f, -0.25f, -1.0f}));
  EXPECT_EQ(event.text(), "hello");
  EXPECT_TRUE(event.finished());
  EXPECT_EQ(event.finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(event.finish_reason().length(), 3);
  EXPECT_EQ(event.prompt_tokens(), 9);
  EXPECT_EQ(event.completion_tokens(), 3);
  EXPECT_EQ(event.cached_tokens(), 4);
}

TEST(AppendOutputTest, LogprobsOnlyWhenAsked) {
  proto::DecodeEvent event;
  AppendOutput(Output({1}, {-0.5f}, "x"), /*return_logprob=*/false, &event);
  EXPECT_EQ(event.token_ids_size(), 1);
  EXPECT_EQ(event.token_logprobs_size(), 0);
}

TEST(AppendOutputTest, TopLogprobsOnePerToken) {
  engine::RequestOutput o = Output({4, 5}, {-0.5f, -0.75f}, "ab");
  o.top_logprobs = {{{4, -0.5f}, {9, -1.0f}}, {{2, -0.25f}, {5, -0.75f}}};
  proto::DecodeEvent event;
  AppendOutput(o, /*return_logprob=*/true, &event);
  ASSERT_EQ(event.top_logprobs_size(), 2);
  EXPECT_THAT(event.top_logprobs(0).token_ids(), ::testing::ElementsAre(4, 9));
  EXPECT_THAT(event.top_logprobs(0).logprobs(), ::testing::ElementsAre(-0.5f, -1.0f));
  EXPECT_THAT(event.top_logprobs(1).token_ids(), ::testing::ElementsAre(2, 5));
  EXPECT_THAT(event.top_logprobs(1).logprobs(), ::testing::ElementsAre(-0.25f, -0.75f));
  proto::DecodeEvent without;
  AppendOutput(o, /*return_logprob=*/false, &without);
  EXPECT_EQ(without.top_logprobs_size(), 0);
}

TEST(SamplingParamsFromProtoTest, TopLogprobsNumIsCarriedAndValidated) {
  proto::SamplingParams p;
  p.set_top_logprobs_num(7);
  auto s = SamplingParamsFromProto(p, 1000, Seeds());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->top_logprobs_num, 7);
  p.set_top_logprobs_num(21);
  EXPECT_EQ(SamplingParamsFromProto(p, 1000, Seeds()).status().message(),
            "sampling_params.top_logprobs_num must be in [0, 20], got 21");
}

TEST(AppendOutputTest, ALastOutputWithoutFinishIsAnAbortNotUnspecified) {
  proto::DecodeEvent event;
  engine::RequestOutput o = Output({}, {}, "");
  o.last = true;
  AppendOutput(o, false, &event);
  EXPECT_TRUE(event.finished());
  EXPECT_EQ(event.finish_reason().type(), proto::FinishReason::ABORT);
  EXPECT_FALSE(event.finish_reason().message().empty());
}

TEST(ToGrpcStatusTest, SameCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const absl::Status cases[] = {
      absl::InvalidArgumentError("input_ids[3] = 99999 is outside the vocabulary"),
      absl::FailedPreconditionError("no --local-prefill"),
      absl::UnavailableError("draining"),
      absl::ResourceExhaustedError("full"),
      absl::UnimplementedError("not part of this build"),
      absl::AlreadyExistsError("rid"),
  };
  for (const absl::Status& s : cases) {
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(s.code()));
    EXPECT_EQ(g.error_message(), std::string(s.message()));
  }
}

}  // namespace
}  // namespace tandem::worker
