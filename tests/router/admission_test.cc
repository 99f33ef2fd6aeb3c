#include "router/admission.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

struct Recorder {
  absl::Mutex mu;
  std::vector<std::pair<int, absl::Status>> answers;
  AdmissionQueue::Callback For(int id) {
    return [this, id](absl::Status s) {
      absl::MutexLock lock(&mu);
      answers.emplace_back(id, s);
    };
  }
  std::vector<std::pair<int, absl::Status>> Get() {
    absl::MutexLock lock(&mu);
    return answers;
  }
};

TEST(AdmissionQueueTest, UnboundedAdmitsEverythingAtOnce) {
  Recorder r;
  AdmissionQueue q(-1, 0, absl::Seconds(1));
  for (int i = 0; i < 50; ++i) q.Acquire(r.For(i));
  ASSERT_EQ(r.Get().size(), 50u);
  for (auto& [id, s] : r.Get()) EXPECT_TRUE(s.ok()) << id;
  EXPECT_EQ(q.active(), 50);
  for (int i = 0; i < 50; ++i) q.Release();
  EXPECT_EQ(q.active(), 0);
}

TEST(AdmissionQueueTest, QueuesInOrderThenRejectsWhenFull) {
  Recorder r;
  AdmissionQueue q(2, 2, absl::Hours(1));
  for (int i = 0; i < 5; ++i) q.Acquire(r.For(i));
  auto answers = r.Get();
  ASSERT_EQ(answers.size(), 3u);  // 0, 1 admitted; 2, 3 wait; 4 rejected
  EXPECT_TRUE(answers[0].second.ok());
  EXPECT_TRUE(answers[1].second.ok());
  EXPECT_EQ(answers[2].first, 4);
  EXPECT_EQ(answers[2].second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(answers[2].second.message().find("--queue-size"), std::string::npos);
  EXPECT_EQ(q.queued(), 2);
  q.Release();
  answers = r.Get();
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[3].first, 2);
  EXPECT_TRUE(answers[3].second.ok());
  EXPECT_EQ(q.active(), 2);
  EXPECT_EQ(q.queued(), 1);
}

TEST(AdmissionQueueTest, CancelledWaiterIsNeverAnswered) {
  Recorder r;
  AdmissionQueue q(1, 4, absl::Hours(1));
  q.Acquire(r.For(0));
  const uint64_t t1 = q.Acquire(r.For(1));
  q.Acquire(r.For(2));
  EXPECT_TRUE(q.Cancel(t1));
  EXPECT_FALSE(q.Cancel(t1));
  q.Release();
  auto answers = r.Get();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].first, 2);
}

TEST(AdmissionQueueTest, WaitersTimeOutWithDeadlineExceeded) {
  Recorder r;
  AdmissionQueue q(1, 4, absl::Milliseconds(50));
  q.Acquire(r.For(0));
  absl::Notification timed_out;
  absl::Status status;
  q.Acquire([&](absl::Status s) {
    status = s;
    timed_out.Notify();
  });
  ASSERT_TRUE(timed_out.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("--queue-timeout-secs"), std::string::npos);
  EXPECT_EQ(q.queued(), 0);
  EXPECT_EQ(q.active(), 1);
}

// A queue timeout too long for the steady clock saturates: the waiter waits for a slot (no
// overflow into the past, where it would time out at once).
TEST(AdmissionQueueTest, AnEndlessQueueTimeoutWaitsForASlot) {
  Recorder r;
  AdmissionQueue q(1, 1, absl::InfiniteDuration());
  q.Acquire(r.For(0));
  q.Acquire(r.For(1));
  absl::SleepFor(absl::Milliseconds(250));  // past the timer's first rechecks
  ASSERT_EQ(r.Get().size(), 1u);
  EXPECT_EQ(q.queued(), 1);
  q.Release();
  const auto answers = r.Get();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].first, 1);
  EXPECT_TRUE(answers[1].second.ok()) << answers[1].second;
}

TEST(AdmissionQueueTest, DestructionCancelsWaiters) {
  Recorder r;
  {
    AdmissionQueue q(1, 4, absl::Hours(1));
    q.Acquire(r.For(0));
    q.Acquire(r.For(1));
  }
  auto answers = r.Get();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].second.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace tandem::router
