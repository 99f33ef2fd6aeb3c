#include "common/log_every.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(LogEveryTest, OneEventPerIntervalAcrossThreads) {
  LogEvery hourly(absl::Hours(1));
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) allowed += hourly.Allow() ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1);
}

TEST(LogEveryTest, TheNextEventPassesOnceTheIntervalIsOver) {
  LogEvery often(absl::Milliseconds(20));
  EXPECT_TRUE(often.Allow());
  EXPECT_FALSE(often.Allow());
  absl::SleepFor(absl::Milliseconds(25));
  EXPECT_TRUE(often.Allow());
  EXPECT_FALSE(often.Allow());
}

TEST(LogEveryTest, TheAllowedEventCountsTheOnesLeftOut) {
  LogEvery often(absl::Milliseconds(20));
  int64_t more = -1;
  EXPECT_TRUE(often.Allow(&more));
  EXPECT_EQ(more, 0);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(often.Allow(&more));
  absl::SleepFor(absl::Milliseconds(25));
  EXPECT_TRUE(often.Allow(&more));
  EXPECT_EQ(more, 5);
}

}  // namespace
}  // namespace tandem
