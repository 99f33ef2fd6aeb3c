#include "engine/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/kernels/cpu.h"

namespace tandem::engine {
namespace {

// Runs ParallelFor(n) and checks every index is visited exactly once, by contiguous ranges that
// match ThreadPool::Range.
void CheckCoverage(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> calls{0};
  pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
    EXPECT_LT(begin, end);
    calls.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  const int64_t expected_calls = n < pool.size() ? n : pool.size();
  EXPECT_EQ(calls.load(), expected_calls) << "n=" << n;
}

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7},
                      int64_t{1000}, int64_t{100003}}) {
      CheckCoverage(pool, n);
    }
  }
}

// Runs ParallelForBalanced and checks every index is run exactly once, that each body's first
// range is its static share (ThreadPool::Range over the first n - tail), and that the other
// ranges are chunks of the tail.
void CheckBalancedCoverage(ThreadPool& pool, int64_t n, int64_t tail, int64_t chunk) {
  std::vector<std::atomic<int>> hits(n);
  const int64_t head = n - std::min(tail, n);
  std::atomic<int> bodies{0};
  pool.ParallelForBalanced(n, /*total_work=*/int64_t{1} << 40, tail, chunk,
                           [&](ThreadPool::Claim& claim) {
                             bodies.fetch_add(1);
                             int64_t begin, end;
                             bool first = true;
                             while (claim.Next(&begin, &end)) {
                               EXPECT_LT(begin, end);
                               EXPECT_LE(end, n);
                               if (!first || begin >= head) {
                                 EXPECT_GE(begin, head);
                                 EXPECT_EQ((begin - head) % std::max<int64_t>(chunk, 1), 0);
                               }
                               first = false;
                               for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
                             }
                           });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " tail=" << tail << " chunk=" << chunk;
  }
  EXPECT_EQ(bodies.load(), n > 0 ? pool.size() : 0);
}

TEST(ThreadPoolTest, BalancedCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{97}, int64_t{4096}}) {
      for (int64_t tail : {int64_t{0}, n / 4, n, n + 10}) {
        for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100000}}) {
          CheckBalancedCoverage(pool, n, tail, chunk);
        }
      }
    }
  }
}

TEST(ThreadPoolTest, StreamingCoversEveryIndexOnceForAnyItemSize) {
  ThreadPool pool(2);
  for (int64_t item_bytes : {int64_t{0}, int64_t{1}, int64_t{3584}, ThreadPool::kStreamChunkBytes,
                             ThreadPool::kStreamChunkBytes * 3}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{2432}}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelForStreaming(n, int64_t{1} << 40, item_bytes, [&](ThreadPool::Claim& claim) {
        int64_t begin, end;
        while (claim.Next(&begin, &end)) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        }
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " item_bytes=" << item_bytes;
      }
    }
  }
}

TEST(ThreadPoolTest, BalancedTailGoesToTheThreadThatIsFree) {
  // The body that gets index 0 stalls in its static range; the other takes the whole tail.
  ThreadPool pool(2);
  constexpr int64_t kN = 400, kTail = 200;
  std::atomic<int64_t> tail_on_stalled{0}, tail_on_other{0};
  pool.ParallelForBalanced(kN, int64_t{1} << 40, kTail, 1, [&](ThreadPool::Claim& claim) {
    int64_t begin, end;
    bool stalled = false;
    while (claim.Next(&begin, &end)) {
      if (begin == 0) {
        stalled = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      if (begin >= kN - kTail) (stalled ? tail_on_stalled : tail_on_other).fetch_add(end - begin);
    }
  });
  EXPECT_EQ(tail_on_stalled.load() + tail_on_other.load(), kTail);
  EXPECT_GT(tail_on_other.load(), kTail / 2);
}

TEST(ThreadPoolTest, WholeClaimIsOneRange) {
  ThreadPool::Claim claim = ThreadPool::Claim::Whole(10);
  int64_t begin = -1, end = -1;
  ASSERT_TRUE(claim.Next(&begin, &end));
  EXPECT_EQ(begin, 0);
  EXPECT_EQ(end, 10);
  EXPECT_FALSE(claim.Next(&begin, &end));
  ThreadPool::Claim empty = ThreadPool::Claim::Whole(0);
  EXPECT_FALSE(empty.Next(&begin, &end));
}

TEST(ThreadPoolTest, NonPositiveSizeMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
  CheckCoverage(pool, 10);
}

TEST(ThreadPoolTest, RangesAreContiguousAndBalanced) {
  for (int parts : {1, 2, 3, 7}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{6}, int64_t{10}, int64_t{101}}) {
      int64_t expect_begin = 0;
      for (int t = 0; t < parts; ++t) {
        int64_t b, e;
        ThreadPool::Range(n, parts, t, &b, &e);
        EXPECT_EQ(b, expect_begin);
        EXPECT_GE(e - b, n / parts);
        EXPECT_LE(e - b, n / parts + 1);
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, n);
    }
  }
}

TEST(ThreadPoolTest, ManyBackToBackCalls) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 2000; ++round) {
    pool.ParallelFor(5, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), 2000 * 5);
}

TEST(ThreadPoolTest, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> inner{0};
  pool.ParallelFor(2, [&](int64_t b, int64_t e) {
    pool.ParallelFor(10, [&](int64_t ib, int64_t ie) { inner.fetch_add(ie - ib); });
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(CpuTest, LevelNamesAndOrder) {
  EXPECT_STREQ(SimdLevelName(SimdLevel::kScalar), "scalar");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512), "avx512");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512Bf16), "avx512bf16");
  EXPECT_LE(DetectSimd(), DetectHardwareSimd());
  EXPECT_TRUE(SimdLevelSupported(SimdLevel::kScalar));
  EXPECT_TRUE(SimdLevelSupported(DetectHardwareSimd()));
}

TEST(ThreadPoolTest, SmallJobsRunOnTheCallingThread) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  bool all_on_caller = true;
  pool.ParallelFor(100, pool.min_parallel_work() - 1, [&](int64_t begin, int64_t end) {
    ++calls;
    all_on_caller = all_on_caller && std::this_thread::get_id() == caller;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(all_on_caller);

  // A single item never wakes a worker either.
  pool.ParallelFor(1, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });

  // At or above the threshold the job is split over every thread.
  std::atomic<int> ranges{0};
  pool.ParallelFor(100, pool.min_parallel_work(), [&](int64_t, int64_t) { ++ranges; });
  EXPECT_EQ(ranges.load(), 3);
  pool.set_min_parallel_work(0);
  ranges = 0;
  pool.ParallelFor(100, 1, [&](int64_t, int64_t) { ++ranges; });
  EXPECT_EQ(ranges.load(), 3);
}

}  // namespace
}  // namespace tandem::engine
