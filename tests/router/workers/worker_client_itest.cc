// WorkerClient and WorkerRegistry against real worker processes: a colocated
// `tandem-decode --local-prefill` (Decode stream, cancel mid-stream frees the worker's blocks,
// Health/GetLoad/FlushCache/GetServerInfo, a dead peer, a worker killed then restarted on the
// same port) and a `tandem-prefill` + `tandem-decode` pair (the Prefill leg). Bounded waits only.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "router/workers/worker_client.h"
#include "router/workers/worker_registry.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"

namespace tandem::router {
namespace {

using itest::FreePort;
using std::chrono::seconds;

using itest::StartWorker;

// role: "colocated" | "decode" | "prefill"; handoff timeouts with headroom for a loaded machine.
std::unique_ptr<itest::WorkerProcess> StartDaemon(const std::string& role) {
  return StartWorker(role, {"--bootstrap-timeout", "30", "--transfer-timeout", "60"});
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout = seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

absl::Time In(int secs) { return absl::Now() + absl::Seconds(secs); }

proto::SamplingParams Greedy(int max_new) {
  proto::SamplingParams p;
  p.set_temperature(0);
  p.set_max_new_tokens(max_new);
  p.set_ignore_eos(true);
  p.set_skip_special_tokens(true);
  return p;
}

const std::vector<int32_t> kPrompt = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};

// A unary call's result through a future (the callback runs on a gRPC thread).
template <typename Resp>
struct Result {
  grpc::Status status;
  Resp response;
};
template <typename Resp>
std::pair<std::function<void(grpc::Status, Resp)>, std::future<Result<Resp>>> Collect() {
  auto promise = std::make_shared<std::promise<Result<Resp>>>();
  auto future = promise->get_future();
  return {[promise](grpc::Status s, Resp r) {
            promise->set_value({std::move(s), std::move(r)});
          },
          std::move(future)};
}

struct Stream {
  std::mutex mu;
  std::vector<int32_t> tokens;
  int events = 0;
  int done_calls = 0;
  bool event_after_done = false;
  proto::DecodeEvent last;
  std::promise<absl::Status> done;
  std::promise<void> first_event;
  bool first_set = false;
};

LegPtr StartDecode(WorkerClient& client, const proto::DecodeRequest& request,
                   std::shared_ptr<Stream> s, int deadline_secs = 120) {
  return client.StartDecode(
      request, Deadline::After(std::chrono::seconds(deadline_secs)),
      [s](const proto::DecodeEvent& e) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->done_calls > 0) s->event_after_done = true;
        s->tokens.insert(s->tokens.end(), e.token_ids().begin(), e.token_ids().end());
        ++s->events;
        s->last = e;
        if (!s->first_set) {
          s->first_set = true;
          s->first_event.set_value();
        }
      },
      [s](absl::Status status) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (++s->done_calls == 1) s->done.set_value(status);
      });
}

proto::DecodeRequest LocalDecode(const std::string& rid, int max_new, bool stream = true) {
  proto::DecodeRequest r;
  r.set_rid(rid);
  r.mutable_input_ids()->Add(kPrompt.begin(), kPrompt.end());
  *r.mutable_sampling_params() = Greedy(max_new);
  r.set_stream(stream);
  return r;
}

proto::LoadReport Load(WorkerClient& client) {
  auto [done, future] = Collect<proto::LoadReport>();
  client.GetLoad(In(10), done);
  auto r = future.get();
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  return r.response;
}

// Blocks the radix cache keeps are free once flushed; FlushCache succeeds only with nothing
// running. So "flushed and free == total" means the worker holds no block for any request.
bool FlushedAndAllFree(WorkerClient& client, proto::LoadReport* load) {
  auto [done, future] = Collect<proto::FlushCacheResponse>();
  client.FlushCache(In(10), done);
  auto flush = future.get();
  *load = Load(client);
  return flush.status.ok() && flush.response.flushed() &&
         load->free_kv_blocks() == load->total_kv_blocks() && load->running_requests() == 0;
}

TEST(WorkerClientItest, ColocatedWorker) {
  auto daemon = StartDaemon("colocated");
  auto created = WorkerClient::Create(daemon->url());
  ASSERT_TRUE(created.ok()) << created.status();
  WorkerClient& client = **created;

  {  // GetServerInfo, Health, GetLoad on an idle worker.
    auto [done, future] = Collect<proto::ServerInfo>();
    client.GetServerInfo(In(10), done);
    auto info = future.get();
    ASSERT_TRUE(info.status.ok()) << info.status.error_message();
    EXPECT_EQ(info.response.role(), proto::ServerInfo::COLOCATED);
    EXPECT_GT(info.response.total_kv_blocks(), 0);
    auto [hdone, hfuture] = Collect<proto::HealthResponse>();
    client.Health(false, In(10), hdone);
    auto health = hfuture.get();
    ASSERT_TRUE(health.status.ok()) << health.status.error_message();
    EXPECT_EQ(health.response.status(), proto::HealthResponse::SERVING);
    proto::LoadReport load = Load(client);
    EXPECT_GT(load.total_kv_blocks(), 0);
    EXPECT_EQ(load.free_kv_blocks(), load.total_kv_blocks());
  }

  {  // A streamed decode leg: every token, in order, then done once.
    auto s = std::make_shared<Stream>();
    StartDecode(client, LocalDecode("stream-1", 12), s);
    absl::Status status = s->done.get_future().get();
    ASSERT_TRUE(status.ok()) << status;
    std::lock_guard<std::mutex> lock(s->mu);
    EXPECT_EQ(s->tokens.size(), 12u);
    EXPECT_TRUE(s->last.finished());
    EXPECT_EQ(s->last.completion_tokens(), 12);
    EXPECT_EQ(s->last.prompt_tokens(), static_cast<int>(kPrompt.size()));
    EXPECT_FALSE(s->event_after_done);
    // The same greedy request without streaming: one event with the same tokens.
    auto one = std::make_shared<Stream>();
    StartDecode(client, LocalDecode("stream-2", 12, /*stream=*/false), one);
    ASSERT_TRUE(one->done.get_future().get().ok());
    std::lock_guard<std::mutex> lock2(one->mu);
    EXPECT_EQ(one->tokens, s->tokens);
  }

  {  // Cancel mid-stream: done reports CANCELLED once and the worker frees every block.
    auto s = std::make_shared<Stream>();
    auto first = s->first_event.get_future();
    auto handle = StartDecode(client, LocalDecode("cancel-me", 400), s);
    ASSERT_EQ(first.wait_for(seconds(60)), std::future_status::ready);
    handle->Cancel();
    handle->Cancel();  // twice is fine
    absl::Status status = s->done.get_future().get();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
    handle->Cancel();  // after completion too
    proto::LoadReport load;
    ASSERT_TRUE(WaitFor([&] { return FlushedAndAllFree(client, &load); })) << load.DebugString();
    std::lock_guard<std::mutex> lock(s->mu);
    EXPECT_EQ(s->done_calls, 1);
    EXPECT_LT(s->tokens.size(), 400u);
  }

  {  // Cancel from another thread, racing the call: done runs once, CANCELLED unless the leg
     // had already finished.
    for (int i = 0; i < 5; ++i) {
      auto s = std::make_shared<Stream>();
      auto handle = StartDecode(client, LocalDecode("race-" + std::to_string(i), 200), s);
      std::thread([handle] { handle->Cancel(); }).join();
      auto status = s->done.get_future().get();
      EXPECT_TRUE(status.code() == absl::StatusCode::kCancelled || status.ok()) << status;
      handle->Cancel();
      std::lock_guard<std::mutex> lock(s->mu);
      EXPECT_EQ(s->done_calls, 1);
    }
  }

  {  // The raced legs end on the worker too; then FlushCache succeeds. Abort of an unknown rid.
    proto::LoadReport load;
    ASSERT_TRUE(WaitFor([&] { return FlushedAndAllFree(client, &load); })) << load.DebugString();
    proto::AbortRequest abort;
    abort.set_rid("nobody");
    auto [adone, afuture] = Collect<proto::AbortResponse>();
    client.Abort(abort, In(10), adone);
    auto a = afuture.get();
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_FALSE(a.response.found());
  }
}

// The client is dropped while the callback of its last call is still running on gRPC's thread:
// the call then holds the channel's last reference, and letting it go on that thread would shut
// down and delete gRPC's callback completion queue under the thread reading it (an abort). The
// process must go on, and a new client must work.
TEST(WorkerClientItest, ClientDroppedWhileItsLastCallbackRunsIsSafe) {
  auto daemon = StartDaemon("colocated");
  auto client = *WorkerClient::Create(daemon->url());
  std::promise<void> dropped;
  std::shared_future<void> dropped_future = dropped.get_future().share();
  std::promise<grpc::Status> answered;
  client->Health(false, In(10), [&answered, dropped_future](grpc::Status s, proto::HealthResponse) {
    answered.set_value(std::move(s));
    dropped_future.wait();
  });
  grpc::Status status = answered.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  client.reset();
  dropped.set_value();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the callback returns meanwhile

  auto again = *WorkerClient::Create(daemon->url());
  auto [done, future] = Collect<proto::HealthResponse>();
  again->Health(false, In(10), done);
  auto health = future.get();
  ASSERT_TRUE(health.status.ok()) << health.status.error_message();
  EXPECT_EQ(health.response.status(), proto::HealthResponse::SERVING);
}

TEST(WorkerClientItest, DeadPeerFailsWithUnavailable) {
  auto client = *WorkerClient::Create("127.0.0.1:" + std::to_string(FreePort()));
  auto s = std::make_shared<Stream>();
  StartDecode(*client, LocalDecode("dead", 4), s, 20);
  absl::Status status = s->done.get_future().get();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  auto [done, future] = Collect<proto::HealthResponse>();
  client->Health(false, In(20), done);
  EXPECT_EQ(future.get().status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(WorkerClientItest, PrefillAndDecodeLegs) {
  auto prefill = StartDaemon("prefill");
  auto decode = StartDaemon("decode");
  auto p = *WorkerClient::Create(prefill->url(), itest::kTestClusterSecret);
  auto d = *WorkerClient::Create(decode->url(), itest::kTestClusterSecret);
  // Nothing but Prove reaches a worker before it proved the secret.
  for (WorkerClient* client : {p.get(), d.get()}) {
    EXPECT_FALSE(client->verified());
    std::promise<absl::Status> proved;
    client->Prove(In(20), [&proved](absl::Status s) { proved.set_value(std::move(s)); });
    const absl::Status status = proved.get_future().get();
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(client->verified());
  }
  for (uint64_t room : {101u, 102u}) {
    proto::PrefillRequest pr;
    pr.set_rid("pd-" + std::to_string(room));
    pr.set_bootstrap_room(room);
    pr.mutable_input_ids()->Add(kPrompt.begin(), kPrompt.end());
    *pr.mutable_sampling_params() = Greedy(6);
    std::promise<std::pair<absl::Status, proto::PrefillResponse>> ppromise;
    auto pfuture = ppromise.get_future();
    p->StartPrefill(pr, Deadline::After(std::chrono::seconds(120)),
                    [&ppromise](absl::Status status, proto::PrefillResponse response) {
                      ppromise.set_value({std::move(status), std::move(response)});
                    });
    proto::DecodeRequest dr = LocalDecode("pd-" + std::to_string(room), 6);
    dr.set_bootstrap_room(room);
    dr.set_bootstrap_host(p->host());
    dr.set_bootstrap_port(prefill->bootstrap_port);
    auto s = std::make_shared<Stream>();
    StartDecode(*d, dr, s);
    absl::Status dstatus = s->done.get_future().get();
    auto [pstatus, presponse] = pfuture.get();
    ASSERT_TRUE(pstatus.ok()) << pstatus;
    ASSERT_TRUE(dstatus.ok()) << dstatus;
    EXPECT_EQ(presponse.bootstrap_room(), room);
    std::lock_guard<std::mutex> lock(s->mu);
    ASSERT_EQ(s->tokens.size(), 6u);
    EXPECT_EQ(s->tokens[0], presponse.first_token_id());
  }
  {  // A prefill leg cancelled before its decode leg ever registers: CANCELLED, once.
    proto::PrefillRequest pr;
    pr.set_rid("pd-cancel");
    pr.set_bootstrap_room(999);
    pr.mutable_input_ids()->Add(kPrompt.begin(), kPrompt.end());
    *pr.mutable_sampling_params() = Greedy(4);
    std::atomic<int> calls{0};
    std::promise<absl::Status> done;
    auto handle = p->StartPrefill(pr, Deadline::After(std::chrono::seconds(120)),
                                  [&](absl::Status s, proto::PrefillResponse) {
                                    if (calls.fetch_add(1) == 0) done.set_value(s);
                                  });
    handle->Cancel();
    EXPECT_EQ(done.get_future().get().code(), absl::StatusCode::kCancelled);
    handle->Cancel();
    EXPECT_EQ(calls.load(), 1);
  }
}

TEST(WorkerClientItest, RegistrySeesAKilledWorkerAndItsRestart) {
  auto daemon = StartDaemon("colocated");
  RegistryOptions o;
  o.health_check_interval = absl::Seconds(1);
  o.health_check_timeout = absl::Seconds(2);
  o.health_failure_threshold = 2;
  o.health_success_threshold = 2;
  o.worker_load_check_interval = absl::Seconds(1);
  MetricsRegistry metrics;
  WorkerRegistry registry(o, &metrics);
  WorkerPtr w = *registry.Add(daemon->url(), WorkerType::kRegular, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));
  ASSERT_TRUE(WaitFor([&] { return w->load().total_kv_blocks() > 0; }));

  daemon->Kill();
  ASSERT_TRUE(WaitFor([&] { return !w->healthy(); }));
  EXPECT_TRUE(registry.Available(WorkerType::kRegular).empty());
  EXPECT_FALSE(w->Snapshot().last_error.empty());

  std::string why;
  ASSERT_TRUE(daemon->Launch(&why)) << why;  // the same port again
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));
  registry.Stop();
}

}  // namespace
}  // namespace tandem::router
