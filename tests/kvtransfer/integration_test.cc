// The tcp backend between real processes on loopback: this test process owns one engine and
// drives kv_peer processes over pipes. Covers round trips verified byte for byte, rejection of
// unauthenticated and out-of-bounds writes, garbage frames, windows, notification ordering, and
// a peer killed (SIGKILL) or frozen (SIGSTOP) in the middle of a batch.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <zmq.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kvtransfer/factory.h"
#include "kvtransfer/frame.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

constexpr char kSecret[] = "integration-secret-0123456789";

// A running kv_peer with line-based command pipes. Kills the process if still alive.
class PeerProcess {
 public:
  PeerProcess(uint64_t region_bytes, const std::string& name, bool restricted = false) {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::string bin = std::string(TANDEM_BINARY_DIR) + "/bin/kv_peer";
      std::string bytes = std::to_string(region_bytes);
      std::vector<const char*> args = {bin.c_str(),  "--region-bytes",   bytes.c_str(), "--name",
                                       name.c_str(), "--cluster-secret", kSecret};
      if (restricted) args.push_back("--restricted");
      args.push_back(nullptr);
      execv(bin.c_str(), const_cast<char**>(args.data()));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    std::string line = ReadLine();
    EXPECT_EQ(line.rfind("DESCRIPTOR ", 0), 0u) << line;
    if (line.size() > 11) descriptor_ = absl::HexStringToBytes(line.substr(11));
  }
  ~PeerProcess() {
    if (pid_ > 0 && alive_) {
      fputs("QUIT\n", to_);
      fflush(to_);
      kill(pid_, SIGCONT);
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(20000);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (to_) fclose(to_);
    if (from_) fclose(from_);
  }

  std::string Command(const std::string& cmd) {
    fputs((cmd + "\n").c_str(), to_);
    fflush(to_);
    return ReadLine();
  }
  void Signal(int sig) {
    kill(pid_, sig);
    if (sig == SIGKILL) {
      waitpid(pid_, nullptr, 0);
      alive_ = false;
    }
  }
  const std::string& descriptor() const { return descriptor_; }
  std::string endpoint() const { return DecodeDescriptor(descriptor_)->endpoints[0]; }

 private:
  std::string ReadLine() {
    std::string line;
    int c;
    while ((c = fgetc(from_)) != EOF && c != '\n') line.push_back(static_cast<char>(c));
    return line;
  }

  pid_t pid_ = -1;
  bool alive_ = true;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string descriptor_;
};

class IntegrationTest : public ::testing::Test {
 protected:
  void StartLocal(uint64_t bytes, const std::string& secret = kSecret) {
    src_ = testing::RandomBytes(bytes, 99);
    dst_.assign(bytes, 0);
    EngineOptions o = testing::TestOptions("local-" + std::to_string(getpid()), secret);
    name_ = o.name;
    auto e = CreateTransferEngine("tcp", o);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    ASSERT_TRUE(engine_->RegisterRegion({1, src_.data(), src_.size(), false}).ok());
    ASSERT_TRUE(engine_->RegisterRegion({2, dst_.data(), dst_.size(), false}).ok());
    ASSERT_TRUE(engine_->Start().ok());
  }
  BatchStatus Run(PeerId peer, const std::vector<WriteOp>& ops,
                  absl::Duration timeout = absl::Seconds(30)) {
    SubmitOptions o;
    o.deadline = absl::Now() + timeout;
    auto r = engine_->Submit(peer, ops, o);
    EXPECT_TRUE(r.ok() && r->accepted) << r.status();
    if (!r.ok() || !r->accepted) return {};
    auto s = *engine_->Wait(r->id, absl::InfiniteFuture());
    EXPECT_TRUE(engine_->Release(r->id).ok());
    return s;
  }
  static std::string Hash(const std::vector<uint8_t>& v, uint64_t off, uint64_t len) {
    return absl::StrCat("HASH ", testing::Fnv1a(v.data() + off, len));
  }

  std::vector<uint8_t> src_, dst_;
  std::string name_;
  TransferEnginePtr engine_;
};

TEST_F(IntegrationTest, RandomBatchesBothWaysByteForByte) {
  constexpr uint64_t kBytes = 16 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-roundtrip");
  auto id = engine_->ImportPeer(peer.descriptor());
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<uint8_t> expected(kBytes, 0);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 6; ++round) {
    auto ops = testing::RandomOps(rng, kBytes, 1 + rng() % 200, 1, 2);
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, src_.data() + op.local_offset, op.length);
    }
    BatchStatus s = Run(*id, ops);
    ASSERT_EQ(s.state, BatchState::kCompleted) << s.error;
    ASSERT_EQ(peer.Command("HASH 0 " + std::to_string(kBytes)), Hash(expected, 0, kBytes));
  }
  std::string raw(reinterpret_cast<const char*>(expected.data()) + 12345, 70000);
  EXPECT_EQ(peer.Command("READ 12345 70000"), "READ " + absl::BytesToHexString(raw));

  // The other way: the peer imports us and writes into our region 2 from its region 1.
  std::string reply =
      peer.Command("IMPORT " + absl::BytesToHexString(*engine_->ExportDescriptor()));
  ASSERT_EQ(reply.rfind("PEER ", 0), 0u) << reply;
  std::string pid = reply.substr(5);
  EXPECT_EQ(peer.Command("WRITE " + pid + " 1000 2000 5000000 20000"), "STATE completed ");
  std::mt19937_64 peer_rng(1);  // kv_peer fills region 1 from --seed 1
  std::vector<uint8_t> peer_src(kBytes);
  for (auto& b : peer_src) b = static_cast<uint8_t>(peer_rng());
  EXPECT_EQ(0, std::memcmp(dst_.data() + 2000, peer_src.data() + 1000, 5000000));
}

TEST_F(IntegrationTest, UnauthenticatedPeersCannotWrite) {
  constexpr uint64_t kBytes = 1 << 20;
  StartLocal(kBytes, "a-wrong-secret-of-enough-length");
  PeerProcess peer(kBytes, "peer-auth");
  auto id = engine_->ImportPeer(peer.descriptor());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << id.status();

  // A raw client that skips the handshake, or guesses a session id, is dropped.
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(peer.endpoint());
  std::string payload(4096, 'X');
  for (uint64_t session : {0ull, 1ull, 0xdeadbeefull}) {
    FrameHeader h;
    h.type = FrameType::kWrite;
    h.session = session;
    h.region = 2;
    h.length = payload.size();
    h.flags = kFlagAck;
    auto header = EncodeHeader(h);
    s.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  // An auth frame without a hello, and a hello followed by a wrong proof.
  FrameHeader auth;
  auth.type = FrameType::kAuth;
  auto ah = EncodeHeader(auth);
  s.send(zmq::buffer(ah.data(), ah.size()), zmq::send_flags::sndmore);
  s.send(zmq::buffer(std::string(kProofSize, 'p')), zmq::send_flags::none);
  // A client that does not know the secret: hello, challenge, then a forged proof -> kReject.
  zmq::socket_t forger(ctx, zmq::socket_type::dealer);
  forger.set(zmq::sockopt::linger, 0);
  forger.set(zmq::sockopt::rcvtimeo, 5000);
  forger.connect(peer.endpoint());
  FrameHeader hello;
  hello.type = FrameType::kHello;
  auto hh = EncodeHeader(hello);
  forger.send(zmq::buffer(hh.data(), hh.size()), zmq::send_flags::sndmore);
  forger.send(zmq::buffer(EncodeHello(
                  HelloBody{std::string(kNonceSize, 'n'), "forger", testing::TestCompat()})),
              zmq::send_flags::none);
  auto recv_type = [&]() -> int {
    zmq::message_t header, body;
    if (!forger.recv(header) || !header.more() || !forger.recv(body)) return -1;
    auto h = ParseHeader(header.data(), header.size());
    return h.ok() ? static_cast<int>(h->type) : -2;
  };
  ASSERT_EQ(recv_type(), static_cast<int>(FrameType::kChallenge));
  forger.send(zmq::buffer(ah.data(), ah.size()), zmq::send_flags::sndmore);
  forger.send(zmq::buffer(std::string(kProofSize, 'f')), zmq::send_flags::none);
  EXPECT_EQ(recv_type(), static_cast<int>(FrameType::kReject));
  // Still not authenticated: its writes are dropped.
  FrameHeader w;
  w.type = FrameType::kWrite;
  w.region = 2;
  w.length = payload.size();
  auto wh = EncodeHeader(w);
  forger.send(zmq::buffer(wh.data(), wh.size()), zmq::send_flags::sndmore);
  forger.send(zmq::buffer(payload), zmq::send_flags::none);
  absl::SleepFor(absl::Milliseconds(300));
  std::vector<uint8_t> zeros(kBytes, 0);
  EXPECT_EQ(peer.Command("HASH 0 " + std::to_string(kBytes)), Hash(zeros, 0, kBytes));
  std::string stats = peer.Command("STATS");
  EXPECT_NE(stats.find("applied=0 "), std::string::npos) << stats;
  EXPECT_EQ(stats.find("dropped=0 "), std::string::npos) << stats;
  EXPECT_EQ(stats.find("handshakes_rejected=0"), std::string::npos) << stats;
}

TEST_F(IntegrationTest, GarbageFramesAreDroppedAndThePeerKeepsServing) {
  constexpr uint64_t kBytes = 1 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-garbage");
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(peer.endpoint());
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3000; ++i) {
    int parts = 1 + rng() % 4;
    for (int p = 0; p < parts; ++p) {
      std::string junk(rng() % 128, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      if (p == 0 && rng() % 2 && junk.size() >= 8) {  // plausible magic, random rest
        uint32_t magic = kFrameMagic;
        std::memcpy(junk.data(), &magic, 4);
        junk[4] = kFrameVersion;
      }
      s.send(zmq::buffer(junk), p + 1 < parts ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  absl::SleepFor(absl::Milliseconds(300));
  auto id = engine_->ImportPeer(peer.descriptor());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(Run(*id, {WriteOp{1, 0, 2, 0, kBytes}}).state, BatchState::kCompleted);
  EXPECT_EQ(peer.Command("HASH 0 " + std::to_string(kBytes)), Hash(src_, 0, kBytes));
  EXPECT_EQ(peer.Command("STATS").find("dropped=0 "), std::string::npos);
}

TEST_F(IntegrationTest, ReceiverRejectsWritesOutsideRegionsAndWindows) {
  constexpr uint64_t kBytes = 1 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-bounds", /*restricted=*/true);
  // A tampered descriptor claims a larger region: the receiver still enforces the real bounds.
  Descriptor d = *DecodeDescriptor(peer.descriptor());
  for (RegionInfo& r : d.regions) r.size *= 4;
  auto id = engine_->ImportPeer(EncodeDescriptor(d));
  ASSERT_TRUE(id.ok()) << id.status();
  BatchStatus s = Run(*id, {WriteOp{1, 0, 1, kBytes - 100, 4096}});
  EXPECT_EQ(s.state, BatchState::kFailed);
  EXPECT_NE(s.error.message().find("outside region 1"), std::string::npos) << s.error;
  // Region 2 is restricted: only an open window for our name admits writes.
  s = Run(*id, {WriteOp{1, 0, 2, 4096, 4096}});
  EXPECT_EQ(s.error.code(), absl::StatusCode::kPermissionDenied) << s.error;
  ASSERT_EQ(peer.Command("WINDOW " + name_ + " 4096 4096").rfind("WINDOW ", 0), 0u);
  EXPECT_EQ(Run(*id, {WriteOp{1, 0, 2, 4096, 4096}}).state, BatchState::kCompleted);
  std::string raw(reinterpret_cast<const char*>(src_.data()), 4096);
  EXPECT_EQ(peer.Command("READ 4096 4096"), "READ " + absl::BytesToHexString(raw));
  EXPECT_NE(peer.Command("STATS").find("rejected=2"), std::string::npos);
}

TEST_F(IntegrationTest, NotificationIsDeliveredAfterTheData) {
  constexpr uint64_t kBytes = 32 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-notify");
  auto id = engine_->ImportPeer(peer.descriptor());
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<uint8_t> expected(kBytes, 0);
  std::mt19937_64 rng(8);
  // One batch per layer, each into its own slice, as a prefill daemon writes a layer's blocks:
  // the engine orders a notification after every earlier batch, not overlapping batches among
  // themselves, so overlapping writes would make the expected bytes depend on that order.
  constexpr int kLayers = 24;
  constexpr uint64_t kSlice = kBytes / kLayers;
  for (int layer = 0; layer < kLayers; ++layer) {
    auto ops = testing::RandomOps(rng, kSlice, 32, 1, 2);
    for (WriteOp& op : ops) op.remote_offset += layer * kSlice;
    for (const WriteOp& op : ops) {
      std::memcpy(expected.data() + op.remote_offset, src_.data() + op.local_offset, op.length);
    }
    SubmitOptions o;
    o.on_done = [](BatchId, const BatchStatus&) {};
    ASSERT_TRUE(engine_->Submit(*id, ops, o)->accepted);
  }
  auto n = engine_->Notify(*id, "room-7", {});
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(engine_->Wait(*n, absl::Now() + absl::Seconds(30))->state, BatchState::kCompleted);
  EXPECT_EQ(peer.Command("NOTES"),
            absl::StrCat("NOTES 1 room-7:", testing::Fnv1a(expected.data(), kBytes)));
}

TEST_F(IntegrationTest, PeerKilledMidBatchFailsWithinTheDeadline) {
  constexpr uint64_t kBytes = 64 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-killed");
  auto id = engine_->ImportPeer(peer.descriptor());
  ASSERT_TRUE(id.ok()) << id.status();
  peer.Signal(SIGSTOP);  // the peer stops reading: the batch is certainly in flight
  SubmitOptions o;
  const absl::Duration kDeadline = absl::Seconds(20);
  const absl::Time start = absl::Now();
  o.deadline = start + kDeadline;
  auto r = engine_->Submit(*id, {{WriteOp{1, 0, 2, 0, kBytes}}}, o);
  ASSERT_TRUE(r.ok() && r->accepted);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(IsTerminal(engine_->Poll(r->id)->state));
  peer.Signal(SIGKILL);
  auto s = engine_->Wait(r->id, o.deadline + absl::Seconds(1));
  EXPECT_EQ(s->state, BatchState::kFailed) << BatchStateName(s->state) << " " << s->error;
  EXPECT_LT(absl::Now() - start, kDeadline);
  EXPECT_EQ(s->error.code(), absl::StatusCode::kUnavailable) << s->error;
  // The dead peer refuses new work with a clear error instead of hanging.
  auto again = engine_->Submit(*id, {{WriteOp{1, 0, 2, 0, 16}}}, {});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
}

TEST_F(IntegrationTest, FrozenPeerEndsTheBatchByItsDeadline) {
  constexpr uint64_t kBytes = 64 << 20;
  StartLocal(kBytes);
  PeerProcess peer(kBytes, "peer-frozen");
  auto id = engine_->ImportPeer(peer.descriptor());
  ASSERT_TRUE(id.ok()) << id.status();
  peer.Signal(SIGSTOP);
  SubmitOptions o;
  o.deadline = absl::Now() + absl::Seconds(3);
  auto r = engine_->Submit(*id, {{WriteOp{1, 0, 2, 0, kBytes}}}, o);
  ASSERT_TRUE(r.ok() && r->accepted);
  auto s = engine_->Wait(r->id, o.deadline + absl::Seconds(1));
  // Heartbeats (3 x 200 ms) usually declare it dead first; otherwise the deadline fires.
  EXPECT_TRUE(s->state == BatchState::kFailed || s->state == BatchState::kTimedOut)
      << BatchStateName(s->state);
  EXPECT_LT(absl::Now(), o.deadline + absl::Milliseconds(500));
}

}  // namespace
}  // namespace tandem::kv
