// AdmissionQueue: the router's bound on requests served at once (--max-concurrent-requests) with a
// bounded wait queue (--queue-size) and a longest wait (--queue-timeout-secs).
//
// Non-blocking: Acquire() never waits on the caller's thread. It answers through a callback that
// runs exactly once (unless the ticket is cancelled first): OK when a slot is granted (the caller
// must Release() it once the request is over), ResourceExhausted at once when the queue is full
// (HTTP 429), DeadlineExceeded when the request waited longer than the queue timeout (HTTP 408).
// Callbacks run on the thread that calls Acquire/Release, or on the queue's timer thread for
// timeouts, never under the queue's lock. Waiters are admitted first come, first served.
//
// Thread-safe. Owns one timer thread (only when bounded); the destructor fails every waiter with
// Cancelled and joins it.
#ifndef TANDEM_ROUTER_ADMISSION_H_
#define TANDEM_ROUTER_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::router {

class AdmissionQueue {
 public:
  using Callback = std::function<void(absl::Status)>;

  // max_concurrent <= 0: unbounded (every Acquire is granted at once). queue_size >= 0.
  AdmissionQueue(int max_concurrent, int queue_size, absl::Duration queue_timeout);
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Asks for a slot; see the class comment. Returns a ticket for Cancel().
  uint64_t Acquire(Callback callback);
  // Withdraws a waiting request (its client went away): true if it was still waiting, in which
  // case its callback never runs. False once it was answered.
  bool Cancel(uint64_t ticket);
  // Returns a granted slot; admits the oldest waiter, if any.
  void Release();

  int64_t active() const;
  int64_t queued() const;

 private:
  struct Waiter {
    uint64_t ticket;
    absl::Time deadline;
    Callback callback;
  };
  void TimerLoop();

  const int max_concurrent_;
  const int queue_size_;
  const absl::Duration queue_timeout_;
  mutable absl::Mutex mu_;
  int64_t active_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ADMISSION_H_
