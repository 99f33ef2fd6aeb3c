// Timers: runs closures at given monotonic times; TimerQueue: the real one, on a thread of its
// own. (Tests use ManualClock, common/manual_clock.h, which runs them as the test steps time.)
//
//   TimerQueue timers;
//   TimerQueue::Id id = timers.RunAfter(std::chrono::seconds(5), [] { ... });
//   timers.Cancel(id);   // true: it will not run; false: it ran, is running, or never existed
//
// Closures run one at a time, in time order (equal times in scheduling order), and must not
// block. RunAt may be called from any thread, also from inside a closure. Stop() (or the
// destructor) ends the thread and destroys the closures that did not run, without running them.
//
// Thread-safety: thread-safe. Not copyable or movable.
#ifndef TANDEM_COMMON_TIMER_QUEUE_H_
#define TANDEM_COMMON_TIMER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/steady_cond_var.h"

namespace tandem {

// Closures at given times of `clock()`. Thread-safe.
class Timers {
 public:
  // Names one scheduled closure; 0 is never used.
  using Id = uint64_t;

  virtual ~Timers() = default;
  // The clock the times are read on.
  virtual const Clock& clock() const = 0;
  // Runs `fn` at `when` or soon after (as soon as possible for a time in the past). Returns 0
  // (and destroys `fn` without running it) once the timers stopped.
  virtual Id RunAt(MonoClock::time_point when, std::function<void()> fn) = 0;
  // Unschedules `id`; true when it had not started.
  virtual bool Cancel(Id id) = 0;

  Id RunAfter(MonoClock::duration delay, std::function<void()> fn) {
    return RunAt(Deadline::After(clock(), delay).when(), std::move(fn));
  }
  // As soon as possible, never inside the caller's frame.
  Id Post(std::function<void()> fn) { return RunAt(MonoClock::time_point::min(), std::move(fn)); }
};

class TimerQueue : public Timers {
 public:
  TimerQueue();
  ~TimerQueue() override;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  const Clock& clock() const override { return RealClock(); }
  Id RunAt(MonoClock::time_point when, std::function<void()> fn) override;
  // A wall-clock time, taken as the same distance from now on the monotonic clock.
  Id RunAt(absl::Time when, std::function<void()> fn);
  bool Cancel(Id id) override;
  // Ends the thread (waiting for a running closure) and drops what did not run. Idempotent.
  void Stop();

 private:
  void Loop();

  absl::Mutex mu_;
  SteadyCondVar wake_;
  // Keyed by (time, id): equal times run in scheduling order.
  std::map<std::pair<MonoClock::time_point, Id>, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  std::map<Id, MonoClock::time_point> when_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  MonoClock::time_point sleeping_until_ ABSL_GUARDED_BY(mu_) = MonoClock::time_point::max();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_TIMER_QUEUE_H_
