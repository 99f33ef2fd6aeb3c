#include "router/admission.h"

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

AdmissionQueue::AdmissionQueue(int max_concurrent, int queue_size, absl::Duration queue_timeout)
    : max_concurrent_(max_concurrent),
      queue_size_(queue_size < 0 ? 0 : queue_size),
      queue_timeout_(queue_timeout) {
  if (max_concurrent_ > 0) timer_ = std::thread([this] { TimerLoop(); });
}

AdmissionQueue::~AdmissionQueue() {
  std::deque<Waiter> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(waiters_);
  }
  if (timer_.joinable()) timer_.join();
  for (Waiter& w : left) Deliver(w.callback, absl::CancelledError("the router is shutting down"));
}

uint64_t AdmissionQueue::Acquire(Callback callback) {
  absl::Status answer;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = next_ticket_++;
    if (stopping_) {
      answer = absl::CancelledError("the router is shutting down");
    } else if (max_concurrent_ <= 0 || (active_ < max_concurrent_ && waiters_.empty())) {
      ++active_;
    } else if (static_cast<int64_t>(waiters_.size()) >= queue_size_) {
      answer = absl::ResourceExhaustedError(absl::StrCat(
          "too many requests: ", active_, " running (--max-concurrent-requests ", max_concurrent_,
          ") and ", waiters_.size(), " waiting (--queue-size ", queue_size_, ")"));
    } else {
      waiters_.push_back(Waiter{ticket, absl::Now() + queue_timeout_, std::move(callback)});
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

void AdmissionQueue::Release() {
  Callback next;
  {
    absl::MutexLock lock(&mu_);
    if (active_ > 0) --active_;
    if (waiters_.empty() || stopping_ || (max_concurrent_ > 0 && active_ >= max_concurrent_)) {
      return;
    }
    next = std::move(waiters_.front().callback);
    waiters_.pop_front();
    ++active_;
  }
  Deliver(next, absl::OkStatus());
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
    const absl::Time now = absl::Now();
    std::vector<Callback> expired;
    while (!waiters_.empty() && waiters_.front().deadline <= now) {
      expired.push_back(std::move(waiters_.front().callback));
      waiters_.pop_front();
    }
    if (!expired.empty()) {
      mu_.Unlock();
      for (Callback& c : expired) {
        Deliver(c, absl::DeadlineExceededError(
                       absl::StrCat("request waited longer than --queue-timeout-secs (",
                                    absl::ToInt64Seconds(queue_timeout_), " s) for a free slot")));
      }
      mu_.Lock();
      continue;
    }
    // Waiters are in deadline order (same timeout, FIFO). Wake on the first deadline, on a
    // new waiter (condition below) at the latest every 100 ms.
    const absl::Time wake =
        waiters_.empty() ? now + absl::Milliseconds(100)
                         : std::min(waiters_.front().deadline, now + absl::Milliseconds(100));
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
  }
}

}  // namespace tandem::router
