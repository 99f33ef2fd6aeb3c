// Disaggregated serving with real processes on loopback: 1 + 1 and 2 + 2 tandem-prefill /
// tandem-decode workers, with a colocated tandem-decode --local-prefill and tandem-run as the
// references. 64 concurrent requests through the two gRPC legs give their tokens exactly; failures
// (a room nobody prefills, a prefill nobody registers, another model, a peer without the secret, a
// prefill worker killed mid-flight) end with a clear error within the timeouts, and every surviving
// worker returns to free blocks == total. A parallel-sampling sibling shares its leader's
// transferred prompt on the decode worker (one prefill leg for both).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/worker.grpc.pb.h"
#include "router/workers/cluster_credentials.h"
#include "tests/handoff/pd_legs.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

using Worker = WorkerProcess;

std::unique_ptr<Worker> Start(const std::string& role, const std::vector<std::string>& extra = {}) {
  return StartWorker(role, extra);
}

constexpr int kMaxNew = 12;
int MaxNew(size_t i) { return 4 + static_cast<int>(i % 9); }

// tandem-run's greedy tokens for every prompt (given as token ids), kMaxNew each.
std::vector<std::vector<int32_t>> TandemRunTokens(
    const std::vector<std::vector<int32_t>>& prompts) {
  const std::string path = ::testing::TempDir() + "/pd_cluster_prompts.txt";
  {
    std::ofstream out(path);
    for (const auto& p : prompts) {
      for (int32_t t : p) out << t << ' ';
      out << '\n';
    }
  }
  RunResult r = RunToExit(
      {BinaryPath("tandem-run"), "--model-path", SourcePath("models/tandem-tiny-english"),
       "--batch-file", path, "--input-ids", "--jsonl", "--temperature", "0", "--ignore-eos",
       "--max-new-tokens", std::to_string(kMaxNew), "--threads", "1", "--prefill-chunk", "64"},
      std::chrono::seconds(300));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::vector<int32_t>> tokens(prompts.size());
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;  // the stats line on stderr
    auto j = nlohmann::json::parse(line);
    tokens.at(j.at("index").get<size_t>()) = j.at("output_ids").get<std::vector<int32_t>>();
  }
  return tokens;
}

// 64 concurrent requests through both legs on P prefill + P decode workers (pairs crossing when
// P = 2) give exactly the tokens of a colocated worker and of tandem-run.
class PdClusterPairsTest : public ::testing::TestWithParam<int> {};

TEST_P(PdClusterPairsTest, SixtyFourConcurrentRequestsMatchColocatedAndTandemRun) {
  const int pairs = GetParam();
  auto colocated = Start("colocated");
  std::vector<std::unique_ptr<Worker>> prefill, decode;
  // 64 requests on one pair queue for a while on a loaded machine: timeouts for that, not for
  // the failure tests'.
  const std::vector<std::string> patient = {"--bootstrap-timeout", "60", "--transfer-timeout",
                                            "60"};
  for (int i = 0; i < pairs; ++i) prefill.push_back(Start("prefill", patient));
  for (int i = 0; i < pairs; ++i) decode.push_back(Start("decode", patient));
  const auto prompts = Prompts(64);
  std::vector<DecodeResult> pd(prompts.size()), ref(prompts.size());
  std::vector<grpc::Status> pst(prompts.size());
  std::vector<std::vector<int32_t>> offline;
  std::thread tandem_run([&] { offline = TandemRunTokens(prompts); });
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      // With two pairs they cross: prefill i % 2 with decode (i / 2) % 2, so each decode worker
      // hears both prefill workers.
      pd[i] = RunPd(prefill[i % pairs].get(), decode[(i / 2) % pairs].get(), 7000 + i, prompts[i],
                    MaxNew(i), &pst[i]);
      proto::DecodeRequest dr;
      dr.set_rid(absl::StrCat("c", i));
      dr.mutable_input_ids()->Add(prompts[i].begin(), prompts[i].end());
      *dr.mutable_sampling_params() = GreedyParams(MaxNew(i));
      dr.set_stream(i % 2 == 0);
      ref[i] = Decode(colocated->stub.get(), dr);
    });
  }
  for (auto& t : threads) t.join();
  tandem_run.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(pst[i].ok()) << i << ": " << pst[i].error_message();
    ASSERT_TRUE(pd[i].status.ok()) << i << ": " << pd[i].status.error_message();
    ASSERT_TRUE(ref[i].status.ok()) << i;
    EXPECT_EQ(pd[i].last.finish_reason().type(), proto::FinishReason::LENGTH)
        << i << ": " << pd[i].last.finish_reason().message();
    ASSERT_EQ(pd[i].tokens.size(), static_cast<size_t>(MaxNew(i))) << i;
    EXPECT_EQ(pd[i].tokens, ref[i].tokens) << "request " << i;
    ASSERT_EQ(offline[i].size(), static_cast<size_t>(kMaxNew)) << i;
    EXPECT_EQ(pd[i].tokens,
              std::vector<int32_t>(offline[i].begin(), offline[i].begin() + MaxNew(i)))
        << "request " << i << " against tandem-run";
  }
  // The transfer shows up in both sides' phase metrics, one sample per leg.
  for (Worker* w : {prefill[0].get(), decode[0].get()}) {
    HttpReply metrics = HttpGet(w->http_port, "/metrics");
    const size_t at = metrics.body.find("tandem_worker_transfer_seconds_count ");
    ASSERT_NE(at, std::string::npos) << metrics.body;
    EXPECT_GE(std::stod(metrics.body.substr(at + 37)), 16.0) << w->role;
  }
  for (auto& w : prefill) ExpectAllBlocksReturn(w.get());
  for (auto& w : decode) ExpectAllBlocksReturn(w.get());
  ExpectAllBlocksReturn(colocated.get());
}

INSTANTIATE_TEST_SUITE_P(OneAndTwoPairs, PdClusterPairsTest, ::testing::Values(1, 2),
                         [](const auto& info) {
                           return std::to_string(info.param) + "x" + std::to_string(info.param);
                         });

// Every leg a worker ended, whatever the outcome (tandem_worker_requests_total summed).
double LegsEnded(Worker* w) {
  const std::string body = HttpGet(w->http_port, "/metrics").body;
  double total = 0;
  std::istringstream lines(body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("tandem_worker_requests_total{", 0) != 0) continue;
    total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

// Parallel sampling in PD mode: the leader is one PD request; its sibling names it and goes to
// the decode worker alone, shares the received prompt KV and computes only the last partial
// block. The prefill worker sees one leg, and the sibling's tokens are the leader's (greedy).
TEST(PdClusterTest, SiblingLegSharesTheLeadersTransferredPrompt) {
  auto prefill = Start("prefill");
  auto decode = Start("decode");
  const std::vector<int32_t> prompt = Prompts(1)[0];  // 91 tokens: 5 whole blocks + 11
  ASSERT_EQ(prompt.size(), 91u);
  constexpr uint64_t kRoom = 9300;
  proto::PrefillRequest pr;
  pr.set_rid("lead");
  pr.set_bootstrap_room(kRoom);
  pr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *pr.mutable_sampling_params() = GreedyParams(400);  // outlives the sibling; aborted below
  proto::PrefillResponse presp;
  grpc::Status pst;
  std::thread prefill_leg([&] { pst = Prefill(prefill->stub.get(), pr, &presp); });

  proto::DecodeRequest dr;
  dr.set_rid("lead");
  dr.set_bootstrap_room(kRoom);
  dr.set_bootstrap_host("127.0.0.1");
  dr.set_bootstrap_port(prefill->bootstrap_port);
  dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *dr.mutable_sampling_params() = GreedyParams(400);
  dr.set_stream(true);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> lead_tokens;
  bool lead_done = false;
  grpc::ClientContext lead_ctx;
  lead_ctx.set_deadline(std::chrono::system_clock::now() + seconds(120));
  std::thread decode_leg([&] {
    auto reader = decode->stub->Decode(&lead_ctx, dr);
    proto::DecodeEvent e;
    while (reader->Read(&e)) {
      std::lock_guard<std::mutex> lock(mu);
      lead_tokens.insert(lead_tokens.end(), e.token_ids().begin(), e.token_ids().end());
      cv.notify_all();
    }
    (void)reader->Finish();
    std::lock_guard<std::mutex> lock(mu);
    lead_done = true;
    cv.notify_all();
  });
  {
    // Its first token means the prompt's KV has landed on the decode worker.
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(60), [&] { return !lead_tokens.empty() || lead_done; }));
    ASSERT_FALSE(lead_tokens.empty());
  }
  proto::DecodeRequest sr;
  sr.set_rid("lead_1");
  sr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  *sr.mutable_sampling_params() = GreedyParams(10);
  sr.set_stream(true);
  sr.set_share_prompt_with("lead");
  DecodeResult sib = Decode(decode->stub.get(), sr);
  {
    grpc::ClientContext ctx;
    proto::AbortRequest abort;
    abort.set_rid("lead");
    proto::AbortResponse found;
    ASSERT_TRUE(decode->stub->Abort(&ctx, abort, &found).ok());
    EXPECT_TRUE(found.found());
  }
  decode_leg.join();
  prefill_leg.join();
  ASSERT_TRUE(pst.ok()) << pst.error_message();
  ASSERT_TRUE(sib.status.ok()) << sib.status.error_message();
  EXPECT_EQ(sib.last.finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(sib.last.cached_tokens(), 5 * 16);
  EXPECT_EQ(sib.last.prompt_tokens(), 91);
  ASSERT_GE(lead_tokens.size(), 10u);
  EXPECT_EQ(sib.tokens, std::vector<int32_t>(lead_tokens.begin(), lead_tokens.begin() + 10));
  EXPECT_EQ(LegsEnded(prefill.get()), 1.0) << "one prefill for both legs";
  // The decode worker keeps no prefix cache: every block comes back without a flush.
  proto::LoadReport load;
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  do {
    load = Load(decode->stub.get());
    if (load.free_kv_blocks() == load.total_kv_blocks()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(load.free_kv_blocks(), load.total_kv_blocks());
  ExpectAllBlocksReturn(prefill.get());
  ExpectAllBlocksReturn(decode.get());
}

// A prefill leg the router cancels (its client went away, or the pair was given up) aborts the
// room at once instead of waiting for the decode worker until --bootstrap-timeout.
TEST(PdClusterTest, CancelledPrefillLegAbortsItsRoom) {
  auto p = Start("prefill", {"--bootstrap-timeout", "120"});
  proto::PrefillRequest pr;
  pr.set_rid("cancelled");
  pr.set_bootstrap_room(4242);
  for (int32_t t = 11; t <= 18; ++t) pr.add_input_ids(t);
  *pr.mutable_sampling_params() = GreedyParams(4);
  grpc::ClientContext ctx;
  proto::PrefillResponse resp;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  p->stub->async()->Prefill(&ctx, &pr, &resp, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  // The leg is waiting for a decode worker that never registers the room.
  auto aborted = [&] {
    HttpReply m = HttpGet(p->http_port, "/metrics");
    return m.body.find("tandem_worker_requests_total{outcome=\"aborted\"} 1") != std::string::npos;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(aborted());
  ctx.TryCancel();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(30), [&] { return done; }));
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // Well before the 120 s bootstrap timeout, the worker has ended the leg as aborted.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (!aborted() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(aborted()) << HttpGet(p->http_port, "/metrics").body;
}

TEST(PdClusterTest, FailuresEndWithClearErrorsAndFreeBlocks) {
  auto p = Start("prefill");
  auto d = Start("decode");
  const std::vector<int32_t> prompt = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};

  {  // A decode leg whose prefill leg never comes: aborted after bootstrap + transfer timeouts.
    proto::DecodeRequest dr;
    dr.set_bootstrap_room(901);
    dr.set_bootstrap_host("127.0.0.1");
    dr.set_bootstrap_port(p->bootstrap_port);
    dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
    *dr.mutable_sampling_params() = GreedyParams(5);
    dr.set_stream(true);
    // Through a channel that pings every second while the leg waits with no data flowing, as
    // the router's does (every 10 s): the worker must not answer the pings with GOAWAY.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    auto channel = router::ConnectProvenWorker(d->grpc_address(), kTestClusterSecret,
                                               absl::Now() + absl::Seconds(10), args);
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto pinging = proto::Worker::NewStub(*channel);
    const auto t0 = std::chrono::steady_clock::now();
    DecodeResult r = Decode(pinging.get(), dr);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(30));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.last.finish_reason().type(), proto::FinishReason::ABORT);
    EXPECT_NE(r.last.finish_reason().message().find("no KV cache from prefill worker"),
              std::string::npos)
        << r.last.finish_reason().message();
  }
  {  // A prefill leg whose decode worker never registers the room.
    proto::PrefillRequest pr;
    pr.set_bootstrap_room(902);
    pr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
    *pr.mutable_sampling_params() = GreedyParams(5);
    proto::PrefillResponse resp;
    grpc::Status st = Prefill(p->stub.get(), pr, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
    EXPECT_NE(st.error_message().find("--bootstrap-timeout"), std::string::npos);
  }
  {  // Another model and a peer without the cluster secret are refused at the handshake.
    auto other = Start("decode", {"--served-model-name", "some-other-model"});
    proto::DecodeRequest dr;
    dr.set_bootstrap_room(903);
    dr.set_bootstrap_host("127.0.0.1");
    dr.set_bootstrap_port(p->bootstrap_port);
    dr.mutable_input_ids()->Add(prompt.begin(), prompt.end());
    *dr.mutable_sampling_params() = GreedyParams(5);
    DecodeResult r = Decode(other->stub.get(), dr);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(r.status.error_message().find("some-other-model"), std::string::npos)
        << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("tandem-tiny-english"), std::string::npos)
        << r.status.error_message();

    // The same model run W8A8 on one side: its KV is not the bf16 side's, so the pair is refused.
    auto int8 = Start("decode", {"--quantization", "w8a8"});
    dr.set_bootstrap_room(906);
    r = Decode(int8->stub.get(), dr);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("model"), std::string::npos)
        << r.status.error_message();

    auto stranger = Start("decode", {"--cluster-secret", "not-the-cluster-secret-987654"});
    dr.set_bootstrap_room(904);
    r = Decode(stranger->stub.get(), dr);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("secret"), std::string::npos);
  }
  {  // The pair still works after all that.
    grpc::Status pst;
    DecodeResult r = RunPd(p.get(), d.get(), 905, prompt, 6, &pst);
    EXPECT_TRUE(pst.ok()) << pst.error_message();
    EXPECT_EQ(r.tokens.size(), 6u);
  }
  {  // The prefill worker killed with legs in flight: the decode legs end with an error.
    std::vector<std::thread> threads;
    std::vector<DecodeResult> results(6);
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 400; ++i) long_prompt.push_back(10 + i * 7 % 2900);
    for (int i = 0; i < 6; ++i) {
      threads.emplace_back(
          [&, i] { results[i] = RunPd(p.get(), d.get(), 950 + i, long_prompt, 50); });
    }
    // Soon enough that the six 400-token prefills (2,400 tokens) cannot all have finished: legs
    // not yet started fail to reach the worker, the others lose it mid-prefill or mid-transfer.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    p->process->Signal(SIGKILL);
    for (auto& t : threads) t.join();
    int ended_with_error = 0;
    for (const auto& r : results) {
      ended_with_error +=
          !r.status.ok() || r.last.finish_reason().type() == proto::FinishReason::ABORT;
    }
    EXPECT_GT(ended_with_error, 0);
  }
  ExpectAllBlocksReturn(d.get());
}

TEST(PdClusterTest, DecodeWorkerReRegistersWithARestartedPrefillWorker) {
  auto p = Start("prefill");
  auto d = Start("decode");
  const std::vector<int32_t> prompt = {31, 32, 33, 34, 35, 36, 37, 38, 39, 40};
  grpc::Status pst;
  DecodeResult r = RunPd(p.get(), d.get(), 1201, prompt, 4, &pst);
  ASSERT_TRUE(pst.ok()) << pst.error_message();
  ASSERT_EQ(r.tokens.size(), 4u);
  // Same ports, new process: it knows no decode worker.
  std::string why;
  ASSERT_TRUE(p->Restart(&why)) << why;
  // At most one room is lost to the stale registration (it times out); then the pair works.
  bool recovered = false;
  for (int attempt = 0; attempt < 3 && !recovered; ++attempt) {
    r = RunPd(p.get(), d.get(), 1300 + attempt, prompt, 4, &pst);
    recovered = pst.ok() && r.status.ok() && r.tokens.size() == 4u;
  }
  EXPECT_TRUE(recovered);
  ExpectAllBlocksReturn(p.get());
  ExpectAllBlocksReturn(d.get());
}

TEST(PdClusterTest, DecodeWorkerKilledMidTransferFailsThePrefillLegsAndFreesTheirBlocks) {
  auto p = Start("prefill");
  auto d = Start("decode");
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt.push_back(10 + i * 13 % 2900);
  std::vector<std::thread> threads;
  std::vector<DecodeResult> results(6);
  std::vector<grpc::Status> prefill_status(6);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int32_t> prompt = long_prompt;
      prompt[0] = 10 + i;  // distinct prompts: no prefix-cache shortcut
      results[i] = RunPd(p.get(), d.get(), 990 + i, prompt, 100, &prefill_status[i]);
    });
  }
  // Kill it once it holds legs (queued for their KV, or decoding): a fixed delay let a fast
  // machine finish all six first now and then.
  for (const auto give_up = t0 + seconds(10); std::chrono::steady_clock::now() < give_up;) {
    const proto::LoadReport load = Load(d->stub.get());
    if (load.running_requests() + load.queued_requests() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  d->process->Signal(SIGKILL);
  for (auto& t : threads) t.join();
  // Bounded by the transfer timeout (6 s) plus the bootstrap timeout (3 s), with slack.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(40));
  int decode_errors = 0;
  for (int i = 0; i < 6; ++i) {
    decode_errors += !results[i].status.ok();
    if (!prefill_status[i].ok()) {
      EXPECT_FALSE(prefill_status[i].error_message().empty());
    }
  }
  EXPECT_GT(decode_errors, 0) << "the killed worker's streams should have broken";
  ExpectAllBlocksReturn(p.get());
}

}  // namespace
}  // namespace tandem::itest
