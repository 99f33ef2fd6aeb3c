// The circuit breaker's state machine, driven by an injected clock (no sleeps), including the
// half_open that a passing health check brings at once.
#include "router/workers/circuit_breaker.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tandem::router {
namespace {

using std::chrono::seconds;

class ManualClock {
 public:
  MonoClock::time_point Now() const { return now_; }
  void Advance(MonoClock::duration d) { now_ += d; }
  CircuitBreaker::NowFn Fn() {
    return [this] { return now_; };
  }

 private:
  MonoClock::time_point now_ = MonoClock::time_point() + std::chrono::hours(1);
};

CircuitBreakerOptions Options() {
  CircuitBreakerOptions o;
  o.failure_threshold = 3;
  o.success_threshold = 2;
  o.timeout = seconds(10);
  o.window = seconds(60);
  o.health_check_gap = seconds(5);
  return o;
}

TEST(CircuitBreakerTest, OpensAfterConsecutiveFailures) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  cb.RecordFailure();
  cb.RecordFailure();
  EXPECT_TRUE(cb.CanExecute());
  cb.RecordFailure();
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_FALSE(cb.CanExecute());
  EXPECT_EQ(cb.times_opened(), 1);
}

TEST(CircuitBreakerTest, SuccessResetsTheFailureStreak) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  cb.RecordFailure();
  cb.RecordFailure();
  cb.RecordSuccess();
  cb.RecordFailure();
  cb.RecordFailure();
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  EXPECT_EQ(cb.consecutive_failures(), 2);
}

TEST(CircuitBreakerTest, FailuresOutsideTheWindowStartOver) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  cb.RecordFailure();
  cb.RecordFailure();
  clock.Advance(seconds(61));
  cb.RecordFailure();
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  EXPECT_EQ(cb.consecutive_failures(), 1);
}

TEST(CircuitBreakerTest, OpenTurnsHalfOpenAfterTheTimeoutThenClosesOnSuccesses) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  clock.Advance(seconds(9));
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_FALSE(cb.CanExecute());
  clock.Advance(seconds(1));
  EXPECT_TRUE(cb.CanExecute());
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
  cb.RecordSuccess();
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
  cb.RecordSuccess();
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  // Closed again with a fresh streak: it takes the full threshold to open.
  cb.RecordFailure();
  cb.RecordFailure();
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
}

TEST(CircuitBreakerTest, HalfOpenFailureReopensAndRestartsTheTimeout) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  clock.Advance(seconds(10));
  ASSERT_EQ(cb.state(), CircuitState::kHalfOpen);
  cb.RecordSuccess();
  cb.RecordFailure();
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_EQ(cb.times_opened(), 2);
  clock.Advance(seconds(9));
  EXPECT_FALSE(cb.CanExecute());
  clock.Advance(seconds(1));
  EXPECT_TRUE(cb.CanExecute());
}

TEST(CircuitBreakerTest, ResultsWhileOpenDoNotCloseIt) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  cb.RecordSuccess();
  cb.RecordSuccess();
  cb.RecordSuccess();
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
}

TEST(CircuitBreakerTest, PassingHealthCheckHalfOpensAtOnceThenSuccessesClose) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  ASSERT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_TRUE(cb.HealthCheckPassed());  // no time has passed: the health check is the probe
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
  EXPECT_TRUE(cb.CanExecute());
  cb.RecordSuccess();
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
  cb.RecordSuccess();  // success_threshold = 2
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  EXPECT_EQ(cb.times_opened(), 1);
}

TEST(CircuitBreakerTest, HealthChecksNeverCloseOrCountAsSuccesses) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  EXPECT_FALSE(cb.HealthCheckPassed());  // closed stays closed
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  ASSERT_TRUE(cb.HealthCheckPassed());
  clock.Advance(seconds(60));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(cb.HealthCheckPassed());
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
  EXPECT_EQ(cb.consecutive_successes(), 0);
}

TEST(CircuitBreakerTest, WithoutPassingHealthChecksOpenWaitsForTheTimeout) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  // Failing health checks never reach the breaker: only the timeout half-opens it.
  clock.Advance(seconds(9));
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_FALSE(cb.CanExecute());
  clock.Advance(seconds(1));
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
}

// A worker whose health check passes while its requests fail: each passing check (at most one per
// health_check_gap) lets one half_open trial through, and the trial's failure reopens it.
TEST(CircuitBreakerTest, HealthyButFailingWorkerGetsOneTrialPerGap) {
  ManualClock clock;
  CircuitBreaker cb(Options(), clock.Fn());
  for (int i = 0; i < 3; ++i) cb.RecordFailure();
  ASSERT_TRUE(cb.HealthCheckPassed());
  cb.RecordFailure();  // the trial fails
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  EXPECT_EQ(cb.times_opened(), 2);
  // Health checks within the gap (recovery probes, say) do not half-open it again.
  clock.Advance(seconds(4));
  EXPECT_FALSE(cb.HealthCheckPassed());
  EXPECT_FALSE(cb.CanExecute());
  clock.Advance(seconds(1));
  EXPECT_TRUE(cb.HealthCheckPassed());
  EXPECT_TRUE(cb.CanExecute());
  cb.RecordFailure();
  EXPECT_EQ(cb.times_opened(), 3);
  // The reopen restarted the timeout: 10 s from this failure, not from the first opening.
  clock.Advance(seconds(9));
  EXPECT_EQ(cb.state(), CircuitState::kOpen);
  clock.Advance(seconds(1));
  EXPECT_EQ(cb.state(), CircuitState::kHalfOpen);
}

TEST(CircuitBreakerTest, DisabledIsAlwaysClosed) {
  ManualClock clock;
  CircuitBreakerOptions o = Options();
  o.disabled = true;
  CircuitBreaker cb(o, clock.Fn());
  for (int i = 0; i < 100; ++i) cb.RecordFailure();
  EXPECT_FALSE(cb.HealthCheckPassed());
  EXPECT_TRUE(cb.CanExecute());
  EXPECT_EQ(cb.state(), CircuitState::kClosed);
}

TEST(CircuitBreakerTest, StateNames) {
  EXPECT_STREQ(CircuitStateName(CircuitState::kClosed), "closed");
  EXPECT_STREQ(CircuitStateName(CircuitState::kOpen), "open");
  EXPECT_STREQ(CircuitStateName(CircuitState::kHalfOpen), "half_open");
}

}  // namespace
}  // namespace tandem::router
