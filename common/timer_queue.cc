#include "common/timer_queue.h"

#include <exception>

#include "spdlog/spdlog.h"

namespace tandem {

TimerQueue::TimerQueue() : thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() { Stop(); }

TimerQueue::Id TimerQueue::RunAt(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return 0;
  const Id id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  when_.emplace(id, when);
  // Wake the thread only when it sleeps past the new time: most timers (deadlines) lie behind
  // the earliest one, and a wake-up is a context switch.
  if (when < sleeping_until_) wake_.Signal();
  return id;
}

bool TimerQueue::Cancel(Id id) {
  std::function<void()> dropped;  // destroyed outside the lock: it may own anything
  absl::MutexLock lock(&mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  auto timer = timers_.find(std::make_pair(it->second, id));
  dropped = std::move(timer->second);
  timers_.erase(timer);
  when_.erase(it);
  return true;
}

void TimerQueue::Stop() {
  std::map<std::pair<absl::Time, Id>, std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    wake_.Signal();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  dropped.swap(timers_);
  when_.clear();
}

void TimerQueue::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (!timers_.empty() && timers_.begin()->first.first <= now) {
      auto first = timers_.begin();
      std::function<void()> fn = std::move(first->second);
      when_.erase(first->first.second);
      timers_.erase(first);
      mu_.Unlock();
      // A task that throws must not end the timer thread (std::terminate) or skip the Lock.
      try {
        fn();
      } catch (const std::exception& e) {
        spdlog::error("timer queue: a task threw: {}", e.what());
      } catch (...) {
        spdlog::error("timer queue: a task threw an exception of unknown type");
      }
      fn = nullptr;
      mu_.Lock();
      continue;
    }
    sleeping_until_ = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
    wake_.WaitWithDeadline(&mu_, sleeping_until_);
    sleeping_until_ = absl::InfinitePast();  // awake: a RunAt needs no signal
  }
}

}  // namespace tandem
