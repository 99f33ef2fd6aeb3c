// The KV block hash contract (pinned by a golden value) and the worker-side event log: ordering,
// bounded retention, gaps and snapshots.
#include "common/kv_event_log.h"

#include <algorithm>
#include <vector>

#include "common/kv_block_hash.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(KvBlockHashTest, ContractIsPinned) {
  // The first block's hash of tokens 0..3: SHA-256 over the seed's 8 little-endian bytes followed
  // by 0,1,2,3 as int32 little-endian, first 8 digest bytes little-endian. Changing the contract
  // changes this value, and every router and worker must change with it.
  const std::vector<int32_t> tokens = {0, 1, 2, 3};
  EXPECT_EQ(KvBlockHash(kKvBlockHashSeed, tokens), KvBlockHashChain(tokens, 4)[0]);
  EXPECT_EQ(KvBlockHash(kKvBlockHashSeed, tokens), 0xa1212f46254beaadULL);
}

TEST(KvBlockHashTest, ChainCoversTheWholePrefix) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int32_t> b = a;
  b[0] = 100;  // same second block, different first block
  const auto ca = KvBlockHashChain(a, 4);
  const auto cb = KvBlockHashChain(b, 4);
  ASSERT_EQ(ca.size(), 2u);  // the partial third block is not hashed
  EXPECT_NE(ca[1], cb[1]);
  EXPECT_EQ(ca[1], KvBlockHash(ca[0], std::span<const int32_t>(a).subspan(4, 4)));
  EXPECT_EQ(KvBlockHashChain(a, 4, 1).size(), 1u);
  EXPECT_TRUE(KvBlockHashChain(a, 0).empty());
}

TEST(KvEventLogTest, EventsAreSequencedInOrder) {
  KvEventLog log(/*incarnation=*/7, /*block_size=*/4, /*capacity=*/16);
  const std::vector<uint64_t> stored = {10, 11, 12};
  const std::vector<uint64_t> removed = {12};
  log.Stored(stored);
  log.Removed(removed);
  const KvEventBatch batch = log.EventsSince(0, 100);
  EXPECT_FALSE(batch.gap);
  EXPECT_EQ(batch.incarnation, 7u);
  EXPECT_EQ(batch.block_size, 4);
  ASSERT_EQ(batch.events.size(), 4u);
  for (size_t i = 0; i < batch.events.size(); ++i) EXPECT_EQ(batch.events[i].seq, i + 1);
  EXPECT_EQ(batch.events[0].block_hash, 10u);
  EXPECT_EQ(batch.events[3].kind, KvBlockEvent::Kind::kRemoved);
  EXPECT_EQ(batch.events[3].block_hash, 12u);
  EXPECT_EQ(batch.last_seq, 4u);
  // Paging: at most max_events, from after the asked seq.
  const KvEventBatch page = log.EventsSince(1, 2);
  ASSERT_EQ(page.events.size(), 2u);
  EXPECT_EQ(page.events[0].seq, 2u);
  EXPECT_TRUE(log.EventsSince(4, 10).events.empty());
  EXPECT_FALSE(log.EventsSince(4, 10).gap);
}

TEST(KvEventLogTest, SlowReaderSeesAGapNotUnboundedMemory) {
  KvEventLog log(1, 4, /*capacity=*/3);
  for (uint64_t h = 1; h <= 10; ++h) log.Stored(std::vector<uint64_t>{h});
  EXPECT_EQ(log.dropped_events(), 7u);
  EXPECT_TRUE(log.EventsSince(0, 100).gap);
  EXPECT_TRUE(log.EventsSince(6, 100).gap);
  const KvEventBatch tail = log.EventsSince(7, 100);
  EXPECT_FALSE(tail.gap);
  ASSERT_EQ(tail.events.size(), 3u);
  EXPECT_EQ(tail.events[0].seq, 8u);
  // A seq this log never reached is some other incarnation's: a gap too.
  EXPECT_TRUE(log.EventsSince(11, 100).gap);
}

TEST(KvEventLogTest, SnapshotIsTheLiveSetAtItsSeq) {
  KvEventLog log(1, 4, 2);
  log.Stored(std::vector<uint64_t>{1, 2, 3});
  log.Removed(std::vector<uint64_t>{2});
  log.Removed(std::vector<uint64_t>{2});  // not stored: no event
  log.Stored(std::vector<uint64_t>{3});   // already stored: no event
  KvSnapshot s = log.Snapshot();
  std::sort(s.block_hashes.begin(), s.block_hashes.end());
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(s.seq, 4u);
  EXPECT_EQ(log.stored_blocks(), 2u);
}

}  // namespace
}  // namespace tandem
