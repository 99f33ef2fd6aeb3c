// Monotonic time for timeouts and deadlines (never the wall clock, which can jump).
//
//   Deadline deadline = Deadline::After(std::chrono::seconds(5));
//   while (!deadline.expired()) { ... wait_for(deadline.remaining()) ... }
//
// Code whose time rules tests must drive without sleeping takes a `Clock` (RealClock() in
// production, ManualClock in tests: common/manual_clock.h) and compares its Now() with a
// Deadline's when(); Deadline's own expired()/remaining() read the real monotonic clock.
//
// Deadline is a value type; thread-compatible (const methods may be called concurrently).
// Clock implementations are thread-safe.
#ifndef TANDEM_COMMON_CLOCK_H_
#define TANDEM_COMMON_CLOCK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tandem {

using MonoClock = std::chrono::steady_clock;

inline MonoClock::time_point MonoNow() { return MonoClock::now(); }
// MonoNow() as nanoseconds since the clock's epoch, for atomics that hold a point in time.
inline int64_t MonoNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(MonoNow().time_since_epoch()).count();
}

// A source of monotonic time. RealClock() is the process's; tests inject a manual one.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoClock::time_point Now() const = 0;
};

// MonoNow() as a Clock. Never destroyed.
const Clock& RealClock();

// A point in monotonic time after which an operation should give up.
class Deadline {
 public:
  // A deadline `timeout` from now; a zero or negative timeout is already expired.
  static Deadline After(MonoClock::duration timeout) { return Deadline(MonoNow() + timeout); }
  static Deadline At(MonoClock::time_point when) { return Deadline(when); }
  // A deadline `timeout` after `clock`'s now (saturating: a huge timeout is Never()).
  static Deadline After(const Clock& clock, MonoClock::duration timeout) {
    const MonoClock::time_point now = clock.Now();
    if (timeout >= MonoClock::time_point::max() - now) return Never();
    return Deadline(now + timeout);
  }
  // A deadline that never expires.
  static Deadline Never() { return Deadline(MonoClock::time_point::max()); }

  bool expired() const { return MonoNow() >= when_; }
  // Whether it passed by `clock`.
  bool expired(const Clock& clock) const { return clock.Now() >= when_; }
  bool is_never() const { return when_ == MonoClock::time_point::max(); }
  MonoClock::time_point when() const { return when_; }
  // Time left, never negative; MonoClock::duration::max() for Never().
  MonoClock::duration remaining() const {
    if (is_never()) return MonoClock::duration::max();
    return std::max(MonoClock::duration::zero(), when_ - MonoNow());
  }
  // The earlier of two deadlines.
  static Deadline Earliest(const Deadline& a, const Deadline& b) {
    return a.when_ <= b.when_ ? a : b;
  }

 private:
  explicit Deadline(MonoClock::time_point when) : when_(when) {}
  MonoClock::time_point when_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_CLOCK_H_
