#include "router/workers/circuit_breaker.h"

#include <utility>

namespace tandem::router {

const char* CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kOpen:
      return "open";
    case CircuitState::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

CircuitBreaker::CircuitBreaker(CircuitBreakerOptions options, NowFn now)
    : options_(std::move(options)), now_(std::move(now)) {
  if (options_.failure_threshold < 1) options_.failure_threshold = 1;
  if (options_.success_threshold < 1) options_.success_threshold = 1;
  if (options_.half_open_max_trials < 1) options_.half_open_max_trials = 1;
}

void CircuitBreaker::MaybeHalfOpen() {
  if (state_ == CircuitState::kOpen && now_() - opened_at_ >= options_.timeout) HalfOpen();
}

void CircuitBreaker::HalfOpen() {
  state_ = CircuitState::kHalfOpen;
  consecutive_successes_ = 0;
  trials_in_flight_ = 0;
}

void CircuitBreaker::EndTrial() {
  if (trials_in_flight_ > 0) --trials_in_flight_;
}

void CircuitBreaker::Open() {
  trials_in_flight_ = 0;
  state_ = CircuitState::kOpen;
  opened_at_ = now_();
  consecutive_successes_ = 0;
  ++times_opened_;
}

bool CircuitBreaker::CanExecute() {
  if (options_.disabled) return true;
  MaybeHalfOpen();
  if (state_ == CircuitState::kHalfOpen) {
    return trials_in_flight_ < options_.half_open_max_trials;
  }
  return state_ != CircuitState::kOpen;
}

void CircuitBreaker::OnRequestStart() {
  if (options_.disabled) return;
  MaybeHalfOpen();
  if (state_ == CircuitState::kHalfOpen) ++trials_in_flight_;
}

CircuitState CircuitBreaker::state() {
  if (options_.disabled) return CircuitState::kClosed;
  MaybeHalfOpen();
  return state_;
}

bool CircuitBreaker::HealthCheckPassed() {
  if (options_.disabled) return false;
  MaybeHalfOpen();
  if (state_ != CircuitState::kOpen) return false;
  const MonoClock::time_point now = now_();
  if (last_health_half_open_.has_value() &&
      now - *last_health_half_open_ < options_.health_check_gap) {
    return false;  // this worker's last trial failed less than a health-check interval ago
  }
  last_health_half_open_ = now;
  HalfOpen();
  return true;
}

void CircuitBreaker::RecordSuccess() {
  if (options_.disabled) return;
  MaybeHalfOpen();
  consecutive_failures_ = 0;
  switch (state_) {
    case CircuitState::kClosed:
      break;
    case CircuitState::kHalfOpen:
      EndTrial();
      if (++consecutive_successes_ >= options_.success_threshold) {
        state_ = CircuitState::kClosed;
        consecutive_successes_ = 0;
        trials_in_flight_ = 0;
      }
      break;
    case CircuitState::kOpen:
      break;  // a request sent before the circuit opened; it proves nothing yet
  }
}

void CircuitBreaker::RecordFailure() {
  if (options_.disabled) return;
  MaybeHalfOpen();
  MonoClock::time_point now = now_();
  consecutive_successes_ = 0;
  switch (state_) {
    case CircuitState::kClosed:
      if (consecutive_failures_ > 0 && now - last_failure_ > options_.window) {
        consecutive_failures_ = 0;  // the old streak is outside the window
      }
      last_failure_ = now;
      if (++consecutive_failures_ >= options_.failure_threshold) Open();
      break;
    case CircuitState::kHalfOpen:
      last_failure_ = now;
      ++consecutive_failures_;
      Open();
      break;
    case CircuitState::kOpen:
      last_failure_ = now;
      break;
  }
}

}  // namespace tandem::router
