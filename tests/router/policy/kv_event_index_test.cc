// KvEventIndex: events apply in order, a gap or another incarnation forces a snapshot and replay,
// eviction is reflected, and the index never answers for a worker it is not synced with.
#include "router/policy/kv_event_index.h"

#include <numeric>
#include <vector>

#include "common/kv_block_hash.h"
#include "common/kv_event_log.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

constexpr int32_t kBs = 4;
const std::string kUrl = "http://w1";

std::vector<int32_t> Tokens(int n, int start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Reads everything `log` has after the index's seq for kUrl, as a subscriber would, resyncing
// from a snapshot when told to. Returns how many snapshots it took.
int Pump(KvEventIndex& index, const KvEventLog& log, size_t page = 2) {
  int snapshots = 0;
  for (int round = 0; round < 1000; ++round) {
    if (!index.Synced(kUrl)) {
      ++snapshots;
      EXPECT_EQ(index.ApplySnapshot(kUrl, log.Snapshot()), KvEventIndex::Apply::kApplied);
    }
    const KvEventBatch batch = log.EventsSince(index.NextSeq(kUrl), page);
    if (index.ApplyEvents(kUrl, batch) == KvEventIndex::Apply::kNeedSnapshot) continue;
    if (batch.events.empty()) return snapshots;
  }
  ADD_FAILURE() << "subscriber never caught up";
  return snapshots;
}

TEST(KvEventIndexTest, UnknownWorkerIsNotPredicted) {
  KvEventIndex index;
  EXPECT_FALSE(index.PredictCachedTokens(kUrl, Tokens(8, 0), 8).has_value());
  KvEventBatch batch;
  EXPECT_EQ(index.ApplyEvents(kUrl, batch), KvEventIndex::Apply::kNeedSnapshot);
}

TEST(KvEventIndexTest, EventsApplyInOrderAndEvictionIsReflected) {
  KvEventIndex index;
  KvEventLog log(5, kBs, 64);
  EXPECT_EQ(Pump(index, log), 1);
  const std::vector<int32_t> prompt = Tokens(13, 0);
  const std::vector<uint64_t> chain = KvBlockHashChain(prompt, kBs);
  log.Stored(chain);  // 3 blocks
  EXPECT_EQ(Pump(index, log), 0);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 100), 12);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 12), 12);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 11), 8);  // whole blocks only
  log.Removed(std::vector<uint64_t>{chain[2]});
  EXPECT_EQ(Pump(index, log), 0);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 100), 8);
  // A different first block matches nothing even though later tokens agree.
  std::vector<int32_t> other = prompt;
  other[0] = 99;
  EXPECT_EQ(index.PredictCachedTokens(kUrl, other, 100), 0);
  const auto view = index.Describe();
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].blocks, 2u);
  EXPECT_EQ(view[0].seq, 4u);
  EXPECT_EQ(view[0].resyncs, 0u);
}

TEST(KvEventIndexTest, OutOfOrderEventIsAGap) {
  KvEventIndex index;
  KvEventLog log(5, kBs, 64);
  Pump(index, log);
  log.Stored(std::vector<uint64_t>{1, 2, 3});
  KvEventBatch batch = log.EventsSince(0, 10);
  batch.events.erase(batch.events.begin() + 1);  // seq 2 lost in transit
  EXPECT_EQ(index.ApplyEvents(kUrl, batch), KvEventIndex::Apply::kNeedSnapshot);
  EXPECT_FALSE(index.Synced(kUrl));
  EXPECT_FALSE(index.PredictCachedTokens(kUrl, Tokens(4, 0), 4).has_value());
  // A repeated batch is harmless once synced again.
  EXPECT_EQ(Pump(index, log), 1);
  EXPECT_EQ(index.ApplyEvents(kUrl, log.EventsSince(0, 10)), KvEventIndex::Apply::kApplied);
  EXPECT_EQ(index.Describe()[0].blocks, 3u);
  EXPECT_EQ(index.Describe()[0].resyncs, 1u);
}

TEST(KvEventIndexTest, GapThenSnapshotThenReplayIsExact) {
  KvEventIndex index;
  KvEventLog log(5, kBs, /*capacity=*/4);
  Pump(index, log);
  const std::vector<int32_t> a = Tokens(40, 0), b = Tokens(40, 1000);
  const auto ca = KvBlockHashChain(a, kBs), cb = KvBlockHashChain(b, kBs);
  log.Stored(ca);  // 10 events: the reader falls behind the 4 retained
  log.Removed(std::vector<uint64_t>{ca[9], ca[8]});
  EXPECT_TRUE(log.EventsSince(index.NextSeq(kUrl), 100).gap);
  EXPECT_EQ(Pump(index, log), 1);
  log.Stored(std::vector<uint64_t>(cb.begin(), cb.begin() + 3));  // replayed after the snapshot
  EXPECT_EQ(Pump(index, log), 0);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, a, 100), 32);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, b, 100), 12);
  EXPECT_EQ(index.Describe()[0].blocks, log.stored_blocks());
  EXPECT_EQ(index.Describe()[0].seq, log.last_seq());
}

TEST(KvEventIndexTest, RestartedWorkerClearsItsIndex) {
  KvEventIndex index;
  const std::vector<int32_t> prompt = Tokens(16, 0);
  {
    KvEventLog before(/*incarnation=*/1, kBs, 64);
    Pump(index, before);
    before.Stored(KvBlockHashChain(prompt, kBs));
    Pump(index, before);
    EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 100), 16);
  }
  KvEventLog after(/*incarnation=*/2, kBs, 64);  // same URL, new process, empty cache
  KvEventBatch batch = after.EventsSince(index.NextSeq(kUrl), 10);
  EXPECT_EQ(index.ApplyEvents(kUrl, batch), KvEventIndex::Apply::kNeedSnapshot);
  EXPECT_FALSE(index.PredictCachedTokens(kUrl, prompt, 100).has_value());
  EXPECT_EQ(Pump(index, after), 1);
  EXPECT_EQ(index.PredictCachedTokens(kUrl, prompt, 100), 0);
  EXPECT_EQ(index.Describe()[0].incarnation, 2u);
}

TEST(KvEventIndexTest, OversizedWorkerFallsBack) {
  KvEventIndex index(/*max_blocks_per_worker=*/2);
  KvEventLog log(1, kBs, 64);
  Pump(index, log);
  log.Stored(std::vector<uint64_t>{1, 2, 3});
  EXPECT_EQ(index.ApplyEvents(kUrl, log.EventsSince(0, 10)), KvEventIndex::Apply::kNeedSnapshot);
  EXPECT_EQ(index.ApplySnapshot(kUrl, log.Snapshot()), KvEventIndex::Apply::kNeedSnapshot);
  EXPECT_FALSE(index.Synced(kUrl));
  index.RemoveWorker(kUrl);
  EXPECT_TRUE(index.Describe().empty());
}

}  // namespace
}  // namespace tandem::router
