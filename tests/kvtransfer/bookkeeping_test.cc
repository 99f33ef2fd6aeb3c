// RegionTable, BatchTracker and batch planning: the logic every backend shares.
#include <gtest/gtest.h>

#include <thread>

#include "kvtransfer/batch_plan.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/region_table.h"

namespace tandem::kv {
namespace {

TEST(RegionTableTest, ChecksBoundsOverflowAndWindows) {
  std::vector<uint8_t> a(4096), b(4096);
  RegionTable t;
  ASSERT_TRUE(t.Add({1, a.data(), a.size(), false}).ok());
  ASSERT_TRUE(t.Add({2, b.data(), b.size(), true}).ok());
  EXPECT_FALSE(t.Add({1, b.data() + 10, 10, false}).ok());   // duplicate id
  EXPECT_FALSE(t.Add({3, a.data() + 100, 10, false}).ok());  // overlap
  EXPECT_FALSE(t.Add({4, nullptr, 10, false}).ok());
  EXPECT_TRUE(t.CheckIncomingWrite("p", 1, 0, 4096).ok());
  EXPECT_TRUE(t.CheckIncomingWrite("p", 1, 4096, 0).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 1, 1, 4096).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 1, UINT64_MAX, 2).ok());  // offset+len overflows
  EXPECT_FALSE(t.CheckIncomingWrite("p", 1, 2, UINT64_MAX).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 9, 0, 1).ok());  // unknown region
  // Restricted region: nothing until a window opens, only for that peer and range.
  EXPECT_EQ(t.CheckIncomingWrite("p", 2, 0, 16).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto w = t.OpenWindow("p", 2, 1024, 512);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(t.CheckIncomingWrite("p", 2, 1024, 512).ok());
  EXPECT_TRUE(t.CheckIncomingWrite("p", 2, 1100, 100).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 2, 1000, 100).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 2, 1500, 100).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("q", 2, 1024, 16).ok());
  EXPECT_FALSE(t.OpenWindow("p", 1, 0, 16).ok());  // region 1 is not restricted
  EXPECT_FALSE(t.OpenWindow("p", 2, 4000, 200).ok());
  ASSERT_TRUE(t.CloseWindow(*w).ok());
  EXPECT_FALSE(t.CheckIncomingWrite("p", 2, 1024, 16).ok());
  EXPECT_FALSE(t.CloseWindow(*w).ok());
  t.Freeze();
  EXPECT_FALSE(t.Add({5, a.data(), 1, false}).ok());
}

TEST(BatchTrackerTest, StateMachineAndFirstTerminalWins) {
  BatchTracker t;
  BatchId id = t.Create(1, 100, {});
  EXPECT_EQ(t.Poll(id)->state, BatchState::kPending);
  t.MarkInProgress(id);
  t.AddAcked(id, 60);
  EXPECT_EQ(t.Poll(id)->state, BatchState::kInProgress);
  EXPECT_EQ(t.Release(id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(t.Finish(id, BatchState::kCompleted));
  EXPECT_FALSE(t.Finish(id, BatchState::kFailed, absl::InternalError("late")));
  EXPECT_EQ(t.Poll(id)->state, BatchState::kCompleted);
  EXPECT_EQ(t.Poll(id)->bytes_acked, 60u);
  EXPECT_FALSE(*t.Cancel(id));
  EXPECT_TRUE(t.Release(id).ok());
  EXPECT_EQ(t.Poll(id).status().code(), absl::StatusCode::kNotFound);
}

TEST(BatchTrackerTest, WaitDeadlinesCallbacksAndPeerFailure) {
  BatchTracker t;
  BatchId a = t.Create(1, 1, {});
  auto s = t.Wait(a, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(s->state, BatchState::kPending);  // deadline passing is an ordinary result
  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(20));
    t.Finish(a, BatchState::kCompleted);
  });
  EXPECT_EQ(t.Wait(a, absl::InfiniteFuture())->state, BatchState::kCompleted);
  finisher.join();

  int calls = 0;
  BatchState seen = BatchState::kPending;
  SubmitOptions o;
  o.deadline = absl::Now() - absl::Seconds(1);
  o.on_done = [&](BatchId, const BatchStatus& st) {
    ++calls;
    seen = st.state;
  };
  BatchId b = t.Create(2, 1, o);
  EXPECT_EQ(t.NextDeadline(), o.deadline);
  EXPECT_EQ(t.ExpireDeadlines(absl::Now()).size(), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, BatchState::kTimedOut);
  EXPECT_EQ(t.Poll(b).status().code(), absl::StatusCode::kNotFound);  // callback batches go

  BatchId c = t.Create(3, 1, {}), d = t.Create(4, 1, {});
  t.FailPeer(3, absl::UnavailableError("gone"));
  EXPECT_EQ(t.Poll(c)->state, BatchState::kFailed);
  EXPECT_EQ(t.Poll(c)->error.message(), "gone");
  EXPECT_EQ(t.Poll(d)->state, BatchState::kPending);
  EXPECT_TRUE(*t.Cancel(d));
  EXPECT_EQ(t.Poll(d)->state, BatchState::kCancelled);
}

TEST(BatchPlanTest, CoalescesContiguousAndSlices) {
  std::vector<WriteOp> ops = {
      {1, 4096, 2, 8192, 4096},
      {1, 0, 2, 4096, 4096},     // contiguous once sorted
      {1, 8192, 2, 20000, 100},  // remote gap: separate
      {1, 9000, 2, 20100, 0},    // empty: dropped
  };
  auto merged = CoalesceOps(ops);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].local_offset, 0u);
  EXPECT_EQ(merged[0].remote_offset, 4096u);
  EXPECT_EQ(merged[0].length, 8192u);
  auto slices = PlanBatch(ops, 3000, 2, 1);
  uint64_t total = 0;
  int last[2] = {0, 0};
  for (const auto& s : slices) {
    EXPECT_LE(s.op.length, 3000u);
    total += s.op.length;
    if (s.last_on_lane) last[s.lane]++;
  }
  EXPECT_EQ(total, 8192u + 100u);
  EXPECT_EQ(slices.size(), 4u);  // 3000+3000+2192, then 100
  EXPECT_EQ(slices[0].lane, 1);
  EXPECT_EQ(last[0], 1);
  EXPECT_EQ(last[1], 1);
}

}  // namespace
}  // namespace tandem::kv
