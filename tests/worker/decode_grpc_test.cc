// tandem-decode --local-prefill as the router meets it: a real process on loopback driven through
// the Worker gRPC service. Greedy streams equal an in-process Engine's tokens; stream=false;
// aborts (Abort RPC by rid and by room, client cancellation) end their streams and return their
// blocks; bad input is INVALID_ARGUMENT naming the problem while other streams keep going;
// Health(generate); SIGTERM drains and exits 0.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

const char kKvMemory[] = "16MiB";

std::string ModelDir() { return SourcePath("models/tandem-tiny-english"); }

struct Daemon {
  int grpc_port = 0;
  int http_port = 0;
  std::unique_ptr<Process> process;
  std::unique_ptr<proto::Worker::Stub> stub;
};

std::unique_ptr<Daemon> StartDaemon(std::vector<std::string> extra) {
  auto d = std::make_unique<Daemon>();
  d->grpc_port = FreePort();
  d->http_port = FreePort();
  std::vector<std::string> argv = {BinaryPath("tandem-decode"),
                                   "--local-prefill",
                                   "--model-path",
                                   ModelDir(),
                                   "--port",
                                   std::to_string(d->grpc_port),
                                   "--http-port",
                                   std::to_string(d->http_port),
                                   "--kv-cache-memory",
                                   kKvMemory,
                                   "--threads",
                                   "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  d->process = std::make_unique<Process>(argv);
  EXPECT_TRUE(WaitForHttp(d->http_port, "/health", 200, seconds(60))) << d->process->Output();
  d->stub = proto::Worker::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(d->grpc_port),
                                                       grpc::InsecureChannelCredentials()));
  return d;
}

std::vector<int32_t> RandomPrompt(std::mt19937* rng, int n) {
  std::uniform_int_distribution<int32_t> id(10, 3000);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = id(*rng);
  return out;
}

proto::DecodeRequest Greedy(const std::string& rid, const std::vector<int32_t>& prompt, int max_new,
                            bool ignore_eos = false) {
  proto::DecodeRequest r;
  r.set_rid(rid);
  r.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  r.mutable_sampling_params()->set_temperature(0);
  r.mutable_sampling_params()->set_max_new_tokens(max_new);
  r.mutable_sampling_params()->set_ignore_eos(ignore_eos);
  r.set_stream(true);
  return r;
}

// One Decode call read to its end.
struct StreamResult {
  grpc::Status status;
  std::vector<proto::DecodeEvent> events;
  std::vector<int32_t> tokens;
  const proto::DecodeEvent* last() const { return events.empty() ? nullptr : &events.back(); }
};

StreamResult RunDecode(proto::Worker::Stub* stub, const proto::DecodeRequest& request,
                       grpc::ClientContext* context = nullptr) {
  grpc::ClientContext local;
  if (context == nullptr) context = &local;
  context->set_deadline(std::chrono::system_clock::now() + seconds(120));
  StreamResult r;
  auto reader = stub->Decode(context, request);
  proto::DecodeEvent e;
  while (reader->Read(&e)) {
    r.tokens.insert(r.tokens.end(), e.token_ids().begin(), e.token_ids().end());
    r.events.push_back(e);
  }
  r.status = reader->Finish();
  return r;
}

// The tokens an in-process Engine over the same model and options gives each request.
std::map<std::string, std::vector<int32_t>> ReferenceTokens(
    const std::vector<proto::DecodeRequest>& requests) {
  engine::ServingOptions o;
  o.model_path = ModelDir();
  o.kv_cache_memory = kKvMemory;
  o.threads = 1;
  auto e = engine::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  std::mutex mu;
  std::map<std::string, std::vector<int32_t>> out;
  for (const proto::DecodeRequest& p : requests) {
    engine::Request r;
    r.rid = p.rid();
    r.input_ids.assign(p.input_ids().begin(), p.input_ids().end());
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = p.sampling_params().max_new_tokens();
    r.sampling.ignore_eos = p.sampling_params().ignore_eos();
    r.sampling.skip_special_tokens = false;
    r.callbacks.on_output = [&mu, &out, rid = p.rid()](const engine::RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      auto& v = out[rid];
      v.insert(v.end(), o.token_ids.begin(), o.token_ids.end());
    };
    EXPECT_TRUE((*e)->Submit(std::move(r)).ok());
  }
  EXPECT_TRUE((*e)->WaitIdle(120));
  return out;
}

proto::LoadReport Load(proto::Worker::Stub* stub) {
  grpc::ClientContext ctx;
  proto::LoadReport load;
  EXPECT_TRUE(stub->GetLoad(&ctx, proto::LoadRequest(), &load).ok());
  return load;
}

// Waits until nothing runs or queues, flushes the prefix cache, and expects every block free.
void ExpectAllBlocksReturn(proto::Worker::Stub* stub) {
  auto deadline = std::chrono::steady_clock::now() + seconds(30);
  proto::LoadReport load = Load(stub);
  while ((load.running_requests() > 0 || load.queued_requests() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    load = Load(stub);
  }
  grpc::ClientContext ctx;
  proto::FlushCacheResponse flush;
  ASSERT_TRUE(stub->FlushCache(&ctx, proto::FlushCacheRequest(), &flush).ok());
  EXPECT_TRUE(flush.flushed()) << flush.message();
  // The engine refreshes its load snapshot just after running the flush: poll briefly.
  load = Load(stub);
  for (int i = 0; i < 100 && load.free_kv_blocks() != load.total_kv_blocks(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    load = Load(stub);
  }
  EXPECT_GT(load.total_kv_blocks(), 0);
  EXPECT_EQ(load.free_kv_blocks(), load.total_kv_blocks());
}

class DecodeGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = StartDaemon({}).release(); }
  static void TearDownTestSuite() {
    daemon_->process->Signal(SIGTERM);
    EXPECT_EQ(daemon_->process->Wait(seconds(30)), 0) << daemon_->process->Output();
    delete daemon_;
    daemon_ = nullptr;
  }
  proto::Worker::Stub* stub() { return daemon_->stub.get(); }
  static Daemon* daemon_;
};
Daemon* DecodeGrpcTest::daemon_ = nullptr;

TEST_F(DecodeGrpcTest, ConcurrentGreedyStreamsEqualAnInProcessEngine) {
  std::mt19937 rng(17);
  std::vector<proto::DecodeRequest> requests;
  for (int i = 0; i < 36; ++i) {
    const int prompt_len = 1 + (i * 37) % 300;  // some longer than a 256-token chunk
    const int max_new = 1 + (i * 13) % 64;
    requests.push_back(Greedy("mixed-" + std::to_string(i), RandomPrompt(&rng, prompt_len), max_new,
                              /*ignore_eos=*/i % 3 == 0));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto expected = ReferenceTokens(requests);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<StreamResult> results(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = RunDecode(stub(), requests[i]); });
  }
  for (auto& t : threads) t.join();
  const auto t2 = std::chrono::steady_clock::now();
  // Informational only (tests never assert on timings): the same work over gRPC vs in process.
  const double in_process = std::chrono::duration<double>(t1 - t0).count();
  const double over_grpc = std::chrono::duration<double>(t2 - t1).count();
  std::printf("%zu requests: in-process engine %.3f s (incl. model load), over gRPC %.3f s\n",
              requests.size(), in_process, over_grpc);
  for (size_t i = 0; i < requests.size(); ++i) {
    const StreamResult& r = results[i];
    const std::string& rid = requests[i].rid();
    ASSERT_TRUE(r.status.ok()) << rid << ": " << r.status.error_message();
    ASSERT_NE(r.last(), nullptr) << rid;
    EXPECT_EQ(r.tokens, expected.at(rid)) << rid;
    EXPECT_TRUE(r.last()->finished()) << rid;
    for (size_t k = 0; k + 1 < r.events.size(); ++k) EXPECT_FALSE(r.events[k].finished());
    EXPECT_NE(r.last()->finish_reason().type(), proto::FinishReason::ABORT) << rid;
    EXPECT_EQ(r.last()->completion_tokens(), static_cast<int>(r.tokens.size())) << rid;
    EXPECT_EQ(r.last()->prompt_tokens(), requests[i].input_ids_size()) << rid;
    EXPECT_GT(r.last()->timings().first_token_s(), 0) << rid;
    EXPECT_GT(r.last()->timings().prefill_compute_s(), 0) << rid;
    EXPECT_EQ(r.last()->timings().transfer_s(), 0) << rid;
  }
  ExpectAllBlocksReturn(stub());
  // The phase histograms saw these requests; a colocated worker records no transfer.
  HttpReply metrics = HttpGet(daemon_->http_port, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body.find("tandem_worker_first_token_seconds_count 0\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("tandem_worker_transfer_seconds_count 0\n"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("tandem_worker_requests_total{outcome=\"finished\"}"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("tandem_engine_kv_free_blocks"), std::string::npos);
  // SGLang's names: every leg that produced a token is one TTFT and one end-to-end sample; those
  // that generated more than one token are a time-per-output-token sample each.
  const auto count = [&](const std::string& histogram) -> int64_t {
    const std::string key = histogram + "_count{model_name=\"tandem-tiny-english\"} ";
    const size_t at = metrics.body.find(key);
    if (at == std::string::npos) return -1;
    return std::stoll(metrics.body.substr(at + key.size()));
  };
  const int64_t ttft = count("sglang:time_to_first_token_seconds");
  EXPECT_GE(ttft, static_cast<int64_t>(requests.size())) << metrics.body;
  EXPECT_EQ(count("sglang:e2e_request_latency_seconds"), ttft) << metrics.body;
  const int64_t per_token = count("sglang:time_per_output_token_seconds");
  EXPECT_GT(per_token, 0) << metrics.body;
  EXPECT_LT(per_token, ttft) << "the first request generates a single token";
  EXPECT_NE(metrics.body.find("sglang:num_running_reqs{model_name=\"tandem-tiny-english\"}"),
            std::string::npos)
      << metrics.body;
}

TEST_F(DecodeGrpcTest, NonStreamingSendsOneEventWithEverything) {
  std::mt19937 rng(5);
  proto::DecodeRequest streamed = Greedy("", RandomPrompt(&rng, 40), 30, true);
  proto::DecodeRequest whole = streamed;
  whole.set_stream(false);
  whole.set_return_logprob(true);
  StreamResult a = RunDecode(stub(), streamed);
  StreamResult b = RunDecode(stub(), whole);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_GT(a.events.size(), 1u);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.tokens.size(), 30u);
  EXPECT_EQ(b.events[0].token_logprobs_size(), 30);
  EXPECT_TRUE(b.events[0].finished());
  EXPECT_EQ(b.events[0].finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(b.events[0].finish_reason().length(), 30);
  std::string text;
  for (const auto& e : a.events) text += e.text();
  EXPECT_EQ(b.events[0].text(), text);
}

// A stream left open: the request is sent at construction (and, with `wait_first`, its first
// event read); Drain() reads the rest.
struct LongStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<proto::DecodeEvent>> reader;
  std::vector<proto::DecodeEvent> events;

  LongStream(proto::Worker::Stub* stub, const proto::DecodeRequest& request,
             bool wait_first = true) {
    context.set_deadline(std::chrono::system_clock::now() + seconds(120));
    reader = stub->Decode(&context, request);
    proto::DecodeEvent e;
    if (wait_first && reader->Read(&e)) events.push_back(e);
  }
  grpc::Status Drain() {
    proto::DecodeEvent e;
    while (reader->Read(&e)) events.push_back(e);
    return reader->Finish();
  }
};

proto::DecodeRequest LongRequest(const std::string& rid, uint64_t room = 0) {
  proto::DecodeRequest r = Greedy(rid, {11, 12, 13, 14}, 500, /*ignore_eos=*/true);
  r.set_bootstrap_room(room);
  return r;
}

TEST_F(DecodeGrpcTest, AbortByRidAndByRoomEndTheStreamsAndReturnTheirBlocks) {
  LongStream by_rid(stub(), LongRequest("abort-me"));
  LongStream by_room(stub(), LongRequest("abort-my-room", 0x1234567890abcdefULL));
  ASSERT_FALSE(by_rid.events.empty());
  ASSERT_FALSE(by_room.events.empty());
  {
    grpc::ClientContext ctx;
    proto::AbortRequest req;
    req.set_rid("abort-me");
    req.set_reason("the router gave up");
    proto::AbortResponse resp;
    ASSERT_TRUE(stub()->Abort(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.found());
  }
  {
    grpc::ClientContext ctx;
    proto::AbortRequest req;
    req.set_bootstrap_room(0x1234567890abcdefULL);
    proto::AbortResponse resp;
    ASSERT_TRUE(stub()->Abort(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.found());
  }
  for (LongStream* s : {&by_rid, &by_room}) {
    grpc::Status st = s->Drain();
    EXPECT_TRUE(st.ok()) << st.error_message();
    ASSERT_FALSE(s->events.empty());
    EXPECT_TRUE(s->events.back().finished());
    EXPECT_EQ(s->events.back().finish_reason().type(), proto::FinishReason::ABORT);
  }
  EXPECT_EQ(by_rid.events.back().finish_reason().message(), "the router gave up");
  {
    grpc::ClientContext ctx;
    proto::AbortRequest req;
    req.set_rid("abort-me");  // already ended
    proto::AbortResponse resp;
    ASSERT_TRUE(stub()->Abort(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.found());
  }
  ExpectAllBlocksReturn(stub());
}

TEST_F(DecodeGrpcTest, ClientCancellationAbortsTheRequest) {
  for (int i = 0; i < 4; ++i) {
    LongStream s(stub(), LongRequest("cancel-" + std::to_string(i)));
    ASSERT_FALSE(s.events.empty());
    s.context.TryCancel();
    grpc::Status st = s.Drain();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
  }
  ExpectAllBlocksReturn(stub());
  // The requests were aborted in the engine, not left to run to their end.
  HttpReply metrics = HttpGet(daemon_->http_port, "/metrics");
  EXPECT_NE(metrics.body.find("tandem_worker_requests_total{outcome=\"cancelled\"} 4"),
            std::string::npos)
      << metrics.body;
}

TEST_F(DecodeGrpcTest, BadInputIsInvalidArgumentNamingTheProblemWhileOthersRun) {
  LongStream other(stub(), LongRequest("bystander"));
  ASSERT_FALSE(other.events.empty());
  grpc::ClientContext info_ctx;
  proto::ServerInfo info;
  ASSERT_TRUE(stub()->GetServerInfo(&info_ctx, proto::ServerInfoRequest(), &info).ok());
  ASSERT_EQ(info.context_length(), 512);

  struct Case {
    proto::DecodeRequest request;
    std::string expected;
  };
  std::vector<Case> cases;
  cases.push_back({Greedy("empty", {}, 4), "the input is empty"});
  cases.push_back({Greedy("oov", {5, 3072}, 4), "input_ids[1] = 3072 is outside the vocabulary"});
  Case top_p{Greedy("top-p", {5, 6}, 4), "sampling_params.top_p must be in (0, 1], got 2"};
  top_p.request.mutable_sampling_params()->set_top_p(2);
  cases.push_back(top_p);
  cases.push_back({Greedy("long", std::vector<int32_t>(512, 7), 4),
                   "longer than the model's context length (512 tokens)"});
  cases.push_back({Greedy("negative", {-1}, 4), "input_ids[0] = -1"});
  for (const Case& c : cases) {
    StreamResult r = RunDecode(stub(), c.request);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.expected;
    EXPECT_NE(r.status.error_message().find(c.expected), std::string::npos)
        << r.status.error_message();
    EXPECT_TRUE(r.events.empty());
  }
  // A leg naming a prefill worker needs the KV handoff, which a colocated worker does not take.
  proto::DecodeRequest pd = Greedy("pd", {5, 6}, 4);
  pd.set_bootstrap_host("127.0.0.1");
  pd.set_bootstrap_port(8998);
  EXPECT_EQ(RunDecode(stub(), pd).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // A duplicate live rid is refused; the first request is untouched.
  EXPECT_EQ(RunDecode(stub(), LongRequest("bystander")).status.error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  grpc::Status st = other.Drain();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(other.events.back().finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(other.events.back().completion_tokens(), 500);
  ExpectAllBlocksReturn(stub());
}

TEST_F(DecodeGrpcTest, HealthGenerateServerInfoAndFlushWhileBusy) {
  grpc::ClientContext ctx;
  proto::HealthRequest req;
  req.set_generate(true);
  proto::HealthResponse resp;
  ASSERT_TRUE(stub()->Health(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), proto::HealthResponse::SERVING) << resp.message();

  grpc::ClientContext info_ctx;
  proto::ServerInfo info;
  ASSERT_TRUE(stub()->GetServerInfo(&info_ctx, proto::ServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.role(), proto::ServerInfo::COLOCATED);
  EXPECT_EQ(info.served_model_name(), "tandem-tiny-english");
  EXPECT_EQ(info.kv_block_size(), 16);
  EXPECT_EQ(info.total_kv_blocks(), Load(stub()).total_kv_blocks());

  // The same prompt twice: the second is served from the prefix cache.
  std::vector<int32_t> prompt(100);
  for (int i = 0; i < 100; ++i) prompt[i] = 100 + i;
  ASSERT_TRUE(RunDecode(stub(), Greedy("warm", prompt, 2)).status.ok());
  StreamResult again = RunDecode(stub(), Greedy("hit", prompt, 2));
  ASSERT_TRUE(again.status.ok());
  EXPECT_GE(again.last()->cached_tokens(), 96);
  grpc::ClientContext info2_ctx;
  proto::ServerInfo info2;
  ASSERT_TRUE(stub()->GetServerInfo(&info2_ctx, proto::ServerInfoRequest(), &info2).ok());
  EXPECT_GE(info2.cache_hit_tokens() - info.cache_hit_tokens(), 96);
  EXPECT_EQ(info2.cache_query_tokens() - info.cache_query_tokens(), 200);

  LongStream busy(stub(), LongRequest("busy"));
  grpc::ClientContext flush_ctx;
  proto::FlushCacheResponse flush;
  ASSERT_TRUE(stub()->FlushCache(&flush_ctx, proto::FlushCacheRequest(), &flush).ok());
  EXPECT_FALSE(flush.flushed());
  EXPECT_NE(flush.message().find("running"), std::string::npos) << flush.message();
  EXPECT_TRUE(busy.Drain().ok());
  ExpectAllBlocksReturn(stub());
}

TEST(DecodeDrainTest, SigtermRefusesNewLegsEndsRunningStreamsAndExitsZero) {
  // One request at a time, so the queued work outlasts the one-second drain.
  auto d = StartDaemon({"--drain-timeout", "1", "--max-running-requests", "1"});
  constexpr int kStreams = 40;
  std::vector<std::unique_ptr<LongStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<LongStream>(
        d->stub.get(), LongRequest("drain-" + std::to_string(i)), /*wait_first=*/i == 0));
  }
  ASSERT_FALSE(streams[0]->events.empty());
  auto admitted = std::chrono::steady_clock::now() + seconds(20);
  proto::LoadReport load = Load(d->stub.get());
  while (load.running_requests() + load.queued_requests() < kStreams &&
         std::chrono::steady_clock::now() < admitted) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    load = Load(d->stub.get());
  }
  d->process->Signal(SIGTERM);
  // Once the worker says it is draining, a new leg is refused.
  auto deadline = std::chrono::steady_clock::now() + seconds(10);
  proto::HealthResponse health;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    if (!d->stub->Health(&ctx, proto::HealthRequest(), &health).ok()) break;
    if (health.status() == proto::HealthResponse::DRAINING) break;
  }
  ASSERT_EQ(health.status(), proto::HealthResponse::DRAINING);
  StreamResult refused = RunDecode(d->stub.get(), LongRequest("too-late"));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.status.error_message().find("draining"), std::string::npos);

  int aborted = 0;
  for (auto& s : streams) {
    grpc::Status st = s->Drain();
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_FALSE(s->events.empty());
    ASSERT_TRUE(s->events.back().finished());
    if (s->events.back().finish_reason().type() == proto::FinishReason::ABORT) {
      ++aborted;
      EXPECT_NE(s->events.back().finish_reason().message().find("--drain-timeout"),
                std::string::npos);
    }
  }
  EXPECT_GT(aborted, 0);
  EXPECT_EQ(d->process->Wait(seconds(30)), 0) << d->process->Output();
}

}  // namespace
}  // namespace tandem::itest
