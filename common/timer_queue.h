// TimerQueue: runs closures at given times on one thread of its own.
//
//   TimerQueue timers;
//   TimerQueue::Id id = timers.RunAt(absl::Now() + absl::Seconds(5), [] { ... });
//   timers.Cancel(id);   // true: it will not run; false: it ran, is running, or never existed
//
// Closures run one at a time, in time order, on the queue's thread, and must not block. RunAt may
// be called from any thread, also from inside a closure. Stop() (or the destructor) ends the
// thread and destroys the closures that did not run, without running them.
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

namespace tandem {

class TimerQueue {
 public:
  // Names one scheduled closure; 0 is never used.
  using Id = uint64_t;

  TimerQueue();
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `fn` at `when` or soon after (at once for a time in the past). After Stop(), `fn` is
  // destroyed without running and the id is 0.
  Id RunAt(absl::Time when, std::function<void()> fn);
  // Unschedules `id`; true when it had not started.
  bool Cancel(Id id);
  // Ends the thread (waiting for a running closure) and drops what did not run. Idempotent.
  void Stop();

 private:
  void Loop();

  absl::Mutex mu_;
  absl::CondVar wake_;
  // Keyed by (time, id): equal times run in scheduling order.
  std::map<std::pair<absl::Time, Id>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<Id, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time sleeping_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_TIMER_QUEUE_H_
