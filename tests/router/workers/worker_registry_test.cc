// WorkerRegistry against an in-process Worker service on loopback whose Health/GetLoad answers
// the test controls: registration errors, health thresholds, NOT_SERVING, ReportFailure, load
// polls (also right when a worker turns healthy), last_error cleared once healthy, the circuit
// breaker, metrics, and Stop() with probes that never answer.
#include "router/workers/worker_registry.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::router {
namespace {

// Polls `cond` until it holds or `timeout` passes; bounded, never a timing assertion.
bool WaitFor(const std::function<bool()>& cond,
             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class FakeWorker : public proto::Worker::CallbackService {
 public:
  // On `port` (0: any free one).
  explicit FakeWorker(int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeWorker() override { Shutdown(); }

  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      for (auto* r : hung_) r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutdown"));
      hung_.clear();
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const proto::HealthRequest*,
                                   proto::HealthResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock lock(&mu_);
    ++health_calls_;
    if (hang_) {
      hung_.push_back(reactor);
      return reactor;
    }
    if (status_ == proto::HealthResponse::SERVING) ++serving_answers_;
    response->set_status(status_);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* ctx, const proto::LoadRequest*,
                                    proto::LoadReport* response) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock lock(&mu_);
    *response = load_;
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  void set_status(proto::HealthResponse::Status s) {
    absl::MutexLock lock(&mu_);
    status_ = s;
  }
  void set_hang(bool hang) {
    absl::MutexLock lock(&mu_);
    hang_ = hang;
  }
  void set_load(int running, int queued, int64_t free_blocks) {
    absl::MutexLock lock(&mu_);
    load_.set_running_requests(running);
    load_.set_queued_requests(queued);
    load_.set_free_kv_blocks(free_blocks);
    load_.set_total_kv_blocks(100);
  }
  int health_calls() {
    absl::MutexLock lock(&mu_);
    return health_calls_;
  }
  int serving_answers() {
    absl::MutexLock lock(&mu_);
    return serving_answers_;
  }
  int hung() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(hung_.size());
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  proto::HealthResponse::Status status_ ABSL_GUARDED_BY(mu_) = proto::HealthResponse::SERVING;
  bool hang_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ServerUnaryReactor*> hung_ ABSL_GUARDED_BY(mu_);
  proto::LoadReport load_ ABSL_GUARDED_BY(mu_);
  int health_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int serving_answers_ ABSL_GUARDED_BY(mu_) = 0;
};

RegistryOptions FastOptions() {
  RegistryOptions o;
  o.health_check_interval = absl::Seconds(1);
  o.health_check_timeout = absl::Seconds(2);
  o.health_failure_threshold = 2;
  o.health_success_threshold = 2;
  o.worker_load_check_interval = absl::Seconds(1);
  o.cb_failure_threshold = 2;
  o.cb_success_threshold = 1;
  o.cb_timeout_duration = absl::Seconds(3600);
  return o;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(WorkerRegistryTest, AddRemoveDrainErrors) {
  MetricsRegistry metrics;
  WorkerRegistry registry(FastOptions(), &metrics);
  auto bad = registry.Add("ftp://h:1", WorkerType::kDecode, std::nullopt);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_port = registry.Add("h:1", WorkerType::kPrefill, 70000);
  EXPECT_EQ(bad_port.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.Add("h:1", WorkerType::kPrefill, 8998).ok());
  auto dup = registry.Add("h:1", WorkerType::kPrefill, 8998);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(std::string(dup.status().message()), "h:1"));
  EXPECT_EQ(registry.Remove("h:2").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Drain("h:2").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.List(WorkerType::kPrefill).size(), 1u);
  EXPECT_TRUE(registry.List(WorkerType::kDecode).empty());
  WorkerPtr w = registry.Find("h:1");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->bootstrap_port(), 8998);
  EXPECT_FALSE(w->Available());  // never probed: not healthy yet
  EXPECT_TRUE(registry.Remove("h:1").ok());
  EXPECT_EQ(registry.Find("h:1"), nullptr);
  EXPECT_TRUE(Contains(metrics.Render(), "tandem_router_worker_registered{worker=\"h:1\"} 0"));
}

TEST(WorkerRegistryTest, HealthThresholdsNotServingAndReportFailure) {
  FakeWorker fake;
  MetricsRegistry metrics;
  WorkerRegistry registry(FastOptions(), &metrics);
  auto added = registry.Add(fake.url(), WorkerType::kRegular, std::nullopt);
  ASSERT_TRUE(added.ok());
  WorkerPtr w = *added;
  registry.Start();
  // A new worker turns healthy on its first successful probe.
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));
  EXPECT_GE(fake.serving_answers(), 1);
  EXPECT_TRUE(
      Contains(metrics.Render(), "tandem_router_worker_healthy{worker=\"" + fake.url() + "\"} 1"));
  EXPECT_TRUE(
      Contains(metrics.Render(), "sgl_router_worker_health{worker=\"" + fake.url() + "\"} 1"));

  // NOT_SERVING: unhealthy at the first such answer.
  fake.set_status(proto::HealthResponse::NOT_SERVING);
  ASSERT_TRUE(WaitFor([&] { return !w->healthy(); }));
  EXPECT_TRUE(Contains(w->Snapshot().last_error, "NOT_SERVING"));

  // Back to SERVING: healthy again only after health_success_threshold (2) successes.
  int before = fake.serving_answers();
  fake.set_status(proto::HealthResponse::SERVING);
  ASSERT_TRUE(WaitFor([&] { return w->healthy(); }));
  EXPECT_GE(fake.serving_answers() - before, 2);

  // A leg saw it fail: unavailable at once, and a probe goes out at once.
  int calls = fake.health_calls();
  registry.ReportFailure(fake.url(), "decode leg: UNAVAILABLE");
  EXPECT_FALSE(w->Available());
  EXPECT_EQ(w->Snapshot().last_error, "decode leg: UNAVAILABLE");
  ASSERT_TRUE(WaitFor([&] { return fake.health_calls() > calls; }));
  ASSERT_TRUE(WaitFor([&] { return w->healthy(); }));

  // Drained: healthy but not chosen.
  ASSERT_TRUE(registry.Drain(fake.url()).ok());
  EXPECT_TRUE(registry.Available(WorkerType::kRegular).empty());
  EXPECT_TRUE(registry.Snapshot().at(0).draining);
  registry.Stop();
}

// One failed leg takes a worker out of rotation; with the default 60 s interval it must come back
// after kRecoveryProbeInterval-spaced probes (two successes here), not a minute later.
TEST(WorkerRegistryTest, ReportedFailureRecoversWithoutWaitingForTheInterval) {
  FakeWorker fake;
  RegistryOptions o = FastOptions();
  o.health_check_interval = absl::Seconds(60);
  o.worker_load_check_interval = absl::ZeroDuration();
  WorkerRegistry registry(o, nullptr);
  auto added = registry.Add(fake.url(), WorkerType::kPrefill, std::nullopt);
  ASSERT_TRUE(added.ok());
  WorkerPtr w = *added;
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));

  const int calls = fake.health_calls();
  registry.ReportFailure(fake.url(), "prefill leg: UNAVAILABLE");
  EXPECT_FALSE(w->Available());
  // Two recovery probes a second apart, well before the 60 s interval.
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }, std::chrono::seconds(10)))
      << "still out of rotation: waiting for the 60 s interval?";
  EXPECT_GE(fake.health_calls() - calls, o.health_success_threshold);

  // Healthy again: back to the regular interval, so no more probes for now.
  const int after = fake.health_calls();
  std::this_thread::sleep_for(3 * kRecoveryProbeInterval);
  EXPECT_EQ(fake.health_calls(), after);
  registry.Stop();
}

TEST(WorkerRegistryTest, DeadWorkerTurnsUnhealthyAfterTheFailureThreshold) {
  auto fake = std::make_unique<FakeWorker>();
  std::string url = fake->url();
  MetricsRegistry metrics;
  WorkerRegistry registry(FastOptions(), &metrics);
  WorkerPtr w = *registry.Add(url, WorkerType::kDecode, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->healthy(); }));
  fake.reset();  // the worker is gone
  auto& failed = metrics
                     .AddCounter("tandem_router_worker_health_checks_total",
                                 "Health checks sent, by result", {"worker", "result"})
                     .WithLabels({url, "failed"});
  ASSERT_TRUE(WaitFor([&] { return !w->healthy(); }));
  EXPECT_GE(failed.Value(), 2);  // health_failure_threshold
  EXPECT_FALSE(w->Snapshot().last_error.empty());
}

TEST(WorkerRegistryTest, LoadPollsFeedTheSnapshotAndMetrics) {
  FakeWorker fake;
  fake.set_load(3, 2, 7);
  MetricsRegistry metrics;
  WorkerRegistry registry(FastOptions(), &metrics);
  WorkerPtr w = *registry.Add(fake.url(), WorkerType::kRegular, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->load().running_requests() == 3; }));
  WorkerState s = registry.Snapshot().at(0);
  EXPECT_EQ(s.load.queued_requests(), 2);
  EXPECT_EQ(s.load.free_kv_blocks(), 7);
  std::string text = metrics.Render();
  EXPECT_TRUE(
      Contains(text, "tandem_router_worker_running_requests{worker=\"" + fake.url() + "\"} 3"));
  EXPECT_TRUE(
      Contains(text, "tandem_router_worker_free_kv_blocks{worker=\"" + fake.url() + "\"} 7"));
}

// A worker that comes up after the router: while it is down its last_error says why; once it is
// healthy the error is gone (an operator must not read a healthy worker as failing) and its load
// is polled at once, not at the next poll round (60 s here), so its KV blocks show from the start.
TEST(WorkerRegistryTest, StartupErrorClearsAndLoadIsPolledWhenTheWorkerTurnsHealthy) {
  int port = 0;
  {
    FakeWorker placeholder;  // a free port, then nothing listening on it
    port = placeholder.port();
  }
  RegistryOptions o = FastOptions();
  o.health_check_interval = absl::Seconds(60);
  o.worker_load_check_interval = absl::Seconds(60);
  WorkerRegistry registry(o, nullptr);
  WorkerPtr w =
      *registry.Add("http://127.0.0.1:" + std::to_string(port), WorkerType::kDecode, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return !w->Snapshot().last_error.empty(); }));
  EXPECT_FALSE(w->healthy());

  FakeWorker fake(port);
  ASSERT_EQ(fake.port(), port);
  fake.set_load(0, 0, 100);
  ASSERT_TRUE(WaitFor([&] { return w->healthy(); }, std::chrono::seconds(20)));
  ASSERT_TRUE(WaitFor([&] { return w->load().total_kv_blocks() == 100; }, std::chrono::seconds(20)))
      << "the load was not polled when the worker turned healthy";
  WorkerState s = w->Snapshot();
  EXPECT_EQ(s.load.free_kv_blocks(), 100);
  EXPECT_EQ(s.last_error, "");
  registry.Stop();
}

TEST(WorkerRegistryTest, FailedRequestsOpenTheCircuit) {
  FakeWorker fake;
  MetricsRegistry metrics;
  RegistryOptions o = FastOptions();
  o.health_check_interval =
      absl::Seconds(60);  // no passing health check half-opens it while we look
  WorkerRegistry registry(o, &metrics);
  WorkerPtr w = *registry.Add(fake.url(), WorkerType::kRegular, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));
  w->BeginRequest();
  w->BeginRequest();
  EXPECT_EQ(w->inflight(), 2);
  EXPECT_TRUE(
      Contains(metrics.Render(), "tandem_router_worker_inflight{worker=\"" + fake.url() + "\"} 2"));
  EXPECT_TRUE(
      Contains(metrics.Render(), "sgl_router_running_requests{worker=\"" + fake.url() + "\"} 2"));
  w->EndRequest(false);
  w->EndRequest(false);  // cb_failure_threshold = 2
  EXPECT_EQ(w->inflight(), 0);
  EXPECT_FALSE(w->Available());
  EXPECT_TRUE(w->healthy());
  EXPECT_EQ(w->Snapshot().circuit, "open");
  EXPECT_TRUE(Contains(metrics.Render(),
                       "tandem_router_worker_circuit_state{worker=\"" + fake.url() + "\"} 1"));
  const std::string text = metrics.Render();
  EXPECT_TRUE(Contains(text, "sgl_router_running_requests{worker=\"" + fake.url() + "\"} 0"));
  EXPECT_TRUE(
      Contains(text, "sgl_router_processed_requests_total{worker=\"" + fake.url() + "\"} 2"));
  // A removed worker's series stay, at 0.
  ASSERT_TRUE(registry.Remove(fake.url()).ok());
  EXPECT_TRUE(
      Contains(metrics.Render(), "sgl_router_worker_health{worker=\"" + fake.url() + "\"} 0"));
}

// sgl-router's PD counters follow the worker's role: a prefill worker's legs count as prefill
// requests, a decode worker's as decode requests, failures for the worker's fault as its errors;
// a regular (plain mode) worker has neither.
TEST(WorkerRegistryTest, PdCountersFollowTheWorkersRole) {
  FakeWorker prefill_fake, decode_fake, regular_fake;
  MetricsRegistry metrics;
  WorkerRegistry registry(FastOptions(), &metrics);
  WorkerPtr prefill = *registry.Add(prefill_fake.url(), WorkerType::kPrefill, 8998);
  WorkerPtr decode = *registry.Add(decode_fake.url(), WorkerType::kDecode, std::nullopt);
  WorkerPtr regular = *registry.Add(regular_fake.url(), WorkerType::kRegular, std::nullopt);
  for (const WorkerPtr& w : {prefill, decode, regular}) {
    w->BeginRequest();
    w->BeginRequest();
    w->EndRequest(true);
    w->EndRequest(false);
  }
  decode->BeginRequest();
  decode->EndRequest(true);
  const std::string text = metrics.Render();
  auto series = [](const char* name, const std::string& url) {
    return absl::StrCat(name, "{worker=\"", url, "\"} ");
  };
  EXPECT_TRUE(Contains(text, series("sgl_router_pd_prefill_requests_total", prefill->url()) + "2"))
      << text;
  EXPECT_TRUE(Contains(text, series("sgl_router_pd_prefill_errors_total", prefill->url()) + "1"));
  EXPECT_TRUE(Contains(text, series("sgl_router_pd_decode_requests_total", decode->url()) + "3"));
  EXPECT_TRUE(Contains(text, series("sgl_router_pd_decode_errors_total", decode->url()) + "1"));
  EXPECT_FALSE(Contains(text, series("sgl_router_pd_decode_requests_total", prefill->url())));
  EXPECT_FALSE(Contains(text, series("sgl_router_pd_prefill_requests_total", decode->url())));
  for (const char* name :
       {"sgl_router_pd_prefill_requests_total", "sgl_router_pd_decode_requests_total",
        "sgl_router_pd_prefill_errors_total", "sgl_router_pd_decode_errors_total"}) {
    EXPECT_FALSE(Contains(text, series(name, regular->url()))) << name;
  }
}

// The breakers' clock is a test's (never advanced unless the test says so), so only health checks
// can half-open a circuit here: cb_timeout_duration is an hour.
class SteppedClock {
 public:
  CircuitBreaker::NowFn Fn() {
    return [this] { return MonoClock::time_point(MonoClock::duration(ns_.load())); };
  }
  void Advance(std::chrono::seconds d) {
    ns_ += std::chrono::duration_cast<MonoClock::duration>(d).count();
  }

 private:
  std::atomic<int64_t> ns_{
      std::chrono::duration_cast<MonoClock::duration>(std::chrono::hours(1)).count()};
};

TEST(WorkerRegistryTest, PassingHealthCheckHalfOpensAnOpenCircuit) {
  FakeWorker fake;
  SteppedClock clock;
  RegistryOptions o = FastOptions();  // health checks every second
  o.cb_success_threshold = 2;
  o.now = clock.Fn();
  MetricsRegistry metrics;
  WorkerRegistry registry(o, &metrics);
  WorkerPtr w = *registry.Add(fake.url(), WorkerType::kRegular, std::nullopt);
  const std::string gauge = "tandem_router_worker_circuit_state{worker=\"" + fake.url() + "\"} ";
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }));

  // Failed requests open the circuit; the next passing health check half-opens it, an hour before
  // the open timeout would.
  w->EndRequest(false);
  w->EndRequest(false);  // cb_failure_threshold = 2
  ASSERT_TRUE(
      WaitFor([&] { return w->Snapshot().circuit == "half_open"; }, std::chrono::seconds(5)))
      << "the open circuit waited for its timeout";
  EXPECT_TRUE(w->Available());
  EXPECT_TRUE(Contains(metrics.Render(), gauge + "2"));

  // The trial fails: open again, and health checks within the interval leave it open.
  w->EndRequest(false);
  EXPECT_EQ(w->Snapshot().circuit, "open");
  EXPECT_FALSE(w->Available());
  const int calls = fake.serving_answers();
  ASSERT_TRUE(WaitFor([&] { return fake.serving_answers() >= calls + 2; }));
  EXPECT_EQ(w->Snapshot().circuit, "open");
  EXPECT_TRUE(Contains(metrics.Render(), gauge + "1"));

  // An interval later a passing health check brings the next trial; two successes close it.
  clock.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(WaitFor([&] { return w->Available(); }, std::chrono::seconds(5)));
  EXPECT_EQ(w->Snapshot().circuit, "half_open");
  w->EndRequest(true);
  EXPECT_EQ(w->Snapshot().circuit, "half_open");
  w->EndRequest(true);
  EXPECT_EQ(w->Snapshot().circuit, "closed");
  EXPECT_TRUE(Contains(metrics.Render(), gauge + "0"));

  // Failing health checks leave an open circuit to its timeout.
  clock.Advance(std::chrono::seconds(10));
  fake.set_status(proto::HealthResponse::NOT_SERVING);
  ASSERT_TRUE(WaitFor([&] { return !w->healthy(); }));
  w->EndRequest(false);
  w->EndRequest(false);
  const int failing = fake.health_calls();
  ASSERT_TRUE(WaitFor([&] { return fake.health_calls() >= failing + 2; }));
  EXPECT_EQ(w->Snapshot().circuit, "open");
  clock.Advance(absl::ToChronoSeconds(o.cb_timeout_duration));
  EXPECT_EQ(w->Snapshot().circuit, "half_open");
  registry.Stop();
}

TEST(WorkerRegistryTest, StopCancelsProbesThatNeverAnswer) {
  FakeWorker fake;
  fake.set_hang(true);
  RegistryOptions o = FastOptions();
  o.health_check_timeout = absl::Seconds(3600);
  WorkerRegistry registry(o, nullptr);
  WorkerPtr w = *registry.Add(fake.url(), WorkerType::kRegular, std::nullopt);
  registry.Start();
  ASSERT_TRUE(WaitFor([&] { return fake.hung() >= 1; }));
  registry.Stop();  // returns only once the probe's callback ran
  EXPECT_FALSE(w->healthy());
  registry.Stop();  // idempotent
}

}  // namespace
}  // namespace tandem::router
