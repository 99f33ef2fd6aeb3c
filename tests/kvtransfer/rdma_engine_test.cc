// The rdma backend's logic against the fake verbs layer: queue-pair exchange over the
// authenticated control channel, chained one-sided writes, completion and notification
// ordering, and every failure path (bad rkey, bounds, queue pair in error, lost and late
// completions, cancellation).
#include "kvtransfer/rdma/rdma_engine.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/synchronization/mutex.h"
#include "kvtransfer/rdma/fake_verbs.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

constexpr uint64_t kSize = 4 << 20;

struct Node {
  std::vector<uint8_t> src, dst;
  absl::Mutex mu;
  std::vector<std::pair<std::string, uint64_t>> notes;
  // Last: destroyed first, so its threads stop before the memory and `notes` they touch go.
  TransferEnginePtr engine;
};

class RdmaEngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Node> MakeNode(const std::string& name, EngineOptions o) {
    auto n = std::make_unique<Node>();
    n->src = testing::RandomBytes(kSize, name.size());
    n->dst.assign(kSize, 0);
    Node* raw = n.get();
    o.on_notification = [raw](const std::string&, const std::string& msg) {
      uint64_t sum = testing::Fnv1a(raw->dst.data(), raw->dst.size());
      absl::MutexLock lock(&raw->mu);
      raw->notes.push_back({msg, sum});
    };
    auto e = CreateRdmaEngine(o, rdma::CreateFakeVerbs(fabric_, "fake_" + name));
    EXPECT_TRUE(e.ok()) << e.status();
    n->engine = std::move(*e);
    EXPECT_TRUE(n->engine->RegisterRegion({1, n->src.data(), kSize, false}).ok());
    EXPECT_TRUE(n->engine->RegisterRegion({2, n->dst.data(), kSize, false}).ok());
    EXPECT_TRUE(n->engine->Start().ok());
    return n;
  }
  std::unique_ptr<Node> MakeNode(const std::string& name) {
    EngineOptions o = testing::TestOptions(name);
    o.slice_bytes = 64 * 1024;
    o.lanes = 3;
    return MakeNode(name, o);
  }
  BatchStatus Run(Node& n, PeerId peer, const std::vector<WriteOp>& ops,
                  absl::Duration timeout = absl::Seconds(10)) {
    SubmitOptions o;
    o.deadline = absl::Now() + timeout;
    auto r = n.engine->Submit(peer, ops, o);
    EXPECT_TRUE(r.ok() && r->accepted) << r.status();
    if (!r.ok() || !r->accepted) return {};
    auto s = *n.engine->Wait(r->id, absl::InfiniteFuture());
    EXPECT_TRUE(n.engine->Release(r->id).ok());
    return s;
  }

  std::shared_ptr<rdma::FakeFabric> fabric_ = std::make_shared<rdma::FakeFabric>();
};

TEST_F(RdmaEngineTest, RandomBatchesRoundTripByteForByte) {
  auto a = MakeNode("a"), b = MakeNode("b");
  auto peer = a->engine->ImportPeer(*b->engine->ExportDescriptor());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::mt19937_64 rng(3);
  std::vector<uint8_t> expected(kSize, 0);
  for (int round = 0; round < 10; ++round) {
    auto ops = testing::RandomOps(rng, kSize, 1 + rng() % 100, 1, 2);
    uint64_t total = 0;
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, a->src.data() + op.local_offset, op.length);
      total += op.length;
    }
    BatchStatus s = Run(*a, *peer, ops);
    ASSERT_EQ(s.state, BatchState::kCompleted) << s.error;
    EXPECT_EQ(s.bytes_acked, total);
    ASSERT_EQ(b->dst, expected);
  }
}

TEST_F(RdmaEngineTest, NotificationFollowsTheData) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = *a->engine->ImportPeer(*b->engine->ExportDescriptor());
  fabric_->DelayCompletions(absl::Milliseconds(30));  // writes settle late; notify must wait
  std::vector<uint8_t> expected(kSize, 0);
  std::mt19937_64 rng(4);
  for (int layer = 0; layer < 6; ++layer) {
    auto ops = testing::RandomOps(rng, kSize, 20, 1, 2);
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, a->src.data() + op.local_offset, op.length);
    }
    SubmitOptions o;
    o.on_done = [](BatchId, const BatchStatus&) {};
    ASSERT_TRUE(a->engine->Submit(peer, ops, o)->accepted);
  }
  auto n = a->engine->Notify(peer, "room-1", {});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(a->engine->Wait(*n, absl::Now() + absl::Seconds(10))->state, BatchState::kCompleted);
  // On rdma "completed" means placed in the peer's receive buffer; its poller then delivers it.
  absl::MutexLock lock(&b->mu);
  b->mu.AwaitWithTimeout(
      absl::Condition(
          +[](Node* n) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !n->notes.empty(); }, b.get()),
      absl::Seconds(5));
  ASSERT_EQ(b->notes.size(), 1u);
  EXPECT_EQ(b->notes[0].first, "room-1");
  EXPECT_EQ(b->notes[0].second, testing::Fnv1a(expected.data(), kSize));
}

TEST_F(RdmaEngineTest, BadRkeyFailsTheBatchAndThePeer) {
  auto a = MakeNode("a"), b = MakeNode("b");
  Descriptor d = *DecodeDescriptor(*b->engine->ExportDescriptor());
  for (RegionInfo& r : d.regions) r.rkey ^= 0x5a5a;
  PeerId peer = *a->engine->ImportPeer(EncodeDescriptor(d));
  BatchStatus s = Run(*a, peer, {WriteOp{1, 0, 2, 0, 4096}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  EXPECT_NE(s.error.message().find("remote access error"), std::string::npos) << s.error;
  EXPECT_EQ(b->dst, std::vector<uint8_t>(kSize, 0));
  EXPECT_EQ(a->engine->Submit(peer, {{WriteOp{1, 0, 2, 0, 16}}}, {}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(RdmaEngineTest, WriteBeyondTheMemoryRegionIsRefusedByTheTarget) {
  auto a = MakeNode("a"), b = MakeNode("b");
  Descriptor d = *DecodeDescriptor(*b->engine->ExportDescriptor());
  for (RegionInfo& r : d.regions) r.size *= 2;  // a lying descriptor
  PeerId peer = *a->engine->ImportPeer(EncodeDescriptor(d));
  BatchStatus s = Run(*a, peer, {WriteOp{1, 0, 2, kSize - 100, 4096}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  EXPECT_NE(s.error.message().find("remote access error"), std::string::npos) << s.error;
}

TEST_F(RdmaEngineTest, QueuePairInErrorFailsTheBatch) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = *a->engine->ImportPeer(*b->engine->ExportDescriptor());
  for (uint32_t qp : fabric_->QpNumbers()) fabric_->SetQpError(qp);
  BatchStatus s = Run(*a, peer, {WriteOp{1, 0, 2, 0, 1 << 20}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  EXPECT_NE(s.error.message().find("flushed"), std::string::npos) << s.error;
}

TEST_F(RdmaEngineTest, LostCompletionEndsAtTheDeadlineAndLateOneCompletes) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = *a->engine->ImportPeer(*b->engine->ExportDescriptor());
  fabric_->DropCompletions(1);
  const absl::Time start = absl::Now();
  BatchStatus s = Run(*a, peer, {WriteOp{1, 0, 2, 0, 1000}}, absl::Milliseconds(300));
  EXPECT_EQ(s.state, BatchState::kTimedOut);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  fabric_->DelayCompletions(absl::Milliseconds(100));
  SubmitOptions o;
  auto r = a->engine->Submit(peer, {{WriteOp{1, 0, 2, 0, 1000}}}, o);
  ASSERT_TRUE(r.ok() && r->accepted);
  EXPECT_EQ(a->engine->Poll(r->id)->state, BatchState::kInProgress);
  EXPECT_EQ(a->engine->Wait(r->id, absl::Now() + absl::Seconds(5))->state, BatchState::kCompleted);
}

TEST_F(RdmaEngineTest, CancelReportsCancelledAndLaterTrafficFlows) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = *a->engine->ImportPeer(*b->engine->ExportDescriptor());
  fabric_->DelayCompletions(absl::Milliseconds(100));
  auto r = a->engine->Submit(peer, {{WriteOp{1, 0, 2, 0, 1 << 20}}}, {});
  ASSERT_TRUE(r.ok() && r->accepted);
  ASSERT_TRUE(a->engine->Cancel(r->id).ok());
  EXPECT_EQ(a->engine->Poll(r->id)->state, BatchState::kCancelled);
  fabric_->DelayCompletions(absl::ZeroDuration());
  auto n = a->engine->Notify(peer, "after", {});
  EXPECT_EQ(a->engine->Wait(*n, absl::Now() + absl::Seconds(5))->state, BatchState::kCompleted);
  EXPECT_EQ(Run(*a, peer, {WriteOp{1, 0, 2, 0, 4096}}).state, BatchState::kCompleted);
}

TEST_F(RdmaEngineTest, MembershipCompatibilityAndWindowsAreEnforced) {
  auto b = MakeNode("b");
  EngineOptions o = testing::TestOptions("intruder", "not-the-cluster-secret!");
  auto a = MakeNode("intruder", o);
  auto p = a->engine->ImportPeer(*b->engine->ExportDescriptor());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << p.status();
  EngineOptions c = testing::TestOptions("other-model");
  c.compat.dtype = "fp32";
  auto m = MakeNode("other-model", c);
  p = m->engine->ImportPeer(*b->engine->ExportDescriptor());
  EXPECT_NE(p.status().message().find("dtype: local fp32, peer bf16"), std::string::npos);

  auto e = CreateRdmaEngine(testing::TestOptions("r"), rdma::CreateFakeVerbs(fabric_, "x"));
  std::vector<uint8_t> mem(64);
  EXPECT_EQ((*e)->RegisterRegion({1, mem.data(), mem.size(), true}).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tandem::kv
