// The Dispatcher's failure rules (router/dispatcher.h, DESIGN.md "Failure rules"), one test per
// rule, against in-memory legs (FakeLink) and a ManualClock: retries before the first token with
// a new pair and a new room, none after it, the other leg cancelled and the room aborted on both
// workers at once, the request deadline, client cancel, caller errors neither retried nor counted
// by the circuit breaker, the stall lease, and the breaker's half-open recovery with its cap on
// trial requests. No sockets, no sleeps: time moves only by ManualClock::Advance, and every
// callback runs on the test thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/manual_clock.h"
#include "common/metrics.h"
#include "router/dispatch_run.h"
#include "router/dispatcher.h"
#include "router/policy/simple_policies.h"
#include "router/router_metrics.h"
#include "router/workers/leg.h"
#include "router/workers/worker_registry.h"
#include "tests/router/fake_legs.h"

namespace tandem::router {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using fakes::FakeLeg;
using fakes::FakeLink;
using fakes::LegBook;

// One run's outcome.
struct Outcome {
  std::vector<proto::DecodeEvent> events;
  std::optional<absl::Status> status;
};

struct ClusterShape {
  bool pd = true;
  int prefills = 2;
  int decodes = 2;  // regular workers in plain mode
  int max_retries = 2;
  int backoff_ms = 100;
  absl::Duration request_timeout = absl::Seconds(600);
  absl::Duration stall_timeout = absl::ZeroDuration();
  int cb_failure_threshold = 10;
  int cb_success_threshold = 3;
};

class DispatcherRulesTest : public ::testing::Test {
 protected:
  void SetUpCluster(const ClusterShape& shape) {
    shape_ = shape;
    RegistryOptions ro;
    ro.health_success_threshold = 1;
    ro.health_check_interval = absl::Seconds(10);
    ro.cb_failure_threshold = shape.cb_failure_threshold;
    ro.cb_success_threshold = shape.cb_success_threshold;
    ro.cb_half_open_max_trials = 1;
    ro.now = [this] { return clock_.Now(); };
    registry_ = std::make_unique<WorkerRegistry>(ro, &metrics_);  // never started: no probes
    int port = 31001;
    auto add = [&](WorkerType type, std::optional<int> bootstrap) {
      // Never dialled: the legs go to the FakeLink and the registry loop is not started.
      const std::string url = absl::StrCat("http://127.0.0.1:", port++);
      ASSERT_TRUE(
          registry_->Add(url, type, bootstrap, std::make_shared<FakeLink>(url, &book_, &clock_))
              .ok());
      registry_->RecordHealthCheck(url, /*serving=*/true);
      (type == WorkerType::kPrefill ? prefill_urls_ : decode_urls_).push_back(url);
    };
    if (shape.pd) {
      for (int i = 0; i < shape.prefills; ++i) add(WorkerType::kPrefill, 8998);
      for (int i = 0; i < shape.decodes; ++i) add(WorkerType::kDecode, std::nullopt);
    } else {
      for (int i = 0; i < shape.decodes; ++i) add(WorkerType::kRegular, std::nullopt);
    }
    router_metrics_ = std::make_unique<RouterMetrics>(&metrics_);
    prefill_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    decode_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    DispatchOptions options;
    options.pd_mode = shape.pd;
    options.backoff.max_retries = shape.max_retries;
    options.backoff.initial_backoff = absl::Milliseconds(shape.backoff_ms);
    options.backoff.max_backoff = absl::Milliseconds(shape.backoff_ms);
    options.request_timeout = shape.request_timeout;
    options.stall_timeout = shape.stall_timeout;
    dispatcher_ =
        std::make_unique<Dispatcher>(options, registry_.get(), prefill_policy_.get(),
                                     decode_policy_.get(), router_metrics_.get(), &clock_);
  }

  void TearDown() override {
    // End every leg still running so that no callback holds a run, then drop what is scheduled.
    // The runs' Outcomes were locals of the test body and are gone: their callbacks must not run.
    tearing_down_ = true;
    for (const LegBook::Started& s : book_.legs) s.leg->Fail(absl::CancelledError("teardown"));
    clock_.RunDue();
    clock_.Clear();
    dispatcher_.reset();
  }

  std::shared_ptr<DispatchRun> Start(const std::string& rid, Outcome* out, bool stream = true) {
    auto r = std::make_shared<RoutedRequest>();
    r->rid = rid;
    r->input_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    r->sampling.set_max_new_tokens(4);
    r->stream = stream;
    return dispatcher_->Start(
        r,
        [this, out](const proto::DecodeEvent& e) {
          if (!tearing_down_) out->events.push_back(e);
        },
        [this, out](absl::Status s) {
          if (tearing_down_) return;
          EXPECT_FALSE(out->status.has_value()) << "on_done ran twice";
          out->status = std::move(s);
        });
  }
  // Past any backoff of the default shape (100 ms plus jitter).
  void PastBackoff() { clock_.Advance(milliseconds(500)); }

  WorkerState StateOf(const std::string& url) {
    for (const WorkerState& w : registry_->Snapshot()) {
      if (w.url == url) return w;
    }
    ADD_FAILURE() << "no worker " << url;
    return {};
  }

  ManualClock clock_;
  MetricsRegistry metrics_;
  ClusterShape shape_;
  LegBook book_;
  std::vector<std::string> prefill_urls_;
  std::vector<std::string> decode_urls_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RouterMetrics> router_metrics_;
  std::unique_ptr<Policy> prefill_policy_;
  std::unique_ptr<Policy> decode_policy_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::atomic<bool> tearing_down_{false};
};

TEST_F(DispatcherRulesTest, BeforeTheFirstTokenAFailureIsRetriedWithANewPairAndANewRoom) {
  SetUpCluster({});
  Outcome out;
  Start("r1", &out);
  ASSERT_EQ(book_.legs.size(), 2u);  // both legs at once
  const LegBook::Started first_prefill = book_.Named("r1")[0];
  const LegBook::Started first_decode = book_.Named("r1")[1];
  ASSERT_TRUE(first_prefill.prefill);
  ASSERT_FALSE(first_decode.prefill);
  EXPECT_EQ(first_prefill.room, first_decode.room);

  first_decode.leg->Fail(absl::UnavailableError("connection reset"));
  EXPECT_EQ(first_prefill.leg->cancel_calls_, 1);  // the other leg, at once
  EXPECT_FALSE(out.status.has_value());
  PastBackoff();

  std::vector<LegBook::Started> retry = book_.Named("r1-retry1");
  ASSERT_EQ(retry.size(), 2u);
  EXPECT_NE(retry[0].room, first_decode.room);  // a new room
  EXPECT_EQ(retry[0].room, retry[1].room);
  // A new pair: the failed decode worker was reported (UNAVAILABLE) and is out of rotation; the
  // prefill worker is the round robin's next.
  EXPECT_NE(retry[1].worker, first_decode.worker);
  EXPECT_NE(retry[0].worker, first_prefill.worker);
  EXPECT_FALSE(StateOf(first_decode.worker).healthy);

  retry[0].leg->Answer();
  retry[1].leg->Answer();
  ASSERT_TRUE(out.status.has_value());
  EXPECT_TRUE(out.status->ok()) << *out.status;
  EXPECT_EQ(out.events.size(), 1u);
}

TEST_F(DispatcherRulesTest, AfterTheFirstEventAFailureEndsTheRunWithAnError) {
  SetUpCluster({});
  Outcome out;
  Start("r1", &out);
  book_.Prefill("r1")->Answer();
  book_.Decode("r1")->Emit(5);
  ASSERT_EQ(out.events.size(), 1u);
  book_.Decode("r1")->Fail(absl::UnavailableError("connection reset"));
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kUnavailable) << *out.status;
  PastBackoff();
  clock_.Advance(seconds(60));
  EXPECT_EQ(book_.legs.size(), 2u);  // never retried
  EXPECT_EQ(out.events.size(), 1u);
}

TEST_F(DispatcherRulesTest, WhenOneLegFailsTheOtherIsCancelledAtOnceAndTheRoomAbortedOnBoth) {
  ClusterShape shape;
  shape.max_retries = 0;
  SetUpCluster(shape);
  Outcome out;
  Start("r1", &out);
  const std::shared_ptr<FakeLeg> prefill = book_.Prefill("r1");
  const std::shared_ptr<FakeLeg> decode = book_.Decode("r1");
  const uint64_t room = book_.Named("r1")[0].room;
  prefill->Fail(absl::InternalError("out of memory"));
  // At once: no time passed, nothing run from the clock.
  EXPECT_EQ(decode->cancel_calls_, 1);
  EXPECT_TRUE(book_.RoomAborted(prefill->worker_, room));
  EXPECT_TRUE(book_.RoomAborted(decode->worker_, room));
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kInternal) << *out.status;
  EXPECT_TRUE(absl::StrContains(out.status->message(), "prefill")) << *out.status;
  clock_.RunDue();  // the cancelled leg ends
  EXPECT_EQ(decode->state(), LegState::kEnded);
  EXPECT_EQ(decode->status_->code(), absl::StatusCode::kCancelled);
}

TEST_F(DispatcherRulesTest, RequestDeadlineEndsTheRunDeadlineExceeded) {
  ClusterShape shape;
  shape.request_timeout = absl::Seconds(30);
  SetUpCluster(shape);
  Outcome out;
  Start("r1", &out);
  const uint64_t room = book_.Named("r1")[0].room;
  clock_.Advance(seconds(29));
  EXPECT_FALSE(out.status.has_value());
  clock_.Advance(seconds(1));
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kDeadlineExceeded) << *out.status;
  EXPECT_EQ(book_.Prefill("r1")->cancel_calls_, 1);
  EXPECT_EQ(book_.Decode("r1")->cancel_calls_, 1);
  EXPECT_TRUE(book_.RoomAborted(book_.Prefill("r1")->worker_, room));
  EXPECT_TRUE(book_.RoomAborted(book_.Decode("r1")->worker_, room));
  PastBackoff();
  EXPECT_EQ(book_.legs.size(), 2u);  // not retried
}

TEST_F(DispatcherRulesTest, DeadlineDuringABackoffEndsTheRun) {
  ClusterShape shape;
  shape.request_timeout = absl::Seconds(2);
  shape.backoff_ms = 5000;  // the deadline falls within the backoff
  SetUpCluster(shape);
  Outcome out;
  Start("r1", &out);
  book_.Decode("r1")->Fail(absl::UnavailableError("gone"));
  EXPECT_FALSE(out.status.has_value());
  clock_.Advance(seconds(2));
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kDeadlineExceeded) << *out.status;
  clock_.Advance(seconds(10));
  EXPECT_TRUE(book_.Named("r1-retry1").empty());
}

TEST_F(DispatcherRulesTest, ClientCancelCancelsTheLegsAbortsTheRoomAndEndsCancelled) {
  SetUpCluster({});
  Outcome out;
  std::shared_ptr<DispatchRun> run = Start("r1", &out);
  const uint64_t room = book_.Named("r1")[0].room;
  run->Cancel();
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(book_.Prefill("r1")->cancel_calls_, 1);
  EXPECT_EQ(book_.Decode("r1")->cancel_calls_, 1);
  EXPECT_TRUE(book_.RoomAborted(book_.Prefill("r1")->worker_, room));
  EXPECT_TRUE(book_.RoomAborted(book_.Decode("r1")->worker_, room));
  clock_.RunDue();
  run->Cancel();  // idempotent
  PastBackoff();
  EXPECT_EQ(book_.legs.size(), 2u);
}

TEST_F(DispatcherRulesTest, PlainModeCancelAbortsTheRid) {
  ClusterShape shape;
  shape.pd = false;
  SetUpCluster(shape);
  Outcome out;
  std::shared_ptr<DispatchRun> run = Start("r1", &out);
  ASSERT_EQ(book_.legs.size(), 1u);
  run->Cancel();
  EXPECT_EQ(book_.Decode("r1")->cancel_calls_, 1);
  EXPECT_TRUE(book_.RidAborted(book_.Decode("r1")->worker_, "r1"));
  EXPECT_EQ(out.status->code(), absl::StatusCode::kCancelled);
}

TEST_F(DispatcherRulesTest, CallerErrorsAreNeitherRetriedNorCountedByTheCircuitBreaker) {
  ClusterShape shape;
  shape.pd = false;
  shape.decodes = 1;
  shape.cb_failure_threshold = 1;  // one counted failure would open the circuit
  SetUpCluster(shape);
  const std::string worker = decode_urls_[0];
  int n = 0;
  for (absl::Status error : {absl::InvalidArgumentError("bad sampling params"),
                             absl::FailedPreconditionError("no bootstrap host"),
                             absl::OutOfRangeError("prompt too long")}) {
    const std::string rid = absl::StrCat("caller-", n++);
    Outcome out;
    Start(rid, &out);
    book_.Decode(rid)->Fail(error);
    ASSERT_TRUE(out.status.has_value());
    EXPECT_EQ(out.status->code(), error.code()) << *out.status;
    PastBackoff();
    EXPECT_TRUE(book_.Named(rid + "-retry1").empty()) << error;
    EXPECT_EQ(StateOf(worker).circuit, "closed") << error;
    EXPECT_TRUE(registry_->Find(worker)->Available()) << error;
  }
  // The control: a worker's own fault is counted, and opens the circuit at threshold 1.
  Outcome out;
  Start("fault", &out);
  book_.Decode("fault")->Fail(absl::InternalError("kernel crashed"));
  EXPECT_EQ(StateOf(worker).circuit, "open");
  EXPECT_FALSE(registry_->Find(worker)->Available());
}

TEST_F(DispatcherRulesTest, StallBeforeTheFirstTokenIsRetriedOnlyOnceTheWorkerFailsHealthChecks) {
  ClusterShape shape;
  shape.pd = false;
  shape.stall_timeout = absl::Seconds(5);
  SetUpCluster(shape);
  Outcome out;
  Start("r1", &out);
  const std::shared_ptr<FakeLeg> first = book_.Decode("r1");
  // Queued or prefilling on a healthy worker: the lease holds however long it takes.
  clock_.Advance(seconds(20));
  EXPECT_FALSE(out.status.has_value());
  EXPECT_EQ(first->cancel_calls_, 0);
  // Its worker stops passing health checks: failed at the next look (within a second) and,
  // no token having reached the client, retried elsewhere.
  registry_->RecordHealthCheck(first->worker_, /*serving=*/false);
  clock_.Advance(seconds(1));
  EXPECT_EQ(first->cancel_calls_, 1);
  EXPECT_TRUE(book_.RidAborted(first->worker_, "r1"));
  PastBackoff();
  const std::shared_ptr<FakeLeg> retry = book_.Decode("r1-retry1");
  ASSERT_NE(retry, nullptr);
  EXPECT_NE(retry->worker_, first->worker_);
  retry->Answer();
  ASSERT_TRUE(out.status.has_value());
  EXPECT_TRUE(out.status->ok()) << *out.status;
}

TEST_F(DispatcherRulesTest, StallAfterTheFirstTokenEndsTheRunWithAnError) {
  ClusterShape shape;
  shape.pd = false;
  shape.stall_timeout = absl::Seconds(5);
  SetUpCluster(shape);
  Outcome out;
  Start("r1", &out);
  const std::shared_ptr<FakeLeg> leg = book_.Decode("r1");
  clock_.Advance(seconds(1));
  leg->Emit(5);
  clock_.Advance(seconds(4));  // 4 s of silence: within the lease
  EXPECT_FALSE(out.status.has_value());
  leg->Emit(6);  // progress renews it
  clock_.Advance(seconds(4));
  EXPECT_FALSE(out.status.has_value());
  clock_.Advance(seconds(1));  // 5 s since the last event
  ASSERT_TRUE(out.status.has_value());
  EXPECT_EQ(out.status->code(), absl::StatusCode::kUnavailable) << *out.status;
  EXPECT_TRUE(absl::StrContains(out.status->message(), "--stall-timeout-secs")) << *out.status;
  EXPECT_EQ(leg->cancel_calls_, 1);
  EXPECT_TRUE(book_.RidAborted(leg->worker_, "r1"));
  EXPECT_FALSE(StateOf(leg->worker_).healthy);  // reported to the registry
  PastBackoff();
  EXPECT_EQ(book_.legs.size(), 1u);
  EXPECT_EQ(out.events.size(), 2u);
}

TEST_F(DispatcherRulesTest, CircuitHalfOpensOnAPassingHealthCheckAndAdmitsOneTrialAtATime) {
  ClusterShape shape;
  shape.pd = false;
  shape.decodes = 1;
  shape.max_retries = 0;
  shape.cb_failure_threshold = 1;
  shape.cb_success_threshold = 2;
  SetUpCluster(shape);
  const std::string worker = decode_urls_[0];
  {
    Outcome out;
    Start("fault", &out);
    book_.Decode("fault")->Fail(absl::InternalError("kernel crashed"));
  }
  EXPECT_EQ(StateOf(worker).circuit, "open");
  Outcome refused;
  Start("while-open", &refused);
  ASSERT_TRUE(refused.status.has_value());
  EXPECT_EQ(refused.status->code(), absl::StatusCode::kUnavailable);

  // Long before the 60 s open timeout, a passing health check gives it its trial.
  clock_.Advance(seconds(2));
  registry_->RecordHealthCheck(worker, /*serving=*/true);
  EXPECT_EQ(StateOf(worker).circuit, "half_open");
  Outcome trial;
  Start("trial-1", &trial);
  ASSERT_NE(book_.Decode("trial-1"), nullptr);
  // One trial in flight: no second request until it ended.
  Outcome second;
  Start("second", &second);
  ASSERT_TRUE(second.status.has_value());
  EXPECT_EQ(second.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(book_.Decode("second"), nullptr);

  book_.Decode("trial-1")->Answer();
  EXPECT_TRUE(trial.status->ok());
  EXPECT_EQ(StateOf(worker).circuit, "half_open");  // one of two successes
  Outcome trial2;
  Start("trial-2", &trial2);
  ASSERT_NE(book_.Decode("trial-2"), nullptr);
  book_.Decode("trial-2")->Answer();
  EXPECT_EQ(StateOf(worker).circuit, "closed");
  // Closed: requests in flight are no longer capped.
  Outcome a, b;
  Start("a", &a);
  Start("b", &b);
  EXPECT_NE(book_.Decode("a"), nullptr);
  EXPECT_NE(book_.Decode("b"), nullptr);
}

TEST_F(DispatcherRulesTest, AFailedTrialReopensTheCircuit) {
  ClusterShape shape;
  shape.pd = false;
  shape.decodes = 1;
  shape.max_retries = 0;
  shape.cb_failure_threshold = 1;
  SetUpCluster(shape);
  const std::string worker = decode_urls_[0];
  Outcome fault, trial;
  Start("fault", &fault);
  book_.Decode("fault")->Fail(absl::InternalError("kernel crashed"));
  registry_->RecordHealthCheck(worker, /*serving=*/true);
  Start("trial", &trial);
  book_.Decode("trial")->Fail(absl::InternalError("kernel crashed again"));
  EXPECT_EQ(StateOf(worker).circuit, "open");
  // The next passing health check within the health-check interval does not half-open it again.
  clock_.Advance(seconds(1));
  registry_->RecordHealthCheck(worker, /*serving=*/true);
  EXPECT_EQ(StateOf(worker).circuit, "open");
  clock_.Advance(seconds(10));
  registry_->RecordHealthCheck(worker, /*serving=*/true);
  EXPECT_EQ(StateOf(worker).circuit, "half_open");
}

TEST(RunStateTest, TransitionsFollowTheTable) {
  using S = RunState;
  using E = RunEvent;
  EXPECT_EQ(NextRunState(S::kRouting, E::kLegsSent), S::kWaiting);
  EXPECT_EQ(NextRunState(S::kWaiting, E::kDelivered), S::kStreaming);
  EXPECT_EQ(NextRunState(S::kRouting, E::kDelivered), S::kStreaming);  // a leg raced its sender
  EXPECT_EQ(NextRunState(S::kStreaming, E::kLegsSent), S::kStreaming);
  EXPECT_EQ(NextRunState(S::kWaiting, E::kRetryScheduled), S::kBackoff);
  EXPECT_EQ(NextRunState(S::kRouting, E::kRetryScheduled), S::kBackoff);
  EXPECT_EQ(NextRunState(S::kStreaming, E::kRetryScheduled), S::kStreaming);  // never retried
  EXPECT_EQ(NextRunState(S::kBackoff, E::kRetryDue), S::kRouting);
  EXPECT_EQ(NextRunState(S::kWaiting, E::kRetryDue), S::kWaiting);
  for (S s : {S::kRouting, S::kWaiting, S::kStreaming, S::kBackoff, S::kDone}) {
    EXPECT_EQ(NextRunState(s, E::kEnded), S::kDone) << RunStateName(s);
  }
  for (E e : {E::kLegsSent, E::kDelivered, E::kRetryScheduled, E::kRetryDue}) {
    EXPECT_EQ(NextRunState(S::kDone, e), S::kDone);  // final
  }
}

}  // namespace
}  // namespace tandem::router
