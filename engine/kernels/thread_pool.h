// ThreadPool: a fixed set of worker threads for data-parallel kernels.
//
// ParallelFor(n, fn) splits [0, n) into size() contiguous ranges of near-equal length (the first
// n % size() ranges are one longer), runs range 0 on the calling thread and range t on worker t,
// and returns when all are done. The split depends only on n and size(), so a kernel that
// partitions its work through it is deterministic. Empty ranges are not run.
//
// Thread-safety: one ParallelFor at a time per pool (calls from different threads are
// serialised). A ParallelFor issued from inside fn (on a thread running any pool's range) runs
// fn(0, n) inline on that thread instead of deadlocking. fn must not throw.
// Workers spin briefly after each job (so back-to-back kernel calls do not pay a futex wake-up)
// and then sleep. The pool owns its threads and joins them on destruction.
#ifndef TANDEM_ENGINE_KERNELS_THREAD_POOL_H_
#define TANDEM_ENGINE_KERNELS_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace tandem::engine {

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(1) starts no worker. Values < 1 mean 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Range t of size() ranges over [0, n): [begin, end). Exposed so callers can predict the split.
  static void Range(int64_t n, int parts, int t, int64_t* begin, int64_t* end);

  // Runs fn(begin, end) on each non-empty range; returns when all have returned.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop(int index);
  void RunRange(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;

  std::mutex call_mu_;  // serialises ParallelFor callers

  // Current job, published by bumping generation_ (release) and read by workers (acquire).
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current job
  std::atomic<bool> stop_{false};

  std::mutex sleep_mu_;
  std::condition_variable wake_cv_;  // workers sleep here between jobs
  std::condition_variable done_cv_;  // the caller sleeps here while workers finish
  int sleepers_ ABSL_GUARDED_BY(sleep_mu_) = 0;
  bool caller_sleeping_ ABSL_GUARDED_BY(sleep_mu_) = false;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_THREAD_POOL_H_
