// WorkQueue (common/work_queue.h): jobs run on its threads, the backlog is bounded, Stop() drops
// what is queued and joins.
#include "common/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"

namespace tandem {
namespace {

TEST(WorkQueueTest, RunsEveryJobOffTheCallingThread) {
  WorkQueue queue("test", 2, 100);
  std::atomic<int> ran{0};
  std::atomic<bool> on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  absl::Notification done;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(queue.Post([&] {
      if (std::this_thread::get_id() == caller) on_caller = true;
      if (++ran == 50) done.Notify();
    }));
  }
  done.WaitForNotification();
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(on_caller.load());
}

TEST(WorkQueueTest, RefusesBeyondTheBacklogAndAcceptsAgainOnceJobsEnd) {
  WorkQueue queue("test", 1, 3);
  absl::Notification release;
  absl::Notification started;
  std::atomic<int> ran{0};
  // One running (blocked) and two queued fill the three slots.
  ASSERT_TRUE(queue.Post([&] {
    started.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  started.WaitForNotification();
  ASSERT_TRUE(queue.Post([&] { ++ran; }));
  ASSERT_TRUE(queue.Post([&] { ++ran; }));
  EXPECT_EQ(queue.pending(), 3);
  // A refused job is destroyed unrun, on the calling thread.
  auto token = std::make_shared<int>(0);
  EXPECT_FALSE(queue.Post([&, token] { ++ran; }));
  EXPECT_EQ(token.use_count(), 1);
  release.Notify();
  for (int i = 0; i < 10000 && queue.pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(queue.pending(), 0);
  EXPECT_EQ(ran.load(), 3);
  absl::Notification again;
  EXPECT_TRUE(queue.Post([&] { again.Notify(); }));
  again.WaitForNotification();
}

TEST(WorkQueueTest, StopDropsQueuedJobsAndRefusesNewOnes) {
  auto queue = std::make_unique<WorkQueue>("test", 1, 10);
  absl::Notification release;
  absl::Notification started;
  std::atomic<int> ran{0};
  ASSERT_TRUE(queue->Post([&] {
    started.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  started.WaitForNotification();
  auto token = std::make_shared<int>(0);
  ASSERT_TRUE(queue->Post([&, token] { ++ran; }));
  EXPECT_EQ(token.use_count(), 2);
  std::thread stopper([&] { queue->Stop(); });
  // Stop destroys the queued job before it joins the running one.
  for (int i = 0; i < 10000 && token.use_count() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(token.use_count(), 1);
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran.load(), 1);  // the running job finished; the queued one never ran
  EXPECT_FALSE(queue->Post([&] { ++ran; }));
  queue.reset();  // a second Stop (the destructor's) is harmless
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace tandem
