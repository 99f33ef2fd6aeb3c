// The tcp engine under a handshake flood, in process over loopback: more unauthenticated Hellos
// than the old session table held (4096, which used to evict members) must not disturb a member
// already connected, and a new member gets in once the pending handshakes expire. Also: an
// authenticated but incompatible member learns what differs through ImportPeer's error.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/factory.h"
#include "kvtransfer/frame.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

using testing::TestOptions;

constexpr uint64_t kBytes = 1 << 20;

struct Node {
  std::vector<uint8_t> src = testing::RandomBytes(kBytes, 17);
  std::vector<uint8_t> dst = std::vector<uint8_t>(kBytes, 0);
  absl::Mutex mu;
  std::vector<std::string> notes ABSL_GUARDED_BY(mu);
  TransferEnginePtr engine;  // last: stops before the memory it touches goes
};

std::unique_ptr<Node> MakeNode(EngineOptions o) {
  auto n = std::make_unique<Node>();
  Node* raw = n.get();
  o.on_notification = [raw](const std::string&, const std::string& msg) {
    absl::MutexLock lock(&raw->mu);
    raw->notes.push_back(msg);
  };
  auto e = CreateTransferEngine("tcp", std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  n->engine = std::move(*e);
  EXPECT_TRUE(n->engine->RegisterRegion({1, n->src.data(), n->src.size(), false}).ok());
  EXPECT_TRUE(n->engine->RegisterRegion({2, n->dst.data(), n->dst.size(), false}).ok());
  EXPECT_TRUE(n->engine->Start().ok());
  return n;
}

BatchState WriteAndWait(Node& from, PeerId peer, uint64_t offset, uint64_t length) {
  SubmitOptions o;
  o.deadline = absl::Now() + absl::Seconds(30);
  auto r = from.engine->Submit(peer, {{WriteOp{1, offset, 2, offset, length}}}, o);
  if (!r.ok() || !r->accepted) return BatchState::kFailed;
  auto s = from.engine->Wait(r->id, absl::InfiniteFuture());
  EXPECT_TRUE(from.engine->Release(r->id).ok());
  return s.ok() ? s->state : BatchState::kFailed;
}

// Sends one Hello from each of `count` fresh connections, `in_flight` connections at a time,
// spread over 20 loopback source addresses; returns how many were challenged (the rest must have
// been refused as "too many pending handshakes").
int FloodHellos(const std::string& endpoint, int count, int in_flight) {
  zmq::context_t ctx;
  int challenged = 0;
  FrameHeader h;
  h.type = FrameType::kHello;
  const auto header = EncodeHeader(h);
  const std::string body =
      EncodeHello(HelloBody{std::string(kNonceSize, 'n'), "flooder", testing::TestCompat()});
  for (int sent = 0; sent < count;) {
    std::vector<zmq::socket_t> sockets;
    for (int i = 0; i < in_flight && sent < count; ++i, ++sent) {
      zmq::socket_t& s = sockets.emplace_back(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::rcvtimeo, 10000);
      s.connect(absl::StrCat("tcp://127.0.0.", 2 + sent % 20, ":0;", endpoint.substr(6)));
      s.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore);
      s.send(zmq::buffer(body), zmq::send_flags::none);
    }
    for (zmq::socket_t& s : sockets) {
      zmq::message_t reply_header, reply_body;
      if (!s.recv(reply_header) || !s.recv(reply_body)) {
        ADD_FAILURE() << "no answer to a hello";
        continue;
      }
      auto parsed = ParseHeader(reply_header.data(), reply_header.size());
      if (parsed.ok() && parsed->type == FrameType::kChallenge) {
        ++challenged;
      } else {
        EXPECT_EQ(reply_body.to_string(), "too many pending handshakes");
      }
    }
  }
  return challenged;
}

TEST(TcpFloodTest, HelloFloodDisplacesNoMemberAndNewMembersGetInAfterwards) {
  EngineOptions target_options = TestOptions("flood-target");
  // Short, so the test need not wait the default 10 s for the flood's handshakes to expire.
  target_options.connection_limits.pending_handshake_timeout = absl::Seconds(2);
  auto target = MakeNode(target_options);
  auto member = MakeNode(TestOptions("flood-member"));
  const std::string descriptor = *target->engine->ExportDescriptor();
  auto peer = member->engine->ImportPeer(descriptor);
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_EQ(WriteAndWait(*member, *peer, 0, 4096), BatchState::kCompleted);

  const std::string endpoint = DecodeDescriptor(descriptor)->endpoints[0];
  constexpr int kHellos = 4200;  // more than the 4096 sessions the old table held
  const int challenged = FloodHellos(endpoint, kHellos, 100);
  EXPECT_GE(challenged, 256);      // the pool was filled...
  EXPECT_LT(challenged, kHellos);  // ...and then newcomers were refused
  EXPECT_GE(target->engine->stats().handshakes_rejected,
            static_cast<uint64_t>(kHellos - challenged));

  // The member connected before the flood still writes and notifies.
  EXPECT_EQ(WriteAndWait(*member, *peer, 4096, 65536), BatchState::kCompleted);
  EXPECT_EQ(0, std::memcmp(target->dst.data(), member->src.data(), 4096 + 65536));
  auto note = member->engine->Notify(*peer, "after the flood", {});
  ASSERT_TRUE(note.ok()) << note.status();
  auto note_state = member->engine->Wait(*note, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(note_state.ok());
  EXPECT_EQ(note_state->state, BatchState::kCompleted) << note_state->error;
  {
    absl::MutexLock lock(&target->mu);
    ASSERT_EQ(target->notes.size(), 1u);
    EXPECT_EQ(target->notes[0], "after the flood");
  }

  // A new member is refused only while the pool is full ("retry later"), never for good.
  auto newcomer = MakeNode(TestOptions("flood-newcomer"));
  absl::StatusOr<PeerId> joined = absl::UnknownError("not tried");
  for (int attempt = 0; attempt < 100 && !joined.ok(); ++attempt) {
    if (attempt > 0) absl::SleepFor(absl::Milliseconds(100));
    joined = newcomer->engine->ImportPeer(descriptor);
    if (!joined.ok()) {
      ASSERT_TRUE(absl::IsResourceExhausted(joined.status())) << joined.status();
      EXPECT_NE(joined.status().message().find("too many pending handshakes"), std::string::npos)
          << joined.status();
    }
  }
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(WriteAndWait(*newcomer, *joined, 0, 4096), BatchState::kCompleted);
}

TEST(TcpFloodTest, IncompatibleMemberLearnsWhatDiffersAfterAuthenticating) {
  auto server = MakeNode(TestOptions("compat-server"));
  EngineOptions o = TestOptions("compat-client");
  o.compat.head_dim = 128;
  auto client = MakeNode(o);
  // A stale or tampered descriptor gets past the client's own check; the server's check, made
  // once the client proved it is a member, still refuses it and says why.
  Descriptor d = *DecodeDescriptor(*server->engine->ExportDescriptor());
  d.compat = o.compat;
  auto p = client->engine->ImportPeer(EncodeDescriptor(d));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  EXPECT_NE(p.status().message().find("rejected the handshake"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("head_dim: local 128, peer 64"), std::string::npos)
      << p.status();
  EXPECT_GE(server->engine->stats().handshakes_rejected, 1u);
}

TEST(TcpFloodTest, WrongSecretIsToldOnlyThatAuthenticationFailed) {
  // Both sides have the same record; the client's wrong secret makes it refuse the server's
  // proof first. A raw stranger gets as far as the server's refusal: generic.
  auto server = MakeNode(TestOptions("secret-server"));
  const std::string endpoint = DecodeDescriptor(*server->engine->ExportDescriptor())->endpoints[0];
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);
  s.connect(endpoint);
  auto send = [&](FrameType type, const std::string& body) {
    FrameHeader h;
    h.type = type;
    auto header = EncodeHeader(h);
    s.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(body), zmq::send_flags::none);
  };
  auto receive = [&](FrameHeader* h) {
    zmq::message_t header, body;
    EXPECT_TRUE(s.recv(header) && s.recv(body));
    auto parsed = ParseHeader(header.data(), header.size());
    EXPECT_TRUE(parsed.ok());
    if (parsed.ok()) *h = *parsed;
    return body.to_string();
  };
  CompatibilityRecord other = testing::TestCompat();
  other.model_id = "probe-model";
  other.dtype = "fp8";
  send(FrameType::kHello, EncodeHello(HelloBody{MakeNonce(), "stranger", other}));
  FrameHeader h;
  receive(&h);
  ASSERT_EQ(h.type, FrameType::kChallenge);
  send(FrameType::kAuth, std::string(kProofSize, 'f'));
  const std::string reason = receive(&h);
  ASSERT_EQ(h.type, FrameType::kReject);
  EXPECT_EQ(reason, "authentication failed");
  EXPECT_EQ(reason.find("qwen"), std::string::npos);
}

TEST(TcpFloodTest, NonPositiveConnectionLimitsAreRefused) {
  EngineOptions o = TestOptions("limits");
  o.connection_limits.max_pending_handshakes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(CreateTransferEngine("tcp", o).status()));
  o = TestOptions("limits");
  o.connection_limits.pending_handshake_timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(CreateTransferEngine("tcp", o).status()));
  o = TestOptions("limits");
  o.connection_limits.max_sessions = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(CreateTransferEngine("tcp", o).status()));
}

}  // namespace
}  // namespace tandem::kv
