// CircuitBreaker: one worker's breaker, as SGLang's router models it.
//
//   closed --(failure_threshold consecutive failures)--> open
//   open --(timeout elapsed; seen by the next CanExecute/state)--> half_open
//   open --(a passing health check: HealthCheckPassed)--> half_open at once
//   half_open --(success_threshold consecutive successes)--> closed
//
// While half_open at most half_open_max_trials requests are in flight at once (trials counted
// by OnRequestStart and ended by RecordSuccess/RecordFailure): a worker that just came back
// gets a trickle, not the whole backlog, until it proved itself.
//   half_open --(any failure)--> open (the timeout starts again)
//
// In closed state a failure streak whose last failure is older than `window` starts over, so
// rare failures spread over hours never open the circuit. A disabled breaker is always closed.
// A passing health check is the probe that the timeout otherwise stands in for: a worker that
// answers again gets its half_open trial at once, not a whole timeout later. It never closes the
// circuit: only the trial's successes do, so a worker whose health check passes while its
// requests fail goes open -> half_open -> open, at most once per `health_check_gap`.
// Time comes from an injected clock (tests step it; production uses MonoNow).
//
// Thread-safety: thread-compatible; the owner (Worker) serializes calls under its mutex.
#ifndef TANDEM_ROUTER_WORKERS_CIRCUIT_BREAKER_H_
#define TANDEM_ROUTER_WORKERS_CIRCUIT_BREAKER_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "common/clock.h"

namespace tandem::router {

struct CircuitBreakerOptions {
  int failure_threshold = 10;
  int success_threshold = 3;
  MonoClock::duration timeout = std::chrono::seconds(60);
  MonoClock::duration window = std::chrono::seconds(120);
  // The least time between two health-check-made half_opens (the owner's health-check
  // interval): it bounds the trials a worker that passes health checks but fails requests gets.
  MonoClock::duration health_check_gap = MonoClock::duration::zero();
  bool disabled = false;
  int half_open_max_trials = 1;  // at least 1
};

enum class CircuitState { kClosed, kOpen, kHalfOpen };

// "closed" | "open" | "half_open".
const char* CircuitStateName(CircuitState state);

class CircuitBreaker {
 public:
  using NowFn = std::function<MonoClock::time_point()>;
  explicit CircuitBreaker(CircuitBreakerOptions options, NowFn now = &MonoNow);

  // Whether a request may be sent now: closed, or half_open with fewer than
  // half_open_max_trials trials in flight. Moves open -> half_open once the timeout has elapsed.
  bool CanExecute();
  // A request was sent (after CanExecute): while half_open, one more trial in flight. The owner
  // checks and starts under one lock; callers that choose from a list checked earlier may
  // overshoot the cap by the requests chosen concurrently.
  void OnRequestStart();
  void RecordSuccess();
  void RecordFailure();
  // A health check of the worker passed. When open, moves to half_open at once (the timeout need
  // not elapse), unless the last such move was less than health_check_gap ago. Returns whether it
  // moved. Closed and half_open are left as they are: a health check is no request success.
  bool HealthCheckPassed();
  // The state now (applies the open -> half_open transition first).
  CircuitState state();

  int consecutive_failures() const { return consecutive_failures_; }
  int consecutive_successes() const { return consecutive_successes_; }
  int trials_in_flight() const { return trials_in_flight_; }
  int64_t times_opened() const { return times_opened_; }

 private:
  void MaybeHalfOpen();
  void HalfOpen();
  void Open();
  // A request ended: one trial fewer in flight.
  void EndTrial();

  CircuitBreakerOptions options_;
  NowFn now_;
  CircuitState state_ = CircuitState::kClosed;
  int consecutive_failures_ = 0;
  int consecutive_successes_ = 0;
  int trials_in_flight_ = 0;  // requests started while half_open and not ended
  MonoClock::time_point last_failure_{};
  MonoClock::time_point opened_at_{};
  std::optional<MonoClock::time_point> last_health_half_open_;
  int64_t times_opened_ = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_CIRCUIT_BREAKER_H_
