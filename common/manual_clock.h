// ManualClock: a Clock and Timers whose time moves only when a test says so.
//
//   ManualClock clock;
//   clock.RunAfter(std::chrono::seconds(5), [] { ... });
//   clock.Advance(std::chrono::seconds(5));   // runs it, on this thread, before returning
//
// Advance() moves time forward step by step to each due closure and runs it on the calling
// thread without holding the clock's lock (a closure may schedule, cancel or read Now());
// closures due at the same time run in scheduling order. Post()ed closures and ones scheduled in
// the past run at the next Advance() or RunDue(), never inside RunAt. Nothing runs on its own.
//
// Thread-safety: thread-safe; Advance/RunDue are meant for one test thread at a time.
#ifndef TANDEM_COMMON_MANUAL_CLOCK_H_
#define TANDEM_COMMON_MANUAL_CLOCK_H_

#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/timer_queue.h"

namespace tandem {

class ManualClock : public Clock, public Timers {
 public:
  // Starts at an arbitrary point (far from MonoClock's epoch, so "now - x" never underflows).
  ManualClock() : now_(MonoClock::time_point(std::chrono::hours(24 * 365))) {}
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  MonoClock::time_point Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  const Clock& clock() const override { return *this; }

  Id RunAt(MonoClock::time_point when, std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    const Id id = next_id_++;
    timers_.emplace(std::make_pair(when, id), std::move(fn));
    when_.emplace(id, when);
    return id;
  }
  bool Cancel(Id id) override {
    std::function<void()> dropped;  // destroyed outside the lock
    absl::MutexLock lock(&mu_);
    auto it = when_.find(id);
    if (it == when_.end()) return false;
    auto timer = timers_.find(std::make_pair(it->second, id));
    dropped = std::move(timer->second);
    timers_.erase(timer);
    when_.erase(it);
    return true;
  }

  // Moves time forward by `by`, running every closure that falls due on the way, each with
  // Now() at its own time. Returns how many ran.
  int Advance(MonoClock::duration by) {
    MonoClock::time_point until;
    {
      absl::MutexLock lock(&mu_);
      until = now_ + by;
    }
    int ran = 0;
    while (RunOne(until)) ++ran;
    absl::MutexLock lock(&mu_);
    if (now_ < until) now_ = until;
    return ran;
  }
  // Runs what is due now (Post()ed closures included) without moving time.
  int RunDue() { return Advance(MonoClock::duration::zero()); }
  // Drops every closure not run, without running it (as TimerQueue::Stop does).
  void Clear() {
    std::map<std::pair<MonoClock::time_point, Id>, std::function<void()>> dropped;
    absl::MutexLock lock(&mu_);
    dropped.swap(timers_);
    when_.clear();
  }
  // Closures scheduled and not run.
  size_t pending() const {
    absl::MutexLock lock(&mu_);
    return timers_.size();
  }

 private:
  // Runs the earliest closure due by `until`; false when there is none.
  bool RunOne(MonoClock::time_point until) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      if (timers_.empty() || timers_.begin()->first.first > until) return false;
      auto first = timers_.begin();
      if (first->first.first > now_) now_ = first->first.first;
      fn = std::move(first->second);
      when_.erase(first->first.second);
      timers_.erase(first);
    }
    fn();
    return true;
  }

  mutable absl::Mutex mu_;
  MonoClock::time_point now_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<MonoClock::time_point, Id>, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  std::map<Id, MonoClock::time_point> when_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_MANUAL_CLOCK_H_
