// HandshakePool: the total and per-source caps refuse newcomers without evicting anyone, a
// connection repeating its Hello keeps one slot, and entries expire on the injected clock.
#include "kvtransfer/tcp/handshake_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::kv {
namespace {

using std::chrono::seconds;

const MonoClock::time_point kT0 = MonoClock::time_point() + std::chrono::hours(1);

TEST(HandshakePoolTest, TotalCapRefusesTheNewcomerAndKeepsEveryEntry) {
  HandshakePool pool(/*max_total=*/4, /*max_per_source=*/100, seconds(10));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.Admit(absl::StrCat("rid", i), absl::StrCat("10.0.0.", i), kT0).ok());
  }
  for (int i = 0; i < 100; ++i) {
    auto r = pool.Admit(absl::StrCat("new", i), "10.0.1.1", kT0);
    ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  }
  EXPECT_EQ(pool.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(pool.Take(absl::StrCat("rid", i), kT0).has_value());
  EXPECT_EQ(pool.size(), 0u);
}

TEST(HandshakePoolTest, PerSourceCapLeavesRoomForOtherSources) {
  HandshakePool pool(/*max_total=*/10, /*max_per_source=*/3, seconds(10));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.Admit(absl::StrCat("a", i), "10.0.0.1", kT0).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.Admit("a3", "10.0.0.1", kT0).status()));
  EXPECT_EQ(pool.from_source("10.0.0.1"), 3u);
  ASSERT_TRUE(pool.Admit("b0", "10.0.0.2", kT0).ok());
  EXPECT_EQ(pool.from_source("10.0.0.2"), 1u);
  // Finishing a handshake frees its source's slot.
  ASSERT_TRUE(pool.Take("a0", kT0).has_value());
  EXPECT_TRUE(pool.Admit("a3", "10.0.0.1", kT0).ok());
}

TEST(HandshakePoolTest, UnknownSourceFallsBackToTheTotalCap) {
  HandshakePool pool(/*max_total=*/5, /*max_per_source=*/1, seconds(10));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Admit(absl::StrCat("r", i), "", kT0).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.Admit("r5", "", kT0).status()));
}

TEST(HandshakePoolTest, RepeatedHelloKeepsOneSlot) {
  HandshakePool pool(/*max_total=*/2, /*max_per_source=*/1, seconds(10));
  for (int i = 0; i < 50; ++i) {
    auto r = pool.Admit("same", "10.0.0.1", kT0 + seconds(i % 5));
    ASSERT_TRUE(r.ok()) << r.status();
    (*r)->client_name = absl::StrCat("attempt ", i);
  }
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(pool.from_source("10.0.0.1"), 1u);
  auto p = pool.Take("same", kT0 + seconds(5));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->client_name, "attempt 49");
}

TEST(HandshakePoolTest, EntriesExpireAndFreeTheirSlots) {
  HandshakePool pool(/*max_total=*/2, /*max_per_source=*/2, seconds(10));
  ASSERT_TRUE(pool.Admit("a", "10.0.0.1", kT0).ok());
  ASSERT_TRUE(pool.Admit("b", "10.0.0.1", kT0 + seconds(5)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.Admit("c", "10.0.0.1", kT0 + seconds(9)).status()));
  // At kT0 + 10 s `a` is due: the new Hello expires it lazily and takes its place.
  ASSERT_TRUE(pool.Admit("c", "10.0.0.1", kT0 + seconds(10)).ok());
  EXPECT_FALSE(pool.Take("a", kT0 + seconds(10)).has_value());
  // An Auth after the deadline finds nothing, even with no Hello in between.
  EXPECT_FALSE(pool.Take("b", kT0 + seconds(15)).has_value());
  EXPECT_EQ(pool.Expire(kT0 + seconds(100)), 1u);  // `c`
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.from_source("10.0.0.1"), 0u);
}

}  // namespace
}  // namespace tandem::kv
