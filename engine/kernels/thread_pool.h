// ThreadPool: a fixed set of worker threads for data-parallel kernels.
//
// ParallelFor(n, fn) splits [0, n) into size() contiguous ranges of near-equal length (the first
// n % size() ranges are one longer), runs range 0 on the calling thread and range t on worker t,
// and returns when all are done. The split depends only on n and size(), so a kernel that
// partitions its work through it is deterministic. Empty ranges are not run.
// ParallelForBalanced is for work whose per-item result does not depend on the thread (the
// decode matmuls): it shares the last part out in chunks to whichever thread is free.
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

  // Runs fn(begin, end) on each non-empty range; returns when all have returned. With n == 1
  // the single range runs on the calling thread and no worker is woken.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  // The same, but runs fn(0, n) on the calling thread when `total_work` (the caller's estimate
  // of the whole job, e.g. multiply-adds) is below min_parallel_work(): handing a job of a few
  // microseconds to workers costs more than it saves, and on a loaded machine each handoff can
  // wait a whole scheduler quantum. Results never depend on the split (callers partition work so
  // that they do not), so this only changes speed.
  void ParallelFor(int64_t n, int64_t total_work,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // A thread's share of a ParallelForBalanced job: Next() yields its static range first, then
  // chunks of the shared tail until none is left.
  class Claim {
   public:
    // All of [0, n) as one range, for running a balanced body without a pool.
    static Claim Whole(int64_t n) { return Claim(nullptr, n, 1, 0, n); }
    // The next range to run, [*begin, *end); false when none is left.
    bool Next(int64_t* begin, int64_t* end);

   private:
    friend class ThreadPool;
    Claim(std::atomic<int64_t>* tail_next, int64_t n, int64_t chunk, int64_t begin, int64_t end)
        : tail_next_(tail_next), n_(n), chunk_(chunk), begin_(begin), end_(end) {}
    std::atomic<int64_t>* tail_next_;
    int64_t n_, chunk_, begin_, end_;
  };

  // For streaming kernels whose threads run at uneven speeds (decode's matrix reads: one call
  // waits for its slowest thread, and memory does not serve two cores equally from call to call).
  // The first n - tail items are split as ParallelFor splits them; the last `tail` items are
  // claimed `chunk` at a time by whichever thread is free, so threads finish within about a
  // chunk of each other. fn(claim) runs once per range of size() (on the threads ParallelFor
  // would use, or all inline under the same conditions) and loops on claim.Next(). Which thread
  // computes an item varies from call to call: callers must make each item's result independent
  // of that (as the matmuls are: an output is one thread's, computed the same way anywhere).
  void ParallelForBalanced(int64_t n, int64_t total_work, int64_t tail, int64_t chunk,
                           const std::function<void(Claim& claim)>& fn);

  // ParallelForBalanced as the weight-streaming kernels use it (the decode matmuls): items of
  // `item_bytes` each, the last quarter shared in chunks of about kStreamChunkBytes. Measured on
  // Qwen2.5-0.5B decode at batch 1 (Zen 4, 2 threads; bf16 and int8 in one process, tokens
  // alternated between this and the static split): the balanced tokens' matmuls took
  // 0.94-0.98x the time (faster in 6 runs of 6). An int8 call of ~70-110 us had its two threads
  // finish 9-11 us apart on average with the static split, 4-6 us with this one.
  static constexpr int64_t kStreamChunkBytes = int64_t{128} << 10;
  void ParallelForStreaming(int64_t n, int64_t total_work, int64_t item_bytes,
                            const std::function<void(Claim& claim)>& fn);

  // Default: about 64K multiply-adds (a few microseconds of one core's work). At decode batch 1
  // on Qwen2.5-0.5B, o_proj (0.8M) and the attention over a 256-token context (0.46M) gain from
  // the split, and a worker left idle through such a call may fall asleep and cost a wake-up at
  // the next one: with the former 1M threshold o_proj + qkv took 14% of a decode step, with this
  // one 10-11%. Tests that must exercise the split on small shapes set 0.
  static constexpr int64_t kDefaultMinParallelWork = int64_t{1} << 16;
  int64_t min_parallel_work() const { return min_parallel_work_; }
  void set_min_parallel_work(int64_t work) { min_parallel_work_ = work; }

 private:
  void WorkerLoop(int index);
  void RunRange(int index);

  const int n_threads_;
  int64_t min_parallel_work_ = kDefaultMinParallelWork;
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
