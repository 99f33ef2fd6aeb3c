// SteadyCondVar: a condition variable for state guarded by an absl::Mutex whose timed waits run on
// the monotonic clock (common/clock.h).
//
// absl's own timed waits (CondVar::WaitWithTimeout/WaitWithDeadline, Mutex::AwaitWithTimeout) in
// the abseil Debian 12 ships sleep until a wall-clock instant. A wall-clock step backwards while a
// thread waits (NTP stepping the clock, a VM resumed, an operator's `date -s`) makes the wait that
// much longer, so a timer queue fires its deadlines late and a health loop stops probing for as
// long as the step; a process whose wall clock is offset in user space (libfaketime) wakes at once
// from every such wait and spins. std::condition_variable_any waits on CLOCK_MONOTONIC.
//
//   absl::MutexLock lock(&mu_);
//   while (!ready_ && cv_.WaitUntil(&mu_, deadline)) {}
//
// Signal and SignalAll may be called with or without the mutex held; a waiter that checked its
// condition under the mutex does not miss a signal sent after the state changed under it.
// Thread-safe.
#ifndef TANDEM_COMMON_STEADY_COND_VAR_H_
#define TANDEM_COMMON_STEADY_COND_VAR_H_

#include <condition_variable>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace tandem {

class SteadyCondVar {
 public:
  SteadyCondVar() = default;
  SteadyCondVar(const SteadyCondVar&) = delete;
  SteadyCondVar& operator=(const SteadyCondVar&) = delete;

  // Releases `mu`, sleeps until a signal (or a spurious wakeup), then holds `mu` again.
  void Wait(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    MutexRef lock{mu};
    cv_.wait(lock);
  }
  // As Wait, until `deadline` at the latest; false when it returned because the deadline passed.
  bool WaitUntil(absl::Mutex* mu, MonoClock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    MutexRef lock{mu};
    return cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  }
  // As WaitUntil, `timeout` from now (saturating: a timeout past the clock's range waits for a
  // signal).
  bool WaitFor(absl::Mutex* mu, MonoClock::duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, Deadline::After(RealClock(), timeout).when());
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  // absl::Mutex as the BasicLockable condition_variable_any takes (it releases and retakes it).
  struct MutexRef {
    absl::Mutex* mu;
    void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Lock(); }
    void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Unlock(); }
  };

  std::condition_variable_any cv_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_STEADY_COND_VAR_H_
