#include "router/retry.h"

#include <set>

#include "gtest/gtest.h"

namespace tandem::router {
namespace {

TEST(RetryTest, BackoffGrowsByTheMultiplierUpToTheCap) {
  BackoffOptions o{.max_retries = 5,
                   .initial_backoff = absl::Milliseconds(100),
                   .max_backoff = absl::Milliseconds(1000),
                   .multiplier = 2.0,
                   .jitter_factor = 0.0};
  EXPECT_EQ(BackoffDelayFor(o, 1, 0.7), absl::Milliseconds(100));
  EXPECT_EQ(BackoffDelayFor(o, 2, 0.7), absl::Milliseconds(200));
  EXPECT_EQ(BackoffDelayFor(o, 3, -1), absl::Milliseconds(400));
  EXPECT_EQ(BackoffDelayFor(o, 4, 0), absl::Milliseconds(800));
  EXPECT_EQ(BackoffDelayFor(o, 5, 0), absl::Milliseconds(1000));
  EXPECT_EQ(BackoffDelayFor(o, 500, 0), absl::Milliseconds(1000));  // no overflow
}

TEST(RetryTest, JitterScalesEachDelayWithinItsFactor) {
  BackoffOptions o{.max_retries = 5,
                   .initial_backoff = absl::Milliseconds(100),
                   .max_backoff = absl::Milliseconds(30000),
                   .multiplier = 1.5,
                   .jitter_factor = 0.2};
  EXPECT_EQ(BackoffDelayFor(o, 1, -1.0), absl::Milliseconds(80));
  EXPECT_EQ(BackoffDelayFor(o, 1, 1.0), absl::Milliseconds(120));
  EXPECT_EQ(BackoffDelayFor(o, 1, 5.0), absl::Milliseconds(120));  // u is clamped
  EXPECT_EQ(BackoffDelayFor(o, 2, 0.5), absl::Milliseconds(165));
  // Random draws stay within the bounds and are not all equal.
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) {
    const absl::Duration d = BackoffDelay(o, 2);
    EXPECT_GE(d, absl::Milliseconds(120));
    EXPECT_LE(d, absl::Milliseconds(180));
    seen.insert(absl::ToInt64Microseconds(d));
  }
  EXPECT_GT(seen.size(), 10u);
}

TEST(RetryTest, ZeroBackoffAndBadRetryNumbersAreSafe) {
  BackoffOptions o{.max_retries = 1,
                   .initial_backoff = absl::ZeroDuration(),
                   .max_backoff = absl::ZeroDuration(),
                   .multiplier = 1.0,
                   .jitter_factor = 1.0};
  EXPECT_EQ(BackoffDelayFor(o, 0, -1), absl::ZeroDuration());
  EXPECT_EQ(BackoffDelay(o, -3), absl::ZeroDuration());
}

TEST(RetryTest, RoomsAre63BitAndNeverZero) {
  EXPECT_EQ(RoomFromBits(0), 1u);
  EXPECT_EQ(RoomFromBits(uint64_t{1} << 63), 1u);
  EXPECT_EQ(RoomFromBits(~uint64_t{0}), (uint64_t{1} << 63) - 1);
  EXPECT_EQ(RoomFromBits(12345), 12345u);
  std::set<uint64_t> rooms;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t room = NewBootstrapRoom();
    EXPECT_NE(room, 0u);
    EXPECT_LT(room, uint64_t{1} << 63);
    rooms.insert(room);
  }
  EXPECT_EQ(rooms.size(), 1000u);
}

}  // namespace
}  // namespace tandem::router
