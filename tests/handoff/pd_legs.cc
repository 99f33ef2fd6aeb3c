#include "tests/handoff/pd_legs.h"

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::itest {

using std::chrono::seconds;

proto::SamplingParams GreedyParams(int max_new) {
  proto::SamplingParams p;
  p.set_temperature(0);
  p.set_max_new_tokens(max_new);
  p.set_ignore_eos(true);
  p.set_skip_special_tokens(true);
  return p;
}

proto::PrefillRequest PrefillLeg(uint64_t room, const std::vector<int32_t>& prompt,
                                 const proto::SamplingParams& sampling) {
  proto::PrefillRequest pr;
  pr.set_rid(absl::StrCat("r", room));
  pr.set_bootstrap_room(room);
  pr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *pr.mutable_sampling_params() = sampling;
  return pr;
}

proto::DecodeRequest DecodeLeg(const WorkerProcess& p, uint64_t room,
                               const std::vector<int32_t>& prompt,
                               const proto::SamplingParams& sampling) {
  proto::DecodeRequest dr;
  dr.set_rid(absl::StrCat("r", room));
  dr.set_bootstrap_room(room);
  dr.set_bootstrap_host("127.0.0.1");
  dr.set_bootstrap_port(p.bootstrap_port);
  dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *dr.mutable_sampling_params() = sampling;
  dr.set_stream(true);
  return dr;
}

DecodeResult Decode(proto::Worker::Stub* stub, const proto::DecodeRequest& request,
                    seconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  DecodeResult r;
  auto reader = stub->Decode(&ctx, request);
  proto::DecodeEvent e;
  while (reader->Read(&e)) {
    r.tokens.insert(r.tokens.end(), e.token_ids().begin(), e.token_ids().end());
    r.logprobs.insert(r.logprobs.end(), e.token_logprobs().begin(), e.token_logprobs().end());
    r.top.insert(r.top.end(), e.top_logprobs().begin(), e.top_logprobs().end());
    r.last = e;
  }
  r.status = reader->Finish();
  return r;
}

grpc::Status Prefill(proto::Worker::Stub* stub, const proto::PrefillRequest& request,
                     proto::PrefillResponse* response, seconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return stub->Prefill(&ctx, request, response);
}

DecodeResult RunPd(WorkerProcess* p, WorkerProcess* d, uint64_t room,
                   const std::vector<int32_t>& prompt, int max_new, grpc::Status* prefill_status,
                   int top_logprobs, const proto::SamplingParams* sampling) {
  proto::SamplingParams params = sampling != nullptr ? *sampling : GreedyParams(max_new);
  params.set_top_logprobs_num(top_logprobs);
  proto::PrefillRequest pr = PrefillLeg(room, prompt, params);
  pr.set_return_logprob(top_logprobs > 0);
  proto::PrefillResponse presp;
  grpc::Status pst;
  std::thread prefill([&] { pst = Prefill(p->stub.get(), pr, &presp); });
  proto::DecodeRequest dr = DecodeLeg(*p, room, prompt, params);
  dr.set_return_logprob(top_logprobs > 0);
  DecodeResult r = Decode(d->stub.get(), dr);
  prefill.join();
  if (prefill_status) *prefill_status = pst;
  if (pst.ok() && r.status.ok() && !r.tokens.empty()) {
    EXPECT_EQ(presp.first_token_id(), r.tokens[0]) << "room " << room;
  }
  return r;
}

DecodeResult RunColocated(WorkerProcess* w, const std::string& rid,
                          const std::vector<int32_t>& prompt, const proto::SamplingParams& sampling,
                          int top_logprobs) {
  proto::DecodeRequest dr;
  dr.set_rid(rid);
  dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *dr.mutable_sampling_params() = sampling;
  dr.mutable_sampling_params()->set_top_logprobs_num(top_logprobs);
  dr.set_return_logprob(top_logprobs > 0);
  dr.set_stream(true);
  return Decode(w->stub.get(), dr);
}

proto::LoadReport Load(proto::Worker::Stub* stub) {
  grpc::ClientContext ctx;
  proto::LoadReport load;
  EXPECT_TRUE(stub->GetLoad(&ctx, proto::LoadRequest(), &load).ok());
  return load;
}

void ExpectAllBlocksReturn(proto::Worker::Stub* stub, const std::string& role) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  proto::LoadReport load = Load(stub);
  proto::FlushCacheResponse flush;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->FlushCache(&ctx, proto::FlushCacheRequest(), &flush).ok()) << role;
    load = Load(stub);
    if (flush.flushed() && load.free_kv_blocks() == load.total_kv_blocks()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(flush.flushed()) << role << ": " << flush.message();
  EXPECT_GT(load.total_kv_blocks(), 0) << role;
  EXPECT_EQ(load.free_kv_blocks(), load.total_kv_blocks()) << role;
}

std::vector<std::vector<int32_t>> Prompts(int n) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int32_t> id(10, 3000);
  std::vector<int32_t> shared(90);
  for (auto& t : shared) t = id(rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    if (i % 4 == 0) p = shared;
    const int len = 1 + (41 * i) % 230;
    for (int k = 0; k < len; ++k) p.push_back(id(rng));
    prompts.push_back(std::move(p));
  }
  return prompts;
}

}  // namespace tandem::itest
