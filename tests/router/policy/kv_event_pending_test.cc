// KvEventIndex's in-flight overlay: a prompt sent to a worker counts as cached there until the
// worker's events confirm it (then an eviction is reflected) or its time runs out, never across
// a resync (cache_aware's use of it: policy_test.cc). Time is a ManualClock: no sleeps.
#include <chrono>
#include <numeric>
#include <vector>

#include "common/kv_block_hash.h"
#include "common/kv_event_log.h"
#include "common/manual_clock.h"
#include "gtest/gtest.h"
#include "router/policy/kv_event_index.h"

namespace tandem::router {
namespace {

constexpr int32_t kBs = 4;
constexpr auto kTtl = std::chrono::seconds(5);
const std::string kUrl = "http://w1";

std::vector<int32_t> Tokens(int n, int start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Applies everything `log` has after the index's seq for `url`, resyncing when told to.
void Pump(KvEventIndex& index, const KvEventLog& log, const std::string& url = kUrl) {
  for (int round = 0; round < 100; ++round) {
    if (!index.Synced(url)) {
      ASSERT_EQ(index.ApplySnapshot(url, log.Snapshot()), KvEventIndex::Apply::kApplied);
    }
    const KvEventBatch batch = log.EventsSince(index.NextSeq(url), 64);
    if (index.ApplyEvents(url, batch) == KvEventIndex::Apply::kNeedSnapshot) continue;
    if (batch.events.empty()) return;
  }
  ADD_FAILURE() << "never caught up";
}

class KvEventPendingTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  KvEventIndex index_{size_t{1} << 20, kTtl, clock_};
  KvEventLog log_{/*incarnation=*/1, kBs, 256};
};

TEST_F(KvEventPendingTest, PendingCountsUntilConfirmedThenEvictionIsReflected) {
  Pump(index_, log_);
  const std::vector<int32_t> prompt = Tokens(13, 0);  // 3 full blocks
  const std::vector<uint64_t> chain = KvBlockHashChain(prompt, kBs);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 12), 0);
  index_.AddPending(kUrl, kBs, chain);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 12), 12);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 11), 8);  // whole blocks, capped
  EXPECT_EQ(index_.StoredBlocks(kUrl), 0u);                    // pending is not stored
  EXPECT_EQ(index_.Describe()[0].pending, 3u);
  // The worker stores them: the stored set answers from now on, the overlay lets go.
  log_.Stored(chain);
  Pump(index_, log_);
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 12), 12);
  // An eviction is reflected at once, although the blocks were placed by the router.
  log_.Removed(std::vector<uint64_t>{chain[2], chain[1]});
  Pump(index_, log_);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 12), 4);
}

TEST_F(KvEventPendingTest, UnconfirmedPendingExpires) {
  Pump(index_, log_);
  const std::vector<int32_t> prompt = Tokens(16, 0);
  index_.AddPending(kUrl, kBs, KvBlockHashChain(prompt, kBs));
  clock_.Advance(kTtl - std::chrono::milliseconds(1));
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 15), 12);
  clock_.Advance(std::chrono::milliseconds(1));  // the request failed: nothing was stored
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 15), 0);
  EXPECT_EQ(index_.Describe()[0].pending, 4u);  // dropped with the next applied batch
  Pump(index_, log_);
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
}

TEST_F(KvEventPendingTest, StoredThenPendingThenEvictedDoesNotLinger) {
  Pump(index_, log_);
  const std::vector<int32_t> prompt = Tokens(9, 0);  // 2 full blocks
  const std::vector<uint64_t> chain = KvBlockHashChain(prompt, kBs);
  log_.Stored(chain);
  Pump(index_, log_);
  index_.AddPending(kUrl, kBs, chain);  // already stored: nothing becomes pending
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
  log_.Removed(chain);
  Pump(index_, log_);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 8), 0);
}

TEST_F(KvEventPendingTest, StoredPrefixAndPendingRestChain) {
  Pump(index_, log_);
  const std::vector<int32_t> a = Tokens(8, 0);
  const std::vector<int32_t> b = Tokens(17, 0);  // a's 2 blocks, then 2 more
  log_.Stored(KvBlockHashChain(a, kBs));
  Pump(index_, log_);
  index_.AddPending(kUrl, kBs, KvBlockHashChain(b, kBs));
  EXPECT_EQ(index_.Describe()[0].pending, 2u);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, b, 16), 16);
  // A prompt agreeing only in its first block matches that block alone.
  std::vector<int32_t> c = b;
  c[5] = 999;
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, c, 16), 4);
}

TEST_F(KvEventPendingTest, ResyncDropsPendingAndOtherBlockSizesAreIgnored) {
  const std::vector<int32_t> prompt = Tokens(16, 0);
  index_.AddPending(kUrl, kBs, KvBlockHashChain(prompt, kBs));  // not synced: ignored
  Pump(index_, log_);
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
  index_.AddPending(kUrl, 8, KvBlockHashChain(prompt, 8));  // not the worker's block size
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
  EXPECT_FALSE(index_.MatchedBlocks(kUrl, 8, KvBlockHashChain(prompt, 8)).has_value());
  index_.AddPending(kUrl, kBs, KvBlockHashChain(prompt, kBs));
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 15), 12);
  // The worker restarts: its cache and whatever was on its way there are gone.
  KvEventLog restarted(/*incarnation=*/2, kBs, 256);
  EXPECT_EQ(index_.ApplyEvents(kUrl, restarted.EventsSince(index_.NextSeq(kUrl), 64)),
            KvEventIndex::Apply::kNeedSnapshot);
  Pump(index_, restarted);
  EXPECT_EQ(index_.Describe()[0].pending, 0u);
  EXPECT_EQ(index_.PredictCachedTokens(kUrl, prompt, 15), 0);
}

}  // namespace
}  // namespace tandem::router
