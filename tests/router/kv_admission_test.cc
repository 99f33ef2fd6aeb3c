// Admission from KV headroom: the pure decision (KvHeadroomAdmits) and the queue that applies it
// (AdmissionQueue with a KvPoolFn), without sockets or workers.
#include <atomic>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "router/admission.h"

namespace tandem::router {
namespace {

TEST(KvHeadroomTest, BlocksRoundUp) {
  EXPECT_EQ(KvBlocksFor(0, 16), 0);
  EXPECT_EQ(KvBlocksFor(1, 16), 1);
  EXPECT_EQ(KvBlocksFor(16, 16), 1);
  EXPECT_EQ(KvBlocksFor(17, 16), 2);
  EXPECT_EQ(KvBlocksFor(5, 0), 1);  // no block size reported: one block each
}

TEST(KvHeadroomTest, UnknownPoolOrNothingCommittedAdmits) {
  // No worker reported yet: admission does not wait on the first poll.
  EXPECT_TRUE(KvHeadroomAdmits(KvPool{0, 16}, 10'000, 5, 10'000));
  // Nothing committed: even a request larger than the pool runs, alone.
  EXPECT_TRUE(KvHeadroomAdmits(KvPool{10, 16}, 0, 0, 1'000));
  // A request without a stated need is not counted.
  EXPECT_TRUE(KvHeadroomAdmits(KvPool{10, 16}, 10'000, 5, 0));
}

TEST(KvHeadroomTest, CommittedPlusNeedMustFitTheTotal) {
  const KvPool pool{/*total_blocks=*/10, /*block_size=*/16};
  // One committed request of 64 tokens: 4 blocks, bounded as ceil(64/16) + 1 = 5.
  EXPECT_TRUE(KvHeadroomAdmits(pool, 64, 1, 80));   // 5 + 5 = 10
  EXPECT_FALSE(KvHeadroomAdmits(pool, 64, 1, 81));  // 5 + 6 = 11
  // Each committed request may have a partial last block: counted one block each.
  EXPECT_FALSE(KvHeadroomAdmits(pool, 72, 8, 16));  // 5 + 8 + 1 = 14
  EXPECT_TRUE(KvHeadroomAdmits(pool, 8, 8, 16));    // 1 + 8 + 1 = 10
}

TEST(KvHeadroomTest, PoolGrowthAdmits) {
  EXPECT_FALSE(KvHeadroomAdmits(KvPool{10, 16}, 128, 1, 128));
  EXPECT_TRUE(KvHeadroomAdmits(KvPool{20, 16}, 128, 1, 128));  // a second worker reported
}

struct Recorder {
  absl::Mutex mu;
  std::vector<std::pair<int, absl::Status>> answers;
  AdmissionQueue::Callback For(int id) {
    return [this, id](absl::Status s) {
      absl::MutexLock lock(&mu);
      answers.emplace_back(id, std::move(s));
    };
  }
  std::vector<std::pair<int, absl::Status>> Get() {
    absl::MutexLock lock(&mu);
    return answers;
  }
  bool WaitFor(size_t n, absl::Duration within) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n] { return answers.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), within);
  }
};

// A pool a test changes as a load report would.
struct FakePool {
  std::atomic<int64_t> total_blocks{0};
  AdmissionQueue::KvPoolFn Fn() {
    return [this] { return KvPool{total_blocks.load(), 16}; };
  }
};

TEST(KvAdmissionQueueTest, WaitsForKvThenAdmitsInOrderOnRelease) {
  FakePool pool;
  pool.total_blocks = 10;
  Recorder r;
  AdmissionQueue q(/*max_concurrent=*/-1, /*queue_size=*/4, absl::Hours(1), pool.Fn());
  q.Acquire(64, r.For(0));  // 5 blocks with its slack
  q.Acquire(64, r.For(1));  // 5 + 4 = 9 <= 10
  q.Acquire(64, r.For(2));  // 10 + 4 > 10: waits
  q.Acquire(16, r.For(3));  // small, but behind 2: first come, first served
  ASSERT_EQ(r.Get().size(), 2u);
  EXPECT_EQ(q.queued(), 2);
  EXPECT_EQ(q.committed_kv_tokens(), 128);
  q.Release(64);  // room for 2 (5 + 4 blocks); then 3 needs 10 + 1 > 10
  ASSERT_EQ(r.Get().size(), 3u);
  EXPECT_EQ(r.Get()[2].first, 2);
  q.Release(64);  // 5 + 1 blocks: 3 runs
  ASSERT_EQ(r.Get().size(), 4u);
  EXPECT_EQ(r.Get()[3].first, 3);
  for (auto& [id, s] : r.Get()) EXPECT_TRUE(s.ok()) << id;
  q.Release(64);
  q.Release(16);
  EXPECT_EQ(q.committed_kv_tokens(), 0);
  EXPECT_EQ(q.active(), 0);
}

TEST(KvAdmissionQueueTest, FullQueueIsResourceExhaustedSayingKvIsFull) {
  FakePool pool;
  pool.total_blocks = 4;
  Recorder r;
  AdmissionQueue q(-1, /*queue_size=*/1, absl::Hours(1), pool.Fn());
  q.Acquire(48, r.For(0));
  q.Acquire(48, r.For(1));  // waits
  q.Acquire(48, r.For(2));  // the queue is full
  ASSERT_EQ(r.Get().size(), 2u);
  EXPECT_EQ(r.Get()[1].first, 2);
  EXPECT_EQ(r.Get()[1].second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.Get()[1].second.message().find("KV cache is full"), std::string::npos)
      << r.Get()[1].second;
  q.Release(48);
  ASSERT_EQ(r.Get().size(), 3u);
  q.Release(48);
}

TEST(KvAdmissionQueueTest, KvWaitTimesOutAsResourceExhausted) {
  FakePool pool;
  pool.total_blocks = 4;
  Recorder r;
  AdmissionQueue q(-1, 4, absl::Milliseconds(200), pool.Fn());
  q.Acquire(48, r.For(0));
  q.Acquire(48, r.For(1));
  ASSERT_TRUE(r.WaitFor(2, absl::Seconds(10)));
  EXPECT_EQ(r.Get()[1].second.code(), absl::StatusCode::kResourceExhausted) << r.Get()[1].second;
  q.Release(48);
}

TEST(KvAdmissionQueueTest, PoolGrowthAdmitsAWaiterWithoutARelease) {
  FakePool pool;
  pool.total_blocks = 4;
  Recorder r;
  AdmissionQueue q(-1, 4, absl::Hours(1), pool.Fn());
  q.Acquire(48, r.For(0));
  q.Acquire(48, r.For(1));
  EXPECT_EQ(q.queued(), 1);
  pool.total_blocks = 8;  // another worker's report came in
  ASSERT_TRUE(r.WaitFor(2, absl::Seconds(10)));
  EXPECT_TRUE(r.Get()[1].second.ok());
  q.Release(48);
  q.Release(48);
}

TEST(KvAdmissionQueueTest, ConcurrencyLimitStillTimesOutAs408Cause) {
  FakePool pool;  // unknown pool: KV never blocks
  Recorder r;
  AdmissionQueue q(/*max_concurrent=*/1, 4, absl::Milliseconds(200), pool.Fn());
  q.Acquire(48, r.For(0));
  q.Acquire(48, r.For(1));
  ASSERT_TRUE(r.WaitFor(2, absl::Seconds(10)));
  EXPECT_EQ(r.Get()[1].second.code(), absl::StatusCode::kDeadlineExceeded);
  q.Release(48);
}

}  // namespace
}  // namespace tandem::router
