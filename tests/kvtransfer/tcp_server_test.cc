// TcpServer driven message by message over a real loopback ROUTER socket, with a fake monotonic
// clock: what a peer without the secret is told, what an authenticated but incompatible member
// is told, the pending-handshake caps (total and per source address), the handshake timeout and
// the rate of refusal log lines. Raw DEALER sockets play the peers; they bind distinct loopback
// source addresses (127.0.0.x) so that the server sees distinct "Peer-Address"es.
#include "kvtransfer/tcp/tcp_server.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/frame.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

constexpr char kSecret[] = "server-test-secret-0123456789";
constexpr char kServerName[] = "decode-under-test";

struct Reply {
  int type = -1;  // FrameType, or -1: nothing arrived in time
  uint32_t code = 0;
  uint64_t session = 0;
  std::string body;
};

// One raw connection to the server, optionally from a chosen loopback source address.
class RawPeer {
 public:
  RawPeer(zmq::context_t& ctx, const std::string& endpoint, const std::string& source = "")
      : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 5000);
    // "tcp://src:0;dst:port" makes libzmq bind the source address before connecting.
    socket_.connect(source.empty() ? endpoint
                                   : absl::StrCat("tcp://", source, ":0;", endpoint.substr(6)));
  }

  void Send(FrameType type, const std::string& body, uint64_t session = 0) {
    FrameHeader h;
    h.type = type;
    h.session = session;
    auto header = EncodeHeader(h);
    socket_.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(body), zmq::send_flags::none);
  }
  void Hello(const CompatibilityRecord& compat, const std::string& name = "writer-0") {
    nonce_ = MakeNonce();
    name_ = name;
    Send(FrameType::kHello, EncodeHello(HelloBody{nonce_, name, compat}));
  }
  // The Auth a member sends for the challenge it received (or a forged one without the secret).
  void Auth(const Reply& challenge, const std::string& secret) {
    auto c = DecodeChallenge(challenge.body);
    ASSERT_TRUE(c.ok()) << c.status();
    Send(FrameType::kAuth,
         ComputeProof(secret, AuthRole::kClient, nonce_, c->server_nonce, name_, c->server_name));
  }
  Reply Receive() {
    Reply r;
    zmq::message_t header, body;
    if (!socket_.recv(header) || !header.more() || !socket_.recv(body)) return r;
    auto h = ParseHeader(header.data(), header.size());
    if (!h.ok()) return r;
    r.type = static_cast<int>(h->type);
    r.code = h->code;
    r.session = h->session;
    r.body = body.to_string();
    return r;
  }

 private:
  zmq::socket_t socket_;
  std::string nonce_;
  std::string name_;
};

class TcpServerTest : public ::testing::Test {
 protected:
  TcpServerTest() {
    options_ = testing::TestOptions(kServerName, kSecret);
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  // Builds the server once the test has set `options_`.
  void StartServer() {
    server_ = std::make_unique<TcpServer>(options_, &regions_, &counters_, nullptr,
                                          [this] { return now_; });
  }

  // Hands the next message on the router to the server; false if none came within 5 s.
  bool Pump() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(5000));
    if (!(item.revents & ZMQ_POLLIN)) return false;
    std::vector<zmq::message_t> parts;
    while (true) {
      zmq::message_t m;
      if (!router_.recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      parts.push_back(std::move(m));
      if (!more) break;
    }
    server_->HandleMessage(router_, parts);
    return true;
  }

  // Hello from `peer`, handled; returns the server's answer.
  Reply HelloAndAnswer(RawPeer& peer, const CompatibilityRecord& compat) {
    peer.Hello(compat);
    EXPECT_TRUE(Pump());
    return peer.Receive();
  }

  // A member completing the handshake; returns its session id (0 if refused).
  uint64_t Authenticate(RawPeer& peer) {
    Reply challenge = HelloAndAnswer(peer, testing::TestCompat());
    EXPECT_EQ(challenge.type, static_cast<int>(FrameType::kChallenge)) << challenge.body;
    peer.Auth(challenge, kSecret);
    EXPECT_TRUE(Pump());
    Reply welcome = peer.Receive();
    EXPECT_EQ(welcome.type, static_cast<int>(FrameType::kWelcome)) << welcome.body;
    return welcome.session;
  }

  // True if the member's session still works: a flush is acknowledged.
  bool SessionWorks(RawPeer& peer, uint64_t session) {
    peer.Send(FrameType::kFlush, "", session);
    if (!Pump()) return false;
    return peer.Receive().type == static_cast<int>(FrameType::kAck);
  }

  zmq::context_t ctx_;
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::string endpoint_;
  EngineOptions options_;
  RegionTable regions_;
  EngineCounters counters_;
  MonoClock::time_point now_ = MonoClock::time_point() + std::chrono::hours(1);
  std::unique_ptr<TcpServer> server_;
};

CompatibilityRecord OtherCompat() {
  CompatibilityRecord c = testing::TestCompat();
  c.model_id = "some-other-model";
  c.head_dim = 128;
  return c;
}

// Nothing of the server's record (model id, geometry) may appear in what a stranger reads.
void ExpectNoRecordIn(const std::string& text) {
  const CompatibilityRecord mine = testing::TestCompat();
  for (const std::string& secret_ish :
       {mine.model_id, std::string("head_dim"), std::string("model_id"), std::string("64"),
        std::string("incompatible"), mine.layout}) {
    EXPECT_FALSE(absl::StrContains(text, secret_ish)) << "'" << text << "' reveals " << secret_ish;
  }
}

TEST_F(TcpServerTest, StrangerIsToldOnlyGenericReasons) {
  StartServer();
  RawPeer stranger(ctx_, endpoint_);
  // An incompatible Hello is challenged like any other: the record is not looked at yet.
  Reply challenge = HelloAndAnswer(stranger, OtherCompat());
  ASSERT_EQ(challenge.type, static_cast<int>(FrameType::kChallenge)) << challenge.body;
  // Nonce, proof and the engine's name (public in its descriptor anyway); nothing else.
  auto decoded = DecodeChallenge(challenge.body);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->server_name, kServerName);
  stranger.Auth(challenge, "not-the-cluster-secret-at-all");
  ASSERT_TRUE(Pump());
  Reply reject = stranger.Receive();
  ASSERT_EQ(reject.type, static_cast<int>(FrameType::kReject));
  EXPECT_EQ(reject.body, "authentication failed");
  EXPECT_EQ(reject.code, static_cast<uint32_t>(absl::StatusCode::kPermissionDenied));
  ExpectNoRecordIn(reject.body);

  // Malformed and oversized Hellos: one generic reason, no parser details.
  stranger.Send(FrameType::kHello, "garbage");
  ASSERT_TRUE(Pump());
  reject = stranger.Receive();
  ASSERT_EQ(reject.type, static_cast<int>(FrameType::kReject));
  EXPECT_EQ(reject.body, "malformed hello");
  stranger.Send(FrameType::kHello, std::string(kMaxHelloBytes + 1, 'x'));
  ASSERT_TRUE(Pump());
  reject = stranger.Receive();
  EXPECT_EQ(reject.body, "malformed hello");
  EXPECT_EQ(server_->sessions(), 0u);
  EXPECT_EQ(counters_.handshakes_rejected.load(), 3u);
}

TEST_F(TcpServerTest, IncompatibleMemberIsToldWhatDiffersAfterAuthenticating) {
  StartServer();
  RawPeer member(ctx_, endpoint_);
  Reply challenge = HelloAndAnswer(member, OtherCompat());
  ASSERT_EQ(challenge.type, static_cast<int>(FrameType::kChallenge));
  member.Auth(challenge, kSecret);
  ASSERT_TRUE(Pump());
  Reply reject = member.Receive();
  ASSERT_EQ(reject.type, static_cast<int>(FrameType::kReject));
  EXPECT_EQ(reject.code, static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  // Worded from the member's side: "local" is its record, "peer" the server's.
  EXPECT_EQ(reject.body, "incompatible peer: model_id: local some-other-model, peer qwen2.5-0.5b");
  EXPECT_EQ(server_->sessions(), 0u);
  EXPECT_EQ(counters_.handshakes_rejected.load(), 1u);
}

TEST_F(TcpServerTest, FullPendingPoolRefusesNewcomersAndEvictsNobody) {
  options_.connection_limits.max_pending_handshakes = 8;
  options_.connection_limits.max_pending_per_source = 3;
  StartServer();
  RawPeer member(ctx_, endpoint_);
  const uint64_t session = Authenticate(member);
  ASSERT_NE(session, 0u);

  // The first connection from 127.0.0.2 is a member that will finish its handshake late.
  RawPeer late_member(ctx_, endpoint_, "127.0.0.2");
  Reply late_challenge = HelloAndAnswer(late_member, testing::TestCompat());
  ASSERT_EQ(late_challenge.type, static_cast<int>(FrameType::kChallenge));

  std::vector<std::unique_ptr<RawPeer>> strangers;
  auto stranger_hello = [&](const std::string& source) {
    strangers.push_back(std::make_unique<RawPeer>(ctx_, endpoint_, source));
    return HelloAndAnswer(*strangers.back(), testing::TestCompat());
  };
  // Per source: two more from 127.0.0.2 fit, the fourth does not.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(stranger_hello("127.0.0.2").type, static_cast<int>(FrameType::kChallenge));
  }
  Reply refused = stranger_hello("127.0.0.2");
  ASSERT_EQ(refused.type, static_cast<int>(FrameType::kReject));
  EXPECT_EQ(refused.body, "too many pending handshakes");
  EXPECT_EQ(refused.code, static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  // Other sources still get in, up to the total of 8.
  for (const char* source : {"127.0.0.3", "127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4"}) {
    EXPECT_EQ(stranger_hello(source).type, static_cast<int>(FrameType::kChallenge)) << source;
  }
  EXPECT_EQ(server_->pending_handshakes(), 8u);
  for (int i = 0; i < 20; ++i) {
    refused = stranger_hello(absl::StrCat("127.0.0.", 5 + i));
    ASSERT_EQ(refused.type, static_cast<int>(FrameType::kReject));
    EXPECT_EQ(refused.body, "too many pending handshakes");
  }
  EXPECT_EQ(server_->pending_handshakes(), 8u);

  // Nothing was displaced: the member's session works and the early handshake completes.
  EXPECT_TRUE(SessionWorks(member, session));
  late_member.Auth(late_challenge, kSecret);
  ASSERT_TRUE(Pump());
  Reply welcome = late_member.Receive();
  EXPECT_EQ(welcome.type, static_cast<int>(FrameType::kWelcome)) << welcome.body;
  EXPECT_EQ(server_->sessions(), 2u);
  EXPECT_EQ(counters_.handshakes_rejected.load(), 21u);
}

TEST_F(TcpServerTest, PendingHandshakesExpireAfterTheTimeout) {
  options_.connection_limits.max_pending_handshakes = 2;
  options_.connection_limits.pending_handshake_timeout = absl::Seconds(10);
  StartServer();
  RawPeer slow(ctx_, endpoint_), filler(ctx_, endpoint_), newcomer(ctx_, endpoint_);
  Reply slow_challenge = HelloAndAnswer(slow, testing::TestCompat());
  ASSERT_EQ(slow_challenge.type, static_cast<int>(FrameType::kChallenge));
  ASSERT_EQ(HelloAndAnswer(filler, testing::TestCompat()).type,
            static_cast<int>(FrameType::kChallenge));
  EXPECT_EQ(HelloAndAnswer(newcomer, testing::TestCompat()).body, "too many pending handshakes");

  now_ += std::chrono::seconds(11);
  // The newcomer's next Hello finds both entries expired.
  EXPECT_EQ(HelloAndAnswer(newcomer, testing::TestCompat()).type,
            static_cast<int>(FrameType::kChallenge));
  EXPECT_EQ(server_->pending_handshakes(), 1u);
  // The slow peer's proof, although right, comes too late: its frame is dropped unanswered.
  const uint64_t dropped = counters_.frames_dropped.load();
  slow.Auth(slow_challenge, kSecret);
  ASSERT_TRUE(Pump());
  EXPECT_EQ(counters_.frames_dropped.load(), dropped + 1);
  EXPECT_EQ(server_->sessions(), 0u);
}

TEST_F(TcpServerTest, RefusalsAreLoggedOncePerInterval) {
  options_.connection_limits.refusal_log_interval = absl::Hours(1);
  StartServer();
  auto captured = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*captured);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));

  RawPeer flooder(ctx_, endpoint_);
  constexpr int kHellos = 200;
  for (int i = 0; i < kHellos; ++i) {
    flooder.Send(FrameType::kHello, "garbage " + std::to_string(i));
    ASSERT_TRUE(Pump());
    ASSERT_EQ(flooder.Receive().body, "malformed hello");
  }
  constexpr int kJunk = 200;
  for (int i = 0; i < kJunk; ++i) {
    flooder.Send(FrameType::kWrite, "junk", /*session=*/i);
    ASSERT_TRUE(Pump());
  }
  spdlog::set_default_logger(previous);

  const std::string log = captured->str();
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("refused a handshake"), 1u) << log;
  EXPECT_EQ(count("dropped a frame"), 1u) << log;
  EXPECT_EQ(count("\n"), 2u) << log;
  EXPECT_EQ(server_->handshake_log().suppressed(), kHellos - 1u);
  EXPECT_EQ(server_->drop_log().suppressed(), kJunk - 1u);
  // The counters still see every one.
  EXPECT_EQ(counters_.handshakes_rejected.load(), static_cast<uint64_t>(kHellos));
  EXPECT_EQ(counters_.frames_dropped.load(), static_cast<uint64_t>(kJunk));
}

TEST_F(TcpServerTest, MembersBeyondTheSessionCapCloseTheIdlestSession) {
  options_.connection_limits.max_sessions = 2;
  StartServer();
  RawPeer first(ctx_, endpoint_), second(ctx_, endpoint_), third(ctx_, endpoint_);
  const uint64_t s1 = Authenticate(first);
  now_ += std::chrono::seconds(1);
  const uint64_t s2 = Authenticate(second);
  now_ += std::chrono::seconds(1);
  ASSERT_TRUE(SessionWorks(first, s1));  // `second` is now the one idle longest
  now_ += std::chrono::seconds(1);
  const uint64_t s3 = Authenticate(third);
  ASSERT_NE(s3, 0u);
  EXPECT_EQ(server_->sessions(), 2u);
  Reply closed = second.Receive();
  EXPECT_EQ(closed.type, static_cast<int>(FrameType::kReject));
  EXPECT_TRUE(SessionWorks(first, s1));
  EXPECT_TRUE(SessionWorks(third, s3));
  (void)s2;
}

}  // namespace
}  // namespace tandem::kv
