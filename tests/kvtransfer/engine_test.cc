// Behaviour every backend shares, run against `fake` and `tcp` (loopback, in process):
// byte-exact round trips of random batches, bounds and windows, authentication, compatibility,
// cancellation, "no room", deadlines and notification ordering.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "absl/synchronization/mutex.h"
#include "kvtransfer/factory.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

using testing::RandomBytes;
using testing::TestOptions;

constexpr uint64_t kSize = 4 << 20;

// One engine with one source region (id 1) and one destination region (id 2), plus what its
// notification handler saw.
struct Node {
  std::vector<uint8_t> src, dst;
  absl::Mutex mu;
  std::vector<std::pair<std::string, uint64_t>> notes;
  // Last: destroyed first, so its threads stop before the memory and `notes` they touch go.
  TransferEnginePtr engine;  // message, dst checksum at arrival
};

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Node> MakeNode(const std::string& name, EngineOptions o,
                                 bool restricted = false) {
    auto n = std::make_unique<Node>();
    n->src = RandomBytes(kSize, std::hash<std::string>()(name));
    n->dst.assign(kSize, 0);
    Node* raw = n.get();
    o.name = name + "-" + std::to_string(counter_++) + "-" + GetParam();
    o.on_notification = [raw](const std::string&, const std::string& msg) {
      uint64_t sum = testing::Fnv1a(raw->dst.data(), raw->dst.size());
      absl::MutexLock lock(&raw->mu);
      raw->notes.push_back({msg, sum});
    };
    auto e = CreateTransferEngine(GetParam(), std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    n->engine = std::move(*e);
    EXPECT_TRUE(n->engine->RegisterRegion({1, n->src.data(), n->src.size(), false}).ok());
    EXPECT_TRUE(n->engine->RegisterRegion({2, n->dst.data(), n->dst.size(), restricted}).ok());
    absl::Status s = n->engine->Start();
    EXPECT_TRUE(s.ok()) << s;
    return n;
  }
  std::unique_ptr<Node> MakeNode(const std::string& name, bool restricted = false) {
    return MakeNode(name, TestOptions(name), restricted);
  }

  PeerId Connect(Node& from, Node& to) {
    auto d = to.engine->ExportDescriptor();
    EXPECT_TRUE(d.ok()) << d.status();
    auto p = from.engine->ImportPeer(*d);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : 0;
  }

  BatchStatus SubmitAndWait(Node& n, PeerId peer, const std::vector<WriteOp>& ops,
                            absl::Duration timeout = absl::Seconds(20)) {
    SubmitOptions o;
    o.deadline = absl::Now() + timeout;
    auto r = n.engine->Submit(peer, ops, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || !r->accepted) return BatchStatus{BatchState::kFailed, r.status()};
    auto s = n.engine->Wait(r->id, absl::InfiniteFuture());
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE(n.engine->Release(r->id).ok());
    return *s;
  }

  static inline std::atomic<int> counter_{0};
};

TEST_P(EngineTest, RandomBatchesRoundTripByteForByte) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 8; ++round) {
    std::vector<uint8_t> expected = b->dst;
    int count = 1 + rng() % 64;
    auto ops = testing::RandomOps(rng, kSize, count, 1, 2);
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, a->src.data() + op.local_offset, op.length);
    }
    BatchStatus s = SubmitAndWait(*a, peer, ops);
    ASSERT_EQ(s.state, BatchState::kCompleted) << s.error;
    uint64_t total = 0;
    for (const WriteOp& op : ops) total += op.length;
    EXPECT_EQ(s.bytes_acked, total);
    ASSERT_EQ(b->dst, expected) << "round " << round;
  }
  EXPECT_GT(b->engine->stats().bytes_applied, 0u);
}

TEST_P(EngineTest, ManySmallScatteredWritesLandExactly) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  std::vector<WriteOp> ops;
  std::vector<uint8_t> expected(kSize, 0);
  for (uint64_t i = 0; i < 512; ++i) {  // KV-block-sized writes into every other 4 KiB slot
    WriteOp op{1, i * 4096, 2, (511 - i) * 8192, 4096 - (i % 7)};
    std::memcpy(expected.data() + op.remote_offset, a->src.data() + op.local_offset, op.length);
    ops.push_back(op);
  }
  BatchStatus s = SubmitAndWait(*a, peer, ops);
  ASSERT_EQ(s.state, BatchState::kCompleted) << s.error;
  EXPECT_EQ(b->dst, expected);
  EXPECT_EQ(b->engine->stats().writes_applied, 512u);
}

TEST_P(EngineTest, OutOfBoundsOpsAreRejectedAtSubmit) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  SubmitOptions o;
  EXPECT_EQ(a->engine->Submit(peer, {{WriteOp{1, kSize - 10, 2, 0, 11}}}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->engine->Submit(peer, {{WriteOp{1, 0, 2, UINT64_MAX - 4, 8}}}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->engine->Submit(peer, {{WriteOp{1, 0, 9, 0, 8}}}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->engine->Submit(peer, {}, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->engine->Submit(peer + 100, {{WriteOp{1, 0, 2, 0, 8}}}, o).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(EngineTest, ReceiverEnforcesWindowsOfRestrictedRegions) {
  auto a = MakeNode("a"), b = MakeNode("b", /*restricted=*/true);
  PeerId peer = Connect(*a, *b);
  // No window: the receiver rejects, the batch fails with its reason, memory stays untouched.
  BatchStatus s = SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 4096, 4096}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  EXPECT_EQ(s.error.code(), absl::StatusCode::kPermissionDenied) << s.error;
  EXPECT_NE(s.error.message().find("outside every window"), std::string::npos) << s.error;
  EXPECT_EQ(b->dst, std::vector<uint8_t>(kSize, 0));
  EXPECT_GE(b->engine->stats().writes_rejected, 1u);

  // A window for this writer opens exactly those bytes.
  auto w = b->engine->OpenWindow("someone-else", 2, 4096, 4096);
  ASSERT_TRUE(w.ok());  // a window for another peer does not help `a`
  s = SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 4096, 4096}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  auto d = a->engine->ExportDescriptor();
  std::string a_name = DecodeDescriptor(*d)->engine_name;
  auto w2 = b->engine->OpenWindow(a_name, 2, 4096, 8192);
  ASSERT_TRUE(w2.ok());
  s = SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 4096, 8192}});
  EXPECT_EQ(s.state, BatchState::kCompleted) << s.error;
  EXPECT_EQ(0, std::memcmp(b->dst.data() + 4096, a->src.data(), 8192));
  s = SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 8192, 8192}});  // straddles the window's end
  EXPECT_EQ(s.state, BatchState::kFailed);
  ASSERT_TRUE(b->engine->CloseWindow(*w2).ok());
  s = SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 4096, 16}});
  EXPECT_EQ(s.state, BatchState::kFailed);
}

TEST_P(EngineTest, WrongSecretIsRejectedAndNothingIsWritten) {
  auto a = MakeNode("a", TestOptions("a", "a-different-secret-value")), b = MakeNode("b");
  auto d = b->engine->ExportDescriptor();
  auto p = a->engine->ImportPeer(*d);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << p.status();
  EXPECT_NE(p.status().message().find("secret"), std::string::npos) << p.status();
}

TEST_P(EngineTest, IncompatiblePeerIsRejectedNamingBothValues) {
  EngineOptions o = TestOptions("a");
  o.compat.head_dim = 128;
  auto a = MakeNode("a", o), b = MakeNode("b");
  auto p = a->engine->ImportPeer(*b->engine->ExportDescriptor());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("head_dim: local 128, peer 64"), std::string::npos)
      << p.status();
}

TEST_P(EngineTest, NotificationArrivesAfterEveryEarlierWrite) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  std::vector<uint8_t> expected = b->dst;
  std::vector<BatchId> ids;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 4; ++i) {
    // Each batch writes a quarter of its own: the engine orders a notification after earlier
    // writes, not those writes among themselves (slices of different batches share the lanes
    // round-robin), so overlapping batches would have no single expected result.
    auto ops = testing::RandomOps(rng, kSize / 4, 16, 1, 2);
    for (WriteOp& op : ops) op.remote_offset += i * (kSize / 4);
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, a->src.data() + op.local_offset, op.length);
    }
    auto r = a->engine->Submit(peer, ops, {});
    ASSERT_TRUE(r.ok() && r->accepted);
    ids.push_back(r->id);
  }
  // Sent at once, without waiting: the engine must hold it until the batches landed.
  auto n = a->engine->Notify(peer, "room 42 done", {});
  ASSERT_TRUE(n.ok()) << n.status();
  auto ns = a->engine->Wait(*n, absl::Now() + absl::Seconds(20));
  ASSERT_EQ(ns->state, BatchState::kCompleted) << ns->error;
  for (BatchId id : ids) EXPECT_EQ(a->engine->Poll(id)->state, BatchState::kCompleted);
  absl::MutexLock lock(&b->mu);
  ASSERT_EQ(b->notes.size(), 1u);
  EXPECT_EQ(b->notes[0].first, "room 42 done");
  EXPECT_EQ(b->notes[0].second, testing::Fnv1a(expected.data(), expected.size()));
}

TEST_P(EngineTest, CancelStopsABatchAndLaterTrafficStillWorks) {
  EngineOptions slow = TestOptions("a");
  slow.fake_delay = absl::Milliseconds(200);  // the fake backend holds the batch here
  slow.slice_bytes = 4096;                    // many slices: tcp keeps most queued
  auto a = MakeNode("a", slow), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  std::vector<WriteOp> ops;
  for (uint64_t off = 0; off < kSize; off += 8192) ops.push_back({1, off, 2, off, 4096});
  // On tcp a descheduled test thread can let the I/O threads send all of a batch before Cancel;
  // cancelling a terminal batch is a no-op, so try again until one is caught in flight.
  bool caught = false;
  for (int attempt = 0; attempt < 20 && !caught; ++attempt) {
    auto r = a->engine->Submit(peer, ops, {});
    ASSERT_TRUE(r.ok() && r->accepted);
    ASSERT_TRUE(a->engine->Cancel(r->id).ok());
    auto s = a->engine->Poll(r->id);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->state == BatchState::kCancelled) {
      EXPECT_EQ(s->error.code(), absl::StatusCode::kCancelled);
      caught = true;
    } else {
      EXPECT_EQ(s->state, BatchState::kCompleted) << "attempt " << attempt << ": " << s->error;
      if (GetParam() == "fake") ADD_FAILURE() << "the fake backend holds a batch 200 ms";
    }
    ASSERT_TRUE(a->engine->Release(r->id).ok());
    EXPECT_EQ(a->engine->Cancel(r->id).code(), absl::StatusCode::kNotFound);
  }
  EXPECT_TRUE(caught) << "no batch of 20 was still in flight when cancelled";
  // The notification after a cancelled batch still arrives, and later batches complete.
  auto n = a->engine->Notify(peer, "after cancel", {});
  EXPECT_EQ(a->engine->Wait(*n, absl::Now() + absl::Seconds(20))->state, BatchState::kCompleted);
  EXPECT_EQ(SubmitAndWait(*a, peer, {WriteOp{1, 0, 2, 0, 65536}}).state, BatchState::kCompleted);
  EXPECT_EQ(0, std::memcmp(b->dst.data(), a->src.data(), 65536));
}

TEST_P(EngineTest, NoRoomIsAnOrdinaryResult) {
  EngineOptions o = TestOptions("a");
  o.max_queued_bytes_per_peer = 1 << 20;
  o.fake_delay = absl::Milliseconds(50);
  auto a = MakeNode("a", o), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  std::vector<WriteOp> big = {{1, 0, 2, 0, 1 << 20}};
  std::vector<BatchId> accepted;
  bool refused = false;
  // Submitting faster than the peer drains fills the queue; the engine then says "no room".
  for (int i = 0; i < 10000 && !refused; ++i) {
    auto r = a->engine->Submit(peer, big, {});
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->accepted) {
      accepted.push_back(r->id);
    } else {
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_FALSE(accepted.empty());
  for (BatchId id : accepted) {
    EXPECT_EQ(a->engine->Wait(id, absl::InfiniteFuture())->state, BatchState::kCompleted);
  }
}

TEST_P(EngineTest, CallbacksFireOnceAndForgetTheBatch) {
  auto a = MakeNode("a"), b = MakeNode("b");
  PeerId peer = Connect(*a, *b);
  absl::Mutex mu;
  int calls = 0;
  BatchState state = BatchState::kPending;
  SubmitOptions o;
  o.on_done = [&](BatchId, const BatchStatus& s) {
    absl::MutexLock lock(&mu);
    ++calls;
    state = s.state;
  };
  auto r = a->engine->Submit(peer, {{WriteOp{1, 0, 2, 0, 100000}}}, o);
  ASSERT_TRUE(r.ok() && r->accepted);
  mu.LockWhen(absl::Condition(
      +[](int* c) { return *c > 0; }, &calls));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(state, BatchState::kCompleted);
  mu.Unlock();
  EXPECT_EQ(a->engine->Poll(r->id).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(EngineTest, LifecycleIsEnforced) {
  auto e = CreateTransferEngine(GetParam(), TestOptions("lifecycle-" + GetParam()));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->state(), EngineState::kConfiguring);
  EXPECT_FALSE((*e)->ExportDescriptor().ok());
  std::vector<uint8_t> m(64);
  ASSERT_TRUE((*e)->RegisterRegion({1, m.data(), m.size(), false}).ok());
  ASSERT_TRUE((*e)->Start().ok());
  EXPECT_EQ((*e)->state(), EngineState::kServing);
  EXPECT_FALSE((*e)->RegisterRegion({2, m.data(), 1, false}).ok());
  EXPECT_FALSE((*e)->Start().ok());
  EXPECT_FALSE((*e)->ImportPeer("garbage").ok());
  (*e)->Shutdown();
  EXPECT_EQ((*e)->state(), EngineState::kStopped);
  (*e)->Shutdown();
}

TEST_P(EngineTest, CheckPeerTellsLiveRemovedAndDeadPeers) {
  auto a = MakeNode("check-a");
  auto b = MakeNode("check-b");
  const PeerId p = Connect(*a, *b);
  EXPECT_TRUE(a->engine->CheckPeer(p).ok()) << a->engine->CheckPeer(p);
  EXPECT_TRUE(absl::IsNotFound(a->engine->CheckPeer(p + 1000)));
  ASSERT_TRUE(a->engine->RemovePeer(p).ok());
  EXPECT_TRUE(absl::IsNotFound(a->engine->CheckPeer(p))) << a->engine->CheckPeer(p);
  if (GetParam() != "tcp") return;  // the fake backend has no connection to lose
  const PeerId q = Connect(*a, *b);
  ASSERT_TRUE(a->engine->CheckPeer(q).ok());
  b->engine->Shutdown();
  absl::Status s;
  for (int i = 0; i < 300; ++i) {
    s = a->engine->CheckPeer(q);
    if (!s.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("dead"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineTest, ::testing::Values("fake", "tcp"),
                         [](const auto& info) { return info.param; });

TEST(FactoryTest, UnknownBackendAndRdmaWithoutDevice) {
  auto e = CreateTransferEngine("carrier-pigeon", TestOptions("x"));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("tcp, rdma, fake"), std::string::npos);
  auto r = CreateTransferEngine("rdma", TestOptions("x"));
  if (!r.ok()) {  // this machine has no RDMA device
    EXPECT_NE(r.status().message().find("rdma:"), std::string::npos) << r.status();
  }
  EXPECT_FALSE(CreateTransferEngine("tcp", TestOptions("x", "short")).ok());
}

}  // namespace
}  // namespace tandem::kv
