#include "router/admission.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tandem::router {
namespace {

// Runs a waiter's callback. It runs on the caller's thread or the timer thread, outside any
// handler that would catch for it: a throw must not end the process (or, on the timer thread,
// leave mu_ unlocked under the loop's lock).
void Deliver(const AdmissionQueue::Callback& callback, absl::Status status) noexcept {
  try {
    callback(std::move(status));
  } catch (const std::exception& e) {
    spdlog::error("admission: a request's callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("admission: a request's callback threw an exception of unknown type");
  }
}

}  // namespace

int64_t KvBlocksFor(int64_t tokens, int block_size) {
  if (tokens <= 0) return 0;
  if (block_size <= 0) return 1;
  return (tokens + block_size - 1) / block_size;
}

bool KvHeadroomAdmits(const KvPool& pool, int64_t committed_tokens, int64_t committed_requests,
                      int64_t need_tokens) {
  if (pool.total_blocks <= 0 || committed_requests <= 0 || need_tokens <= 0) return true;
  const int64_t committed_blocks = KvBlocksFor(committed_tokens, pool.block_size) +
                                   (pool.block_size > 1 ? committed_requests : 0);
  return committed_blocks + KvBlocksFor(need_tokens, pool.block_size) <= pool.total_blocks;
}

AdmissionQueue::AdmissionQueue(int max_concurrent, int queue_size, absl::Duration queue_timeout,
                               KvPoolFn kv_pool)
    : max_concurrent_(max_concurrent),
      queue_size_(queue_size < 0 ? 0 : queue_size),
      queue_timeout_(queue_timeout),
      kv_pool_(std::move(kv_pool)) {
  if (max_concurrent_ > 0 || kv_pool_) timer_ = std::thread([this] { TimerLoop(); });
}

bool AdmissionQueue::ConcurrencyFreeLocked() const {
  return max_concurrent_ <= 0 || active_ < max_concurrent_;
}

bool AdmissionQueue::KvFitsLocked(int64_t kv_tokens) const {
  if (!kv_pool_ || kv_tokens <= 0) return true;
  return KvHeadroomAdmits(kv_pool_(), kv_committed_tokens_, kv_committed_requests_, kv_tokens);
}

void AdmissionQueue::GrantLocked(int64_t kv_tokens) {
  ++active_;
  if (kv_pool_ && kv_tokens > 0) {
    kv_committed_tokens_ += kv_tokens;
    ++kv_committed_requests_;
  }
}

std::vector<AdmissionQueue::Callback> AdmissionQueue::TakeAdmittableLocked() {
  std::vector<Callback> admitted;
  while (!stopping_ && !waiters_.empty() && ConcurrencyFreeLocked() &&
         KvFitsLocked(waiters_.front().kv_tokens)) {
    GrantLocked(waiters_.front().kv_tokens);
    admitted.push_back(std::move(waiters_.front().callback));
    waiters_.pop_front();
  }
  return admitted;
}

std::string AdmissionQueue::KvFullMessageLocked(int64_t kv_tokens) const {
  const KvPool pool = kv_pool_ ? kv_pool_() : KvPool{};
  return absl::StrCat("the workers' KV cache is full: ", kv_committed_requests_,
                      " running requests claim ",
                      KvBlocksFor(kv_committed_tokens_, pool.block_size), " of ", pool.total_blocks,
                      " KV blocks and this one needs ", KvBlocksFor(kv_tokens, pool.block_size),
                      " (prompt + max_new_tokens); retry later");
}

AdmissionQueue::~AdmissionQueue() {
  std::deque<Waiter> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(waiters_);
  }
  timer_wake_.SignalAll();
  if (timer_.joinable()) timer_.join();
  for (Waiter& w : left) Deliver(w.callback, absl::CancelledError("the router is shutting down"));
}

uint64_t AdmissionQueue::Acquire(int64_t kv_tokens, Callback callback) {
  absl::Status answer;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = next_ticket_++;
    if (stopping_) {
      answer = absl::CancelledError("the router is shutting down");
    } else if (waiters_.empty() && ConcurrencyFreeLocked() && KvFitsLocked(kv_tokens)) {
      GrantLocked(kv_tokens);
    } else if (static_cast<int64_t>(waiters_.size()) >= queue_size_) {
      if (ConcurrencyFreeLocked()) {
        answer = absl::ResourceExhaustedError(
            absl::StrCat(KvFullMessageLocked(kv_tokens), " (", waiters_.size(),
                         " waiting, --queue-size ", queue_size_, ")"));
      } else {
        answer = absl::ResourceExhaustedError(absl::StrCat(
            "too many requests: ", active_, " running (--max-concurrent-requests ", max_concurrent_,
            ") and ", waiters_.size(), " waiting (--queue-size ", queue_size_, ")"));
      }
    } else {
      waiters_.push_back(Waiter{
          ticket, Deadline::After(RealClock(), absl::ToChronoNanoseconds(queue_timeout_)).when(),
          kv_tokens, std::move(callback)});
      return ticket;
    }
  }
  Deliver(callback, answer);
  return ticket;
}

bool AdmissionQueue::Cancel(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->ticket == ticket) {
      waiters_.erase(it);
      return true;
    }
  }
  return false;
}

void AdmissionQueue::Release(int64_t kv_tokens) {
  std::vector<Callback> admitted;
  {
    absl::MutexLock lock(&mu_);
    if (active_ > 0) --active_;
    if (kv_pool_ && kv_tokens > 0 && kv_committed_requests_ > 0) {
      kv_committed_tokens_ = std::max<int64_t>(0, kv_committed_tokens_ - kv_tokens);
      --kv_committed_requests_;
    }
    admitted = TakeAdmittableLocked();
  }
  for (Callback& c : admitted) Deliver(c, absl::OkStatus());
}

int64_t AdmissionQueue::committed_kv_tokens() const {
  absl::MutexLock lock(&mu_);
  return kv_committed_tokens_;
}

int64_t AdmissionQueue::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

int64_t AdmissionQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

void AdmissionQueue::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const MonoClock::time_point now = MonoNow();
    // The pool may have grown (a load report, a worker back): admit who fits first.
    std::vector<Callback> admitted = TakeAdmittableLocked();
    std::vector<std::pair<Callback, absl::Status>> expired;
    while (!waiters_.empty() && waiters_.front().deadline <= now) {
      absl::Status why =
          ConcurrencyFreeLocked()
              ? absl::ResourceExhaustedError(absl::StrCat(
                    KvFullMessageLocked(waiters_.front().kv_tokens),
                    " (waited --queue-timeout-secs, ", absl::ToInt64Seconds(queue_timeout_), " s)"))
              : absl::DeadlineExceededError(
                    absl::StrCat("request waited longer than --queue-timeout-secs (",
                                 absl::ToInt64Seconds(queue_timeout_), " s) for a free slot"));
      expired.emplace_back(std::move(waiters_.front().callback), std::move(why));
      waiters_.pop_front();
    }
    if (!admitted.empty() || !expired.empty()) {
      mu_.Unlock();
      for (Callback& c : admitted) Deliver(c, absl::OkStatus());
      for (auto& [c, why] : expired) Deliver(c, why);
      mu_.Lock();
      continue;
    }
    // Waiters are in deadline order (same timeout, FIFO). Wake on the first deadline, on
    // stopping, at the latest every kKvRecheckInterval (a waiter held back by KV is retried).
    const MonoClock::time_point recheck = now + absl::ToChronoNanoseconds(kKvRecheckInterval);
    const MonoClock::time_point wake =
        waiters_.empty() ? recheck : std::min(waiters_.front().deadline, recheck);
    timer_wake_.WaitUntil(&mu_, wake);
  }
}

}  // namespace tandem::router
