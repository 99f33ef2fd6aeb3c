#include "common/timer_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"

namespace tandem {
namespace {

TEST(TimerQueueTest, RunsInTimeOrderNotSchedulingOrder) {
  TimerQueue timers;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  const absl::Time now = absl::Now();
  timers.RunAt(now + absl::Milliseconds(60), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(3);
    done.Notify();
  });
  timers.RunAt(now + absl::Milliseconds(20), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  timers.RunAt(now + absl::Milliseconds(40), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimerQueueTest, AnEarlierTimerWakesASleepingQueue) {
  TimerQueue timers;
  std::atomic<bool> late_ran{false};
  timers.RunAt(absl::Now() + absl::Hours(1), [&] { late_ran = true; });
  absl::Notification soon;
  const absl::Time start = absl::Now();
  timers.RunAt(absl::InfinitePast(), [&] { soon.Notify(); });
  ASSERT_TRUE(soon.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Not a timing assertion on speed: only that it ran long before the hour-long sleep ended.
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
  EXPECT_FALSE(late_ran);
}

TEST(TimerQueueTest, CancelledTimersDoNotRunAndCancelReportsWhetherItHadStarted) {
  TimerQueue timers;
  std::atomic<int> ran{0};
  const TimerQueue::Id id = timers.RunAt(absl::Now() + absl::Milliseconds(50), [&] { ran += 1; });
  EXPECT_NE(id, 0u);
  EXPECT_TRUE(timers.Cancel(id));
  EXPECT_FALSE(timers.Cancel(id));
  absl::Notification marker;
  const TimerQueue::Id ran_id = timers.RunAt(absl::Now() + absl::Milliseconds(100), [&] {
    ran += 10;
    marker.Notify();
  });
  ASSERT_TRUE(marker.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(timers.Cancel(ran_id));
  EXPECT_FALSE(timers.Cancel(12345));
  EXPECT_EQ(ran.load(), 10);
}

TEST(TimerQueueTest, AClosureMaySchedulePostAndCancel) {
  TimerQueue timers;
  absl::Notification second;
  std::atomic<bool> cancelled_ran{false};
  timers.RunAt(absl::InfinitePast(), [&] {
    const TimerQueue::Id doomed =
        timers.RunAt(absl::Now() + absl::Milliseconds(10), [&] { cancelled_ran = true; });
    timers.Cancel(doomed);
    timers.RunAt(absl::Now() + absl::Milliseconds(30), [&] { second.Notify(); });
  });
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(cancelled_ran);
}

TEST(TimerQueueTest, StopDropsPendingClosuresWithoutRunningThem) {
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> weak = owned;
  std::atomic<bool> ran{false};
  TimerQueue timers;
  timers.RunAt(absl::Now() + absl::Hours(1), [owned = std::move(owned), &ran] { ran = true; });
  timers.Stop();
  EXPECT_TRUE(weak.expired());  // the closure (and what it owned) is gone
  EXPECT_FALSE(ran);
  EXPECT_EQ(timers.RunAt(absl::Now(), [&] { ran = true; }), 0u);  // refused after Stop
  timers.Stop();                                                  // idempotent
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace tandem
