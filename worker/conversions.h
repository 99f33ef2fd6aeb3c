// Conversions between the Worker service's protobuf messages (proto/worker.proto) and the serving
// engine's types. Plain functions, thread-safe.
//
// SamplingParams: an unset optional field takes SGLang's default (temperature 1.0, top_p 1,
// top_k -1, min_p 0, max_new_tokens 128, penalties 0, no seed: the next of the worker's
// RequestSeeds, --random-seed's sequence). proto3
// cannot tell an unset bool from false, so `ignore_eos`, `skip_special_tokens` and `no_stop_trim`
// are taken as sent: the router resolves SGLang's defaults (skip_special_tokens true) from the
// client's body and always sends the resolved value. A raw gRPC client that leaves
// skip_special_tokens out gets the special tokens' text.
#ifndef TANDEM_WORKER_CONVERSIONS_H_
#define TANDEM_WORKER_CONVERSIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/finish_reason.h"
#include "engine/request_seeds.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "proto/worker.pb.h"

namespace grpc {
class Status;
}  // namespace grpc

namespace tandem::worker {

// Converts and validates against a model of `vocab_size` tokens; a request without a seed
// draws one from `seeds` (Engine::request_seeds). InvalidArgument naming the field
// ("sampling_params.top_p must be in (0, 1], got 2") on a value out of range.
absl::StatusOr<engine::SamplingParams> SamplingParamsFromProto(const proto::SamplingParams& p,
                                                               int32_t vocab_size,
                                                               engine::RequestSeeds& seeds);

proto::FinishReason FinishReasonToProto(const engine::FinishReason& reason);

// Where one leg's time went on this worker, in seconds.
struct LegTimings {
  double queue = 0;            // waiting for admission
  double prefill_compute = 0;  // prefill forward passes (0 on a decode leg fed by a transfer)
  double transfer = 0;     // prefill leg: first KV write -> completion notice; decode leg: blocks
                           // reserved -> KV and first token landed; 0 colocated
  double first_token = 0;  // leg start -> first token available here
  double decode = 0;       // first token -> last token
};
proto::PhaseTimings PhaseTimingsToProto(const LegTimings& t);

// Appends `out` (tokens, logprobs and prompt logprobs when `return_logprob`, text) to `event`; on
// out.last also sets finished, the finish reason and the counters. Appending lets a non-streaming
// leg accumulate all of a request's outputs into its one event. The caller fills event->timings.
void AppendOutput(const engine::RequestOutput& out, bool return_logprob, proto::DecodeEvent* event);

// out.input_logprob_start and the prompt logprobs of `out` (engine::RequestOutput) into `lps`.
void PromptLogprobsToProto(const engine::RequestOutput& out, proto::PromptLogprobs* lps);

// The gRPC status with the same code and message (absl and gRPC share the code numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_CONVERSIONS_H_
