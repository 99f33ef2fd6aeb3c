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

}  // namespace
}  // namespace tandem
