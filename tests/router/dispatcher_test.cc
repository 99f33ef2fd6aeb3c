// The Dispatcher's shared-prompt rules (router/dispatcher.h: StartOptions::on_routed and
// share_with) against in-process workers that record every leg they receive: where a leader's
// leg went, siblings pinned to it as plain decode legs naming it, in order behind it on the same
// worker, the ordinary way when the pinned worker is gone or refuses the leg, and a leader's
// retry reported as a new place. Plain and PD mode. Loopback only; every wait is bounded.
#include "router/dispatcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "router/policy/simple_policies.h"
#include "router/router_metrics.h"
#include "router/workers/worker_registry.h"
#include "worker/grpc_link.h"
#include "worker/session_server.h"

namespace tandem::router {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);

bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + kWait;
  while (absl::Now() < give_up) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

// The legs one fake worker received, in arrival order. Decode legs are held until Release(rid)
// (one finished event) or cancelled (an abort event); with refuse_shared, a decode leg naming
// share_prompt_with fails FAILED_PRECONDITION, as a worker without the feature refuses a decode
// leg without a bootstrap host; with fail_first_attempts, a decode leg whose rid is not a
// retry's fails UNAVAILABLE. Prefill legs answer at once.
class RecordingLegs : public worker::LegHandler {
 public:
  absl::StatusOr<std::function<void()>> StartDecode(
      const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      decodes_.push_back(request);
      if (fail_first_attempts_ && request.rid().find("-retry") == std::string::npos) {
        return absl::UnavailableError("the test fails first attempts");
      }
      if (refuse_shared_ && !request.share_prompt_with().empty()) {
        return absl::FailedPreconditionError("a decode leg needs a bootstrap host");
      }
      held_[request.rid()] = std::move(sink);
    }
    const std::string rid = request.rid();
    return [this, rid] { End(rid, proto::FinishReason::ABORT); };
  }
  void StartPrefill(const proto::PrefillRequest& request,
                    std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      prefills_.push_back(request);
    }
    proto::PrefillResponse r;
    r.set_bootstrap_room(request.bootstrap_room());
    r.set_first_token_id(7);
    done(r);
  }
  void CancelPrefill(uint64_t /*room*/) override {}

  void Release(const std::string& rid) { End(rid, proto::FinishReason::LENGTH); }
  // Sends one token on the held leg `rid` without ending it.
  void Emit(const std::string& rid) {
    std::function<void(proto::DecodeEvent)> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(rid);
      if (it == held_.end()) return;
      sink = it->second;
    }
    proto::DecodeEvent e;
    e.add_token_ids(41);
    sink(std::move(e));
  }
  void set_refuse_shared(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_shared_ = v;
  }
  void set_fail_first_attempts(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_first_attempts_ = v;
  }
  std::vector<proto::DecodeRequest> decodes() {
    std::lock_guard<std::mutex> lock(mu_);
    return decodes_;
  }
  std::vector<proto::PrefillRequest> prefills() {
    std::lock_guard<std::mutex> lock(mu_);
    return prefills_;
  }
  bool holds(const std::string& rid) {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.count(rid) > 0;
  }
  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }

 private:
  void End(const std::string& rid, proto::FinishReason::Type type) {
    std::function<void(proto::DecodeEvent)> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(rid);
      if (it == held_.end()) return;
      sink = std::move(it->second);
      held_.erase(it);
    }
    proto::DecodeEvent e;
    e.add_token_ids(42);
    e.set_finished(true);
    e.mutable_finish_reason()->set_type(type);
    sink(std::move(e));
  }

  std::mutex mu_;
  std::vector<proto::DecodeRequest> decodes_;
  std::vector<proto::PrefillRequest> prefills_;
  std::map<std::string, std::function<void(proto::DecodeEvent)>> held_;
  bool refuse_shared_ = false;
  bool fail_first_attempts_ = false;
};

// A worker on 127.0.0.1: healthy, legs on rpc Session served by the workers' session code.
class FakeWorker : public proto::Worker::CallbackService {
 public:
  FakeWorker() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeWorker() override {
    sessions_.CloseAll();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }

  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(
      grpc::CallbackServerContext* /*context*/) override {
    return worker::ServeGrpcLink(&sessions_, &legs_);
  }
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* /*request*/,
                                   proto::HealthResponse* response) override {
    response->set_status(serving_.load() ? proto::HealthResponse::SERVING
                                         : proto::HealthResponse::NOT_SERVING);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const proto::AbortRequest* /*request*/,
                                  proto::AbortResponse* /*response*/) override {
    aborts_.fetch_add(1);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  RecordingLegs& legs() { return legs_; }
  int aborts() const { return aborts_.load(); }
  // Whether its health check answers SERVING.
  void set_serving(bool v) { serving_.store(v); }

 private:
  RecordingLegs legs_;
  worker::LinkServer sessions_;
  std::atomic<int> aborts_{0};
  std::atomic<bool> serving_{true};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// One run's outcome.
struct Outcome {
  std::mutex mu;
  std::vector<proto::DecodeEvent> events;
  std::optional<absl::Status> status;
  absl::Notification done;
  std::vector<LegPlace> places;  // what on_routed said, in order
};

class DispatcherTest : public ::testing::Test {
 protected:
  // Registers the fake workers (PD mode: one prefill, two decode; plain: two regular), waits
  // until they are available, and makes the dispatcher.
  void SetUpCluster(bool pd, int max_retries = 2,
                    absl::Duration stall_timeout = absl::Seconds(30)) {
    pd_ = pd;
    RegistryOptions ro;
    ro.health_success_threshold = 1;
    ro.health_check_interval = absl::Seconds(1);
    ro.worker_load_check_interval = absl::ZeroDuration();
    registry_ = std::make_unique<WorkerRegistry>(ro, &metrics_);
    for (int i = 0; i < 2; ++i) workers_.push_back(std::make_unique<FakeWorker>());
    for (auto& w : workers_) {
      ASSERT_TRUE(
          registry_->Add(w->url(), pd ? WorkerType::kDecode : WorkerType::kRegular, {}).ok());
    }
    if (pd) {
      prefill_ = std::make_unique<FakeWorker>();
      ASSERT_TRUE(registry_->Add(prefill_->url(), WorkerType::kPrefill, 8998).ok());
    }
    registry_->Start();
    ASSERT_TRUE(WaitFor([&] {
      return registry_->Available(pd ? WorkerType::kDecode : WorkerType::kRegular).size() == 2 &&
             (!pd || registry_->Available(WorkerType::kPrefill).size() == 1);
    }));
    router_metrics_ = std::make_unique<RouterMetrics>(&metrics_);
    prefill_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    decode_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    DispatchOptions options;
    options.pd_mode = pd;
    options.backoff.max_retries = max_retries;
    options.backoff.initial_backoff = absl::Milliseconds(1);
    options.backoff.max_backoff = absl::Milliseconds(5);
    options.request_timeout = absl::Seconds(60);
    options.stall_timeout = stall_timeout;
    dispatcher_ = std::make_unique<Dispatcher>(options, registry_.get(), prefill_policy_.get(),
                                               decode_policy_.get(), router_metrics_.get());
  }
  void TearDown() override {
    for (auto& w : workers_) {
      for (const proto::DecodeRequest& d : w->legs().decodes()) w->legs().Release(d.rid());
    }
    dispatcher_.reset();
    if (registry_) registry_->Stop();
  }

  static std::shared_ptr<const RoutedRequest> Request(const std::string& rid) {
    auto r = std::make_shared<RoutedRequest>();
    r->rid = rid;
    r->input_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
    r->sampling.set_max_new_tokens(4);
    r->stream = true;
    return r;
  }

  std::shared_ptr<DispatchRun> Start(const std::string& rid, const std::shared_ptr<Outcome>& out,
                                     std::optional<LegPlace> share_with = std::nullopt,
                                     bool leader = false) {
    StartOptions options;
    options.share_with = std::move(share_with);
    if (leader) {
      options.on_routed = [out](const LegPlace& place) {
        std::lock_guard<std::mutex> lock(out->mu);
        out->places.push_back(place);
      };
    }
    return dispatcher_->Start(
        Request(rid),
        [out](const proto::DecodeEvent& e) {
          std::lock_guard<std::mutex> lock(out->mu);
          out->events.push_back(e);
        },
        [out](absl::Status s) {
          {
            std::lock_guard<std::mutex> lock(out->mu);
            out->status = std::move(s);
          }
          out->done.Notify();
        },
        std::move(options));
  }

  static std::vector<LegPlace> Places(const std::shared_ptr<Outcome>& out) {
    std::lock_guard<std::mutex> lock(out->mu);
    return out->places;
  }
  static absl::Status Wait(const std::shared_ptr<Outcome>& out) {
    if (!out->done.WaitForNotificationWithTimeout(kWait)) {
      return absl::DeadlineExceededError("the run did not end in time");
    }
    std::lock_guard<std::mutex> lock(out->mu);
    return *out->status;
  }
  // The fake worker `url` names.
  FakeWorker* ByUrl(const std::string& url) {
    for (auto& w : workers_) {
      if (w->url() == url) return w.get();
    }
    return nullptr;
  }
  FakeWorker* Other(const FakeWorker* w) {
    return workers_[0].get() == w ? workers_[1].get() : workers_[0].get();
  }

  bool pd_ = false;
  MetricsRegistry metrics_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::unique_ptr<FakeWorker> prefill_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RouterMetrics> router_metrics_;
  std::unique_ptr<Policy> prefill_policy_;
  std::unique_ptr<Policy> decode_policy_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(DispatcherTest, PlainSiblingsArePinnedBehindTheLeaderOnItsWorker) {
  SetUpCluster(/*pd=*/false);
  auto leader = std::make_shared<Outcome>();
  Start("req_0", leader, std::nullopt, /*leader=*/true);
  std::vector<LegPlace> places = Places(leader);
  ASSERT_EQ(places.size(), 1u);  // reported on the starting thread, after the leg was sent
  ASSERT_NE(places[0].worker, nullptr);
  EXPECT_EQ(places[0].attempt, 0);
  EXPECT_EQ(places[0].rid, "req_0");
  FakeWorker* home = ByUrl(places[0].worker->url());
  ASSERT_NE(home, nullptr);

  std::vector<std::shared_ptr<Outcome>> siblings;
  for (int j = 1; j < 4; ++j) {
    siblings.push_back(std::make_shared<Outcome>());
    Start(absl::StrCat("req_", j), siblings.back(), places[0]);
  }
  ASSERT_TRUE(WaitFor([&] { return home->legs().held() == 4; }));
  EXPECT_EQ(places[0].worker->inflight(), 4);  // every sibling leg counts against its worker
  std::vector<proto::DecodeRequest> legs = home->legs().decodes();
  ASSERT_EQ(legs.size(), 4u);
  EXPECT_EQ(legs[0].rid(), "req_0");  // the leader's leg arrived first: one session, in order
  EXPECT_TRUE(legs[0].share_prompt_with().empty());
  for (size_t k = 1; k < legs.size(); ++k) {
    EXPECT_EQ(legs[k].share_prompt_with(), "req_0") << legs[k].rid();
    EXPECT_TRUE(legs[k].bootstrap_host().empty());
    EXPECT_EQ(legs[k].bootstrap_room(), 0u);
  }
  EXPECT_TRUE(Other(home)->legs().decodes().empty());

  for (int j = 0; j < 4; ++j) home->legs().Release(absl::StrCat("req_", j));
  EXPECT_TRUE(Wait(leader).ok());
  for (auto& s : siblings) EXPECT_TRUE(Wait(s).ok());
  EXPECT_TRUE(WaitFor([&] { return places[0].worker->inflight() == 0; }));
}

TEST_F(DispatcherTest, PdSiblingsSkipThePrefillWorker) {
  SetUpCluster(/*pd=*/true);
  auto leader = std::make_shared<Outcome>();
  Start("req_0", leader, std::nullopt, /*leader=*/true);
  std::vector<LegPlace> places = Places(leader);
  ASSERT_EQ(places.size(), 1u);
  ASSERT_NE(places[0].worker, nullptr);
  EXPECT_EQ(places[0].worker->type(), WorkerType::kDecode);
  FakeWorker* home = ByUrl(places[0].worker->url());
  ASSERT_NE(home, nullptr);

  std::vector<std::shared_ptr<Outcome>> siblings;
  for (int j = 1; j < 4; ++j) {
    siblings.push_back(std::make_shared<Outcome>());
    Start(absl::StrCat("req_", j), siblings.back(), places[0]);
  }
  ASSERT_TRUE(WaitFor([&] { return home->legs().held() == 4; }));
  std::vector<proto::DecodeRequest> legs = home->legs().decodes();
  ASSERT_EQ(legs.size(), 4u);
  EXPECT_EQ(legs[0].rid(), "req_0");
  EXPECT_FALSE(legs[0].bootstrap_host().empty());  // the leader is an ordinary PD leg
  EXPECT_NE(legs[0].bootstrap_room(), 0u);
  for (size_t k = 1; k < legs.size(); ++k) {
    EXPECT_EQ(legs[k].share_prompt_with(), "req_0");
    EXPECT_TRUE(legs[k].bootstrap_host().empty());
    EXPECT_EQ(legs[k].bootstrap_room(), 0u);
  }
  // One prefill leg for the four choices.
  ASSERT_EQ(prefill_->legs().prefills().size(), 1u);
  EXPECT_EQ(prefill_->legs().prefills()[0].rid(), "req_0");

  for (int j = 0; j < 4; ++j) home->legs().Release(absl::StrCat("req_", j));
  EXPECT_TRUE(Wait(leader).ok());
  for (auto& s : siblings) EXPECT_TRUE(Wait(s).ok());
}

TEST_F(DispatcherTest, RefusedPinnedLegGoesTheOrdinaryWayEvenWithoutRetries) {
  SetUpCluster(/*pd=*/true, /*max_retries=*/0);
  auto leader = std::make_shared<Outcome>();
  Start("req_0", leader, std::nullopt, /*leader=*/true);
  std::vector<LegPlace> places = Places(leader);
  ASSERT_EQ(places.size(), 1u);
  FakeWorker* home = ByUrl(places[0].worker->url());
  ASSERT_NE(home, nullptr);
  home->legs().set_refuse_shared(true);

  auto sibling = std::make_shared<Outcome>();
  Start("req_1", sibling, places[0]);
  // Its second try is an ordinary PD request: a prefill leg and a decode leg naming it.
  ASSERT_TRUE(WaitFor([&] { return prefill_->legs().prefills().size() == 2; }));
  EXPECT_EQ(prefill_->legs().prefills()[1].rid(), "req_1-retry1");
  FakeWorker* second = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    for (auto& w : workers_) {
      if (w->legs().holds("req_1-retry1")) second = w.get();
    }
    return second != nullptr;
  }));
  for (const proto::DecodeRequest& d : second->legs().decodes()) {
    if (d.rid() != "req_1-retry1") continue;
    EXPECT_TRUE(d.share_prompt_with().empty());
    EXPECT_FALSE(d.bootstrap_host().empty());
  }
  second->legs().Release("req_1-retry1");
  EXPECT_TRUE(Wait(sibling).ok());
  home->legs().Release("req_0");
  EXPECT_TRUE(Wait(leader).ok());
}

TEST_F(DispatcherTest, PinnedToAWorkerNoLongerAvailableGoesTheOrdinaryWay) {
  SetUpCluster(/*pd=*/false);
  auto leader = std::make_shared<Outcome>();
  Start("req_0", leader, std::nullopt, /*leader=*/true);
  std::vector<LegPlace> places = Places(leader);
  ASSERT_EQ(places.size(), 1u);
  FakeWorker* home = ByUrl(places[0].worker->url());
  ASSERT_NE(home, nullptr);
  ASSERT_TRUE(registry_->Drain(home->url()).ok());

  auto sibling = std::make_shared<Outcome>();
  Start("req_1", sibling, places[0]);
  FakeWorker* other = Other(home);
  ASSERT_TRUE(WaitFor([&] { return other->legs().holds("req_1"); }));
  EXPECT_TRUE(other->legs().decodes()[0].share_prompt_with().empty());
  EXPECT_EQ(home->legs().decodes().size(), 1u);  // the leader's leg only
  other->legs().Release("req_1");
  EXPECT_TRUE(Wait(sibling).ok());
  home->legs().Release("req_0");
  EXPECT_TRUE(Wait(leader).ok());
}

TEST_F(DispatcherTest, LeaderRetryIsReportedAsGoneThenANewPlace) {
  SetUpCluster(/*pd=*/false);
  for (auto& w : workers_) w->legs().set_fail_first_attempts(true);
  auto leader = std::make_shared<Outcome>();
  Start("req_0", leader, std::nullopt, /*leader=*/true);
  std::vector<LegPlace> places;
  const LegPlace* retry = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    places = Places(leader);
    for (const LegPlace& p : places) {
      if (p.worker != nullptr && p.attempt >= 1) return true;
    }
    return false;
  }));
  // Attempt 0's place and its end (in either order; neither when its leg failed before the
  // place was reported), then the retry's place.
  bool saw_first = false, saw_gone = false;
  for (const LegPlace& p : places) {
    if (p.attempt == 0 && p.worker != nullptr) saw_first = true;
    if (p.attempt == 0 && p.worker == nullptr) saw_gone = true;
    if (p.attempt >= 1 && p.worker != nullptr) retry = &p;
  }
  EXPECT_EQ(saw_first, saw_gone);
  ASSERT_NE(retry, nullptr);
  EXPECT_EQ(retry->rid, absl::StrCat("req_0-retry", retry->attempt));
  FakeWorker* w = ByUrl(retry->worker->url());
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(WaitFor([&] { return w->legs().holds(retry->rid); }));
  w->legs().Release(retry->rid);
  EXPECT_TRUE(Wait(leader).ok());
}

// Leases: a stream that started and went quiet is failed once the stall timeout passed, its leg
// cancelled and its worker reported; a leg that is only waiting on a healthy worker is not.
TEST_F(DispatcherTest, StreamThatGoesQuietFailsAfterTheStallTimeout) {
  SetUpCluster(/*pd=*/false, /*max_retries=*/2, /*stall_timeout=*/absl::Seconds(1));
  auto out = std::make_shared<Outcome>();
  const absl::Time start = absl::Now();
  Start("quiet", out);
  FakeWorker* home = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    for (auto& w : workers_) {
      if (w->legs().holds("quiet")) home = w.get();
    }
    return home != nullptr;
  }));
  home->legs().Emit("quiet");
  absl::Status s = Wait(out);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("--stall-timeout-secs"), std::string::npos) << s;
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(5));
  {
    std::lock_guard<std::mutex> lock(out->mu);
    EXPECT_EQ(out->events.size(), 1u);  // the token went out: not retried
  }
  EXPECT_TRUE(WaitFor([&] { return !home->legs().holds("quiet"); }));  // cancelled on the worker
  EXPECT_EQ(Other(home)->legs().decodes().size(), 0u);
}

TEST_F(DispatcherTest, WaitingLegOnAHealthyWorkerKeepsItsLeaseAndOnAnUnhealthyOneIsRetried) {
  SetUpCluster(/*pd=*/false, /*max_retries=*/2, /*stall_timeout=*/absl::Seconds(1));
  auto out = std::make_shared<Outcome>();
  Start("queued", out);
  FakeWorker* home = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    for (auto& w : workers_) {
      if (w->legs().holds("queued")) home = w.get();
    }
    return home != nullptr;
  }));
  // Twice the stall timeout with no event but a healthy worker: still running.
  EXPECT_FALSE(out->done.WaitForNotificationWithTimeout(absl::Milliseconds(2500)));
  EXPECT_TRUE(home->legs().holds("queued"));

  // The worker stops passing its health checks: the leg is failed and, no event having reached
  // the caller, retried on the other worker.
  home->set_serving(false);
  FakeWorker* other = Other(home);
  ASSERT_TRUE(WaitFor([&] { return other->legs().holds("queued-retry1"); }));
  EXPECT_TRUE(WaitFor([&] { return !home->legs().holds("queued"); }));
  other->legs().Release("queued-retry1");
  EXPECT_TRUE(Wait(out).ok());
}

TEST(MaySharePromptTest, OffForPromptLogprobsAndForNothingToDecode) {
  RoutedRequest r;
  r.input_ids = {1, 2, 3, 4};
  r.sampling.set_max_new_tokens(8);
  EXPECT_TRUE(MaySharePrompt(r));
  r.return_logprob = true;  // the chosen tokens' logprobs only (logprob_start_len -1)
  EXPECT_TRUE(MaySharePrompt(r));
  r.logprob_start_len = 0;  // echo with logprobs, or /generate logprob_start_len 0
  EXPECT_FALSE(MaySharePrompt(r));
  r.logprob_start_len = 3;  // the last prompt token
  EXPECT_FALSE(MaySharePrompt(r));
  r.logprob_start_len = 4;  // past the prompt: nothing of it is scored
  EXPECT_TRUE(MaySharePrompt(r));
  r.return_logprob = false;
  r.logprob_start_len = 0;
  EXPECT_TRUE(MaySharePrompt(r));
  r.sampling.set_max_new_tokens(0);
  EXPECT_FALSE(MaySharePrompt(r));
}

}  // namespace
}  // namespace tandem::router
