#include "engine/kernels/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace tandem::engine {
namespace {

// Set while a thread runs a range of some pool's job, so nested calls run inline.
thread_local bool tls_in_parallel_for = false;

// Polling before a thread goes to sleep (roughly 100 us): longer than the gap between two kernels
// of one forward pass, short enough not to burn a shared core when idle. Every kYieldEvery polls
// the thread yields, so an oversubscribed machine still runs the thread being waited for.
constexpr int kSpinIterations = 4096;
constexpr int kYieldEvery = 64;

inline void SpinPause(int spin) {
  if (spin % kYieldEvery == kYieldEvery - 1) {
    std::this_thread::yield();
  } else {
    _mm_pause();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Range(int64_t n, int parts, int t, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  *begin = t * base + (t < extra ? t : extra);
  *end = *begin + base + (t < extra ? 1 : 0);
}

void ThreadPool::RunRange(int index) {
  int64_t begin, end;
  Range(job_n_, n_threads_, index, &begin, &end);
  if (begin < end) {
    tls_in_parallel_for = true;
    (*job_fn_)(begin, end);
    tls_in_parallel_for = false;
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || n_threads_ == 1 || tls_in_parallel_for) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  job_fn_ = &fn;
  job_n_ = n;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    if (sleepers_ > 0) wake_cv_.notify_all();
  }
  RunRange(0);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    SpinPause(spin);
  }
  std::unique_lock<std::mutex> lock(sleep_mu_);
  caller_sleeping_ = true;
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  caller_sleeping_ = false;
}

void ThreadPool::ParallelFor(int64_t n, int64_t total_work,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (total_work < min_parallel_work_) {
    if (n > 0) fn(0, n);
    return;
  }
  ParallelFor(n, fn);
}

bool ThreadPool::Claim::Next(int64_t* begin, int64_t* end) {
  if (begin_ < end_) {
    *begin = begin_;
    *end = end_;
    begin_ = end_;
    return true;
  }
  if (tail_next_ == nullptr) return false;
  const int64_t b = tail_next_->fetch_add(chunk_, std::memory_order_relaxed);
  if (b >= n_) return false;
  *begin = b;
  *end = std::min(n_, b + chunk_);
  return true;
}

void ThreadPool::ParallelForBalanced(int64_t n, int64_t total_work, int64_t tail, int64_t chunk,
                                     const std::function<void(Claim& claim)>& fn) {
  if (n <= 0) return;
  tail = std::clamp<int64_t>(tail, 0, n);
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t head = n - tail;
  std::atomic<int64_t> tail_next{head};
  const int parts = n_threads_;
  ParallelFor(parts, total_work, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      int64_t begin, end;
      Range(head, parts, static_cast<int>(t), &begin, &end);
      Claim claim(&tail_next, n, chunk, begin, end);
      fn(claim);
    }
  });
}

void ThreadPool::ParallelForStreaming(int64_t n, int64_t total_work, int64_t item_bytes,
                                      const std::function<void(Claim& claim)>& fn) {
  const int64_t chunk = kStreamChunkBytes / std::max<int64_t>(1, item_bytes);
  ParallelForBalanced(n, total_work, n / 4, chunk, fn);
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t generation = generation_.load(std::memory_order_acquire);
    for (int spin = 0; generation == seen && spin < kSpinIterations; ++spin) {
      if (stop_.load(std::memory_order_acquire)) return;
      SpinPause(spin);
      generation = generation_.load(std::memory_order_acquire);
    }
    if (generation == seen) {
      std::unique_lock<std::mutex> lock(sleep_mu_);
      ++sleepers_;
      wake_cv_.wait(lock, [&] {
        return stop_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
      --sleepers_;
      if (stop_.load(std::memory_order_acquire)) return;
      continue;
    }
    seen = generation;
    RunRange(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      if (caller_sleeping_) done_cv_.notify_one();
    }
  }
}

}  // namespace tandem::engine
