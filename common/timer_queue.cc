#include "common/timer_queue.h"

#include <algorithm>
#include <exception>

#include "spdlog/spdlog.h"

namespace tandem {

TimerQueue::TimerQueue() : thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() { Stop(); }

TimerQueue::Id TimerQueue::RunAt(absl::Time when, std::function<void()> fn) {
  if (when == absl::InfinitePast()) return RunAt(MonoClock::time_point::min(), std::move(fn));
  if (when == absl::InfiniteFuture()) return RunAt(MonoClock::time_point::max(), std::move(fn));
  return RunAfter(absl::ToChronoNanoseconds(std::max(absl::ZeroDuration(), when - absl::Now())),
                  std::move(fn));
}

TimerQueue::Id TimerQueue::RunAt(MonoClock::time_point when, std::function<void()> fn) {
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
  std::map<std::pair<MonoClock::time_point, Id>, std::function<void()>> dropped;
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
    const MonoClock::time_point now = MonoNow();
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
    sleeping_until_ = timers_.empty() ? MonoClock::time_point::max() : timers_.begin()->first.first;
    if (sleeping_until_ == MonoClock::time_point::max()) {
      wake_.Wait(&mu_);
    } else {
      wake_.WaitUntil(&mu_, sleeping_until_);
    }
    sleeping_until_ = MonoClock::time_point::min();  // awake: a RunAt needs no signal
  }
}

}  // namespace tandem
