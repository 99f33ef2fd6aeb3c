#include "common/clock.h"

#include <chrono>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(DeadlineTest, PastAndFuture) {
  EXPECT_TRUE(Deadline::After(std::chrono::seconds(-1)).expired());
  EXPECT_TRUE(Deadline::After(MonoClock::duration::zero()).expired());
  EXPECT_EQ(Deadline::After(std::chrono::seconds(-1)).remaining(), MonoClock::duration::zero());
  Deadline future = Deadline::After(std::chrono::hours(1));
  EXPECT_FALSE(future.expired());
  EXPECT_GT(future.remaining(), std::chrono::minutes(59));
  EXPECT_LE(future.remaining(), std::chrono::hours(1));
}

TEST(DeadlineTest, NeverAndEarliest) {
  Deadline never = Deadline::Never();
  EXPECT_TRUE(never.is_never());
  EXPECT_FALSE(never.expired());
  EXPECT_EQ(never.remaining(), MonoClock::duration::max());
  Deadline soon = Deadline::After(std::chrono::seconds(1));
  EXPECT_EQ(Deadline::Earliest(never, soon).when(), soon.when());
  EXPECT_EQ(Deadline::Earliest(soon, never).when(), soon.when());
}

}  // namespace
}  // namespace tandem
