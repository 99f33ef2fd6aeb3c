#include "common/work_queue.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace tandem {

WorkQueue::WorkQueue(std::string name, int threads, int max_pending)
    : name_(std::move(name)), max_pending_(std::max({1, threads, max_pending})) {
  const int n = std::max(1, threads);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Run(); });
    pthread_setname_np(threads_.back().native_handle(), name_.substr(0, 15).c_str());
  }
}

WorkQueue::~WorkQueue() { Stop(); }

bool WorkQueue::Post(std::function<void()> job) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && static_cast<int>(queue_.size()) + running_ < max_pending_) {
      queue_.push_back(std::move(job));
      return true;
    }
  }
  return false;  // `job` is destroyed here, outside mu_
}

int WorkQueue::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size()) + running_;
}

void WorkQueue::Run() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkQueue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stopping_ || !q->queue_.empty(); },
          this));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    job();
    job = nullptr;  // what the job holds goes before the slot is given back
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

void WorkQueue::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  dropped.clear();  // outside mu_: a job's destructor may do anything but Post
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace tandem
