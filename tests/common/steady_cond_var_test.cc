// SteadyCondVar (common/steady_cond_var.h): waits on absl::Mutex-guarded state end at a signal or
// at a monotonic deadline, and give the mutex back held.
#include "common/steady_cond_var.h"

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;

TEST(SteadyCondVarTest, WaitUntilEndsAtTheDeadlineWithTheMutexHeld) {
  absl::Mutex mu;
  SteadyCondVar cv;
  absl::MutexLock lock(&mu);
  const MonoClock::time_point deadline = MonoNow() + milliseconds(50);
  bool signalled = true;
  while (MonoNow() < deadline) signalled = cv.WaitUntil(&mu, deadline);  // spurious wakeups
  EXPECT_FALSE(signalled);
  EXPECT_GE(MonoNow(), deadline);
  mu.AssertHeld();
  EXPECT_FALSE(cv.WaitFor(&mu, milliseconds(0)));  // a past deadline returns at once
}

TEST(SteadyCondVarTest, ATimeoutPastTheClocksRangeWaitsForTheSignal) {
  absl::Mutex mu;
  SteadyCondVar cv;
  bool ready = false;
  std::thread signaller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    absl::MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    absl::MutexLock lock(&mu);
    const MonoClock::time_point start = MonoNow();
    // Unsaturated, now + max would overflow into the past and return at once, again and again.
    while (!ready) EXPECT_TRUE(cv.WaitFor(&mu, MonoClock::duration::max()));
    EXPECT_GE(MonoNow() - start, milliseconds(50));
  }
  signaller.join();
}

TEST(SteadyCondVarTest, SignalAllWakesEveryWaiterAndNoSignalIsLost) {
  absl::Mutex mu;
  SteadyCondVar cv;
  int ready = 0;
  int woken = 0;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      absl::MutexLock lock(&mu);
      const MonoClock::time_point deadline = MonoNow() + std::chrono::seconds(30);
      while (ready == 0 && cv.WaitUntil(&mu, deadline)) {
      }
      if (ready > 0) ++woken;
    });
  }
  {
    absl::MutexLock lock(&mu);
    ready = 1;
  }
  cv.SignalAll();  // after the state changed under the mutex, without holding it
  const MonoClock::time_point start = MonoNow();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woken, 3);
  EXPECT_LT(MonoNow() - start, std::chrono::seconds(25));  // woken, not timed out
}

}  // namespace
}  // namespace tandem
