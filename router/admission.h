// AdmissionQueue: the router's bound on requests served at once (--max-concurrent-requests) and
// on the KV they may claim (KV headroom, below), with a bounded wait queue (--queue-size) and a
// longest wait (--queue-timeout-secs).
//
// KV headroom (when constructed with a KvPoolFn): each request states its KV need in tokens
// (prompt + max_new_tokens; 0 = not counted). The queue keeps the needs of the requests it
// admitted and that have not been released ("committed"), and admits a request only when
// KvHeadroomAdmits() says the pool the KvPoolFn reports (the total KV blocks of the workers that
// hold decode KV) holds the committed needs plus its own. Counting needs from admission to
// Release, not the workers' reported free blocks, is what keeps a burst from overshooting
// between load polls (a report lags the legs, and a running sequence grows its KV token by
// token after the report). A waiter blocked only by KV that times out, or a request refused
// because the queue is full while the KV is what blocks, gets ResourceExhausted saying the
// workers' KV is full (HTTP 429 with Retry-After) instead of DeadlineExceeded.
//
// Non-blocking: Acquire() never waits on the caller's thread. It answers through a callback that
// runs exactly once (unless the ticket is cancelled first): OK when a slot is granted (the caller
// must Release() it once the request is over), ResourceExhausted at once when the queue is full
// (HTTP 429), DeadlineExceeded when the request waited longer than the queue timeout (HTTP 408).
// Callbacks run on the thread that calls Acquire/Release, or on the queue's timer thread for
// timeouts, never under the queue's lock. Waiters are admitted first come, first served.
//
// Thread-safe. Owns one timer thread (only when bounded or KV-checked); the destructor fails every
// waiter with Cancelled and joins it.
#ifndef TANDEM_ROUTER_ADMISSION_H_
#define TANDEM_ROUTER_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/steady_cond_var.h"

namespace tandem::router {

// The KV pool requests are admitted against: the sum of the last reported total KV blocks of the
// workers that hold a request's KV (decode workers in PD mode, regular ones in plain mode) that
// can take requests now. total_blocks <= 0: unknown (no report yet).
struct KvPool {
  int64_t total_blocks = 0;
  int block_size = 0;  // tokens per block (the largest reported)
};

// The headroom decision, a pure function. `committed_tokens` is the summed need of the
// `committed_requests` requests admitted and not yet ended; `need_tokens` the new request's.
// Each request is counted as ceil(tokens / block_size) blocks, bounded above by
// ceil(committed_tokens / block_size) + committed_requests for the committed ones. True when the
// pool is unknown (no worker reported yet: admission must not wait on the first poll), when
// nothing is committed (a request larger than the whole pool still runs, alone, and the worker
// answers for it), or when committed + need blocks <= the pool's total.
bool KvHeadroomAdmits(const KvPool& pool, int64_t committed_tokens, int64_t committed_requests,
                      int64_t need_tokens);

// How many blocks `tokens` take: ceil(tokens / block_size) (block_size <= 0 counts 1).
int64_t KvBlocksFor(int64_t tokens, int block_size);

class AdmissionQueue {
 public:
  using Callback = std::function<void(absl::Status)>;
  // Reads the current pool; called under the queue's lock (it may take the worker registry's and
  // workers' locks, never the queue's).
  using KvPoolFn = std::function<KvPool()>;

  // max_concurrent <= 0: unbounded concurrency. queue_size >= 0. kv_pool null: no KV headroom
  // check (every need is ignored).
  AdmissionQueue(int max_concurrent, int queue_size, absl::Duration queue_timeout,
                 KvPoolFn kv_pool = nullptr);
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Asks for a slot for a request needing `kv_tokens` of KV (0: not counted); see the class
  // comment. Returns a ticket for Cancel().
  uint64_t Acquire(int64_t kv_tokens, Callback callback);
  uint64_t Acquire(Callback callback) { return Acquire(0, std::move(callback)); }
  // Withdraws a waiting request (its client went away): true if it was still waiting, in which
  // case its callback never runs. False once it was answered.
  bool Cancel(uint64_t ticket);
  // Returns a granted slot and its `kv_tokens` (the Acquire's); admits the oldest waiters that
  // fit now, in order.
  void Release(int64_t kv_tokens = 0);

  int64_t active() const;
  int64_t queued() const;
  // KV tokens committed to admitted requests (for tests and metrics).
  int64_t committed_kv_tokens() const;

  // A waiter held back by the KV is retried at least this often (load reports change the pool).
  static constexpr absl::Duration kKvRecheckInterval = absl::Milliseconds(100);

 private:
  struct Waiter {
    uint64_t ticket;
    MonoClock::time_point deadline;  // monotonic: a wall-clock step moves no waiter's turn
    int64_t kv_tokens;
    Callback callback;
  };
  void TimerLoop();
  bool ConcurrencyFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool KvFitsLocked(int64_t kv_tokens) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrantLocked(int64_t kv_tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops the waiters at the front that may run now (first come, first served: stops at the
  // first that may not); their callbacks are for the caller to run outside mu_.
  std::vector<Callback> TakeAdmittableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string KvFullMessageLocked(int64_t kv_tokens) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_concurrent_;
  const int queue_size_;
  const absl::Duration queue_timeout_;
  const KvPoolFn kv_pool_;
  mutable absl::Mutex mu_;
  int64_t active_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kv_committed_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kv_committed_requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  SteadyCondVar timer_wake_;  // the timer loop: stopping (its sleeps run on the steady clock)
  std::thread timer_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ADMISSION_H_
