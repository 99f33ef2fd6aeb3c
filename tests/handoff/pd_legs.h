// The two gRPC legs of a disaggregated request, as the router sends them, for tests that drive
// real tandem-prefill / tandem-decode processes (tests/integration/worker_process.h) directly:
// building the legs, running them, and checking that a worker got every KV block back.
#ifndef TANDEM_TESTS_HANDOFF_PD_LEGS_H_
#define TANDEM_TESTS_HANDOFF_PD_LEGS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {

// Greedy, ignore_eos, max_new tokens, special tokens skipped in the text.
proto::SamplingParams GreedyParams(int max_new);

// The prefill leg of room `room` (rid "r<room>").
proto::PrefillRequest PrefillLeg(uint64_t room, const std::vector<int32_t>& prompt,
                                 const proto::SamplingParams& sampling);
// The decode leg of room `room`, streamed, bootstrapping from prefill worker `p`.
proto::DecodeRequest DecodeLeg(const WorkerProcess& p, uint64_t room,
                               const std::vector<int32_t>& prompt,
                               const proto::SamplingParams& sampling);

struct DecodeResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;          // with return_logprob
  std::vector<proto::TopLogprobs> top;  // with sampling_params.top_logprobs_num
  proto::DecodeEvent last;
};

// Runs a Decode stream to its end (or `deadline`).
DecodeResult Decode(proto::Worker::Stub* stub, const proto::DecodeRequest& request,
                    std::chrono::seconds deadline = std::chrono::seconds(120));
grpc::Status Prefill(proto::Worker::Stub* stub, const proto::PrefillRequest& request,
                     proto::PrefillResponse* response,
                     std::chrono::seconds deadline = std::chrono::seconds(120));

// One disaggregated request on prefill worker p and decode worker d: both legs at once, as the
// router sends them; checks that the prefill worker's first token is the stream's first.
// `top_logprobs` > 0: with return_logprob and that many alternatives per position. `sampling`
// null: GreedyParams(max_new).
DecodeResult RunPd(WorkerProcess* p, WorkerProcess* d, uint64_t room,
                   const std::vector<int32_t>& prompt, int max_new,
                   grpc::Status* prefill_status = nullptr, int top_logprobs = 0,
                   const proto::SamplingParams* sampling = nullptr);

// The same request on a colocated worker (tandem-decode --local-prefill).
DecodeResult RunColocated(WorkerProcess* w, const std::string& rid,
                          const std::vector<int32_t>& prompt, const proto::SamplingParams& sampling,
                          int top_logprobs = 0);

proto::LoadReport Load(proto::Worker::Stub* stub);

// Within 30 s, the worker's radix cache flushes and every KV block is free again.
void ExpectAllBlocksReturn(proto::Worker::Stub* stub, const std::string& role);
inline void ExpectAllBlocksReturn(WorkerProcess* w) {
  ExpectAllBlocksReturn(w->stub.get(), w->role);
}

// `n` prompts of token ids in [10, 3000] (the shipped model's vocabulary), seeded: every fourth
// starts with the same 90 tokens, lengths 1..230 (many longer than a 64-token chunk).
std::vector<std::vector<int32_t>> Prompts(int n);

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_HANDOFF_PD_LEGS_H_
