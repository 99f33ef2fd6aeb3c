// What a peer without the cluster secret can make a real worker hold or write before it is
// refused: large unauthenticated gRPC calls, session-socket connections announcing 60 MiB frames
// or sitting silent, and floods of garbage on the prefill worker's bootstrap channel. Each is
// refused, the worker's resident memory (VmRSS) stays within a stated bound, refusals are logged
// at most about once a second with a count, and authenticated sessions and a router's legs keep
// working during and after. Loopback only (extra source addresses 127.0.0.x stand in for other
// hosts); every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/frames.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/kv_control.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"
#include "worker/handoff/control_channel.h"
#include "worker/session_preauth.h"
#include "zmq.hpp"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

constexpr int64_t kMiB = int64_t{1} << 20;
// What one attacker's round may add to a worker's resident memory. Before the limits, 8 calls
// of 60 MiB took a decode worker from 59 MiB to 1.1 GiB and 24 socket connections to 1.8 GiB.
constexpr int64_t kRssGrowthBound = 128 * kMiB;
constexpr size_t kAttackFrameBytes = 60 << 20;

std::chrono::system_clock::time_point In(int s) {
  return std::chrono::system_clock::now() + seconds(s);
}

int64_t Rss(const WorkerProcess& w) { return ProcStatusBytes(w.process->pid(), "VmRSS"); }

// Lines of the worker's output containing `needle`.
std::vector<std::string> LinesWith(const WorkerProcess& w, const std::string& needle) {
  std::vector<std::string> lines;
  const std::string out = w.process->Output();
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    if (line.find(needle) != std::string::npos) lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

int SessionPort(const WorkerProcess& w) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30));
  proto::HealthResponse health;
  const grpc::Status s = w.stub->Health(&ctx, proto::HealthRequest(), &health);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return health.session_port();
}

// A raw TCP connection to a worker's session socket from `source` (a 127.0.0.x address), reads
// bounded by a 30 s receive timeout.
class RawConnection {
 public:
  RawConnection(int port, const std::string& source) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    timeval timeout{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) return;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }

  // Sends all of `bytes`; false once the worker closed the connection.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next SessionDown; nullopt at the close (or after 30 s of silence).
  std::optional<proto::SessionDown> Read() {
    for (;;) {
      absl::StatusOr<std::optional<std::string_view>> frame = reader_.Next();
      if (!frame.ok()) return std::nullopt;
      if (frame->has_value()) {
        proto::SessionDown down;
        if (!down.ParseFromArray((*frame)->data(), static_cast<int>((*frame)->size()))) {
          return std::nullopt;
        }
        return down;
      }
      const ssize_t n = recv(fd_, reader_.Prepare(65536), 65536, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) timed_out_ = true;
      if (n <= 0) return std::nullopt;
      reader_.Commit(static_cast<size_t>(n));
    }
  }

  // Reads until the close; the `ended` status the worker sent last (code 0 if none). A
  // connection the worker leaves open is a test failure.
  proto::CallError ReadUntilClosed() {
    proto::CallError ended;
    for (int i = 0; i < 1000; ++i) {
      std::optional<proto::SessionDown> down = Read();
      if (!down) break;
      if (down->has_ended()) ended = down->ended();
    }
    EXPECT_FALSE(timed_out_) << "the worker left the connection open for 30 s";
    return ended;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool timed_out_ = false;  // a read waited 30 s for nothing
  FrameReader reader_{kMaxSessionFrameBytes};
};

std::string Frame(const proto::SessionUp& up) {
  std::string out;
  AppendFrame(&out, up.SerializeAsString());
  return out;
}

// A session that answered the challenge with the cluster token, as the router's does.
class AuthedSession {
 public:
  // `audience`: the worker's instance id (WorkerProcess::instance_id), which tokens name.
  AuthedSession(int port, const std::string& source, const std::string& audience)
      : conn_(port, source) {
    std::optional<proto::SessionDown> hello = conn_.Read();
    if (!hello || hello->challenge().empty()) return;
    proto::SessionUp up;
    up.set_auth(MakeClusterToken(kTestClusterSecret, hello->challenge(), audience, absl::Now()));
    ok_ = conn_.Send(Frame(up));
  }
  bool ok() const { return ok_; }

  // Runs one greedy colocated decode leg; true when its last event arrives.
  bool RunLeg(uint64_t call_id) {
    proto::SessionUp up;
    proto::SessionCall* call = up.add_calls();
    call->set_call_id(call_id);
    proto::DecodeRequest* d = call->mutable_decode();
    d->set_rid(absl::StrCat("preauth-", call_id));
    for (int t = 1; t <= 8; ++t) d->add_input_ids(100 + t);
    d->mutable_sampling_params()->set_max_new_tokens(2);
    d->mutable_sampling_params()->set_temperature(0);
    d->mutable_sampling_params()->set_ignore_eos(true);
    if (!conn_.Send(Frame(up))) return false;
    for (int i = 0; i < 100; ++i) {
      std::optional<proto::SessionDown> down = conn_.Read();
      if (!down || down->has_ended()) return false;
      for (const proto::SessionReply& r : down->replies()) {
        if (r.call_id() != call_id) continue;
        if (r.has_error()) {
          ADD_FAILURE() << r.error().message();
          return false;
        }
        if (r.has_event() && r.event().finished()) return true;
      }
    }
    return false;
  }

 private:
  RawConnection conn_;
  bool ok_ = false;
};

class WorkerPreauthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
  }
  static void TearDownTestSuite() {
    delete prefill_;
    delete decode_;
    delete colocated_;
  }

  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
  static WorkerProcess* colocated_;
};

WorkerProcess* WorkerPreauthTest::prefill_ = nullptr;
WorkerProcess* WorkerPreauthTest::decode_ = nullptr;
WorkerProcess* WorkerPreauthTest::colocated_ = nullptr;

TEST_F(WorkerPreauthTest, LargeUnauthenticatedGrpcCallsAreRefusedWithinTheMemoryBound) {
  ASSERT_NE(decode_->stub, nullptr);
  const int64_t before = Rss(*decode_);
  ASSERT_GT(before, 0);
  // 8 callers at once, each on its own connection, each sending a 60 MiB Prefill request.
  proto::PrefillRequest big;
  big.set_rid(std::string(kAttackFrameBytes, 'a'));
  big.set_bootstrap_room(7);
  std::vector<grpc::Status> results(8);
  std::atomic<int> finished{0};
  std::vector<std::thread> callers;
  for (size_t i = 0; i < results.size(); ++i) {
    callers.emplace_back([&, i] {
      grpc::ChannelArguments args;
      args.SetInt("tandem.test.connection", static_cast<int>(i));  // no channel sharing
      auto stub = proto::Worker::NewStub(grpc::CreateCustomChannel(
          decode_->grpc_address(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(In(120));
      proto::PrefillResponse response;
      results[i] = stub->Prefill(&ctx, big, &response);
      finished.fetch_add(1);
    });
  }
  // A caller with the secret is served meanwhile (small calls, as the router's health checks),
  // but not always: when the flood fills the quota gRPC reclaims memory by closing connections
  // with GOAWAY, an idle authenticated one too, and a call on it fails UNAVAILABLE (the channel
  // reconnects for the next).
  int served = 0, failed = 0;
  for (int i = 0; i < 100000 && finished.load() < static_cast<int>(results.size()); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30));
    proto::LoadReport load;
    const grpc::Status s = decode_->stub->GetLoad(&ctx, proto::LoadRequest(), &load);
    (s.ok() ? served : failed) += 1;
    if (!s.ok()) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    }
  }
  for (std::thread& t : callers) t.join();
  std::printf("authenticated GetLoad during the flood: %d served, %d failed\n", served, failed);
  EXPECT_GT(served, 0);
  for (const grpc::Status& s : results) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  }
  const int64_t after = Rss(*decode_);
  const int64_t peak = ProcStatusBytes(decode_->process->pid(), "VmHWM");
  std::printf("decode worker VmRSS before %lld MiB, after %lld MiB, VmHWM %lld MiB\n",
              static_cast<long long>(before / kMiB), static_cast<long long>(after / kMiB),
              static_cast<long long>(peak / kMiB));
  EXPECT_LT(after - before, kRssGrowthBound);
  EXPECT_LT(peak - before, kRssGrowthBound);
  // The worker still serves a caller with the secret.
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30));
  proto::LoadReport load;
  EXPECT_TRUE(decode_->stub->GetLoad(&ctx, proto::LoadRequest(), &load).ok());
}

// rpc Session checks the token when the stream opens: a caller without it is refused before
// any of its messages is read, however much it writes.
TEST_F(WorkerPreauthTest, UnauthenticatedSessionStreamsAreRefusedBeforeAnyRead) {
  ASSERT_NE(decode_->stub, nullptr);
  const int64_t before = Rss(*decode_);
  ASSERT_GT(before, 0);
  proto::SessionUp up;  // 4 MiB: under the message limit, so only the token check refuses it
  up.add_calls()->mutable_decode()->set_rid(std::string(4 << 20, 'b'));
  std::vector<grpc::Status> results(8);
  std::vector<std::thread> callers;
  for (size_t i = 0; i < results.size(); ++i) {
    callers.emplace_back([&, i] {
      grpc::ChannelArguments args;
      args.SetInt("tandem.test.connection", static_cast<int>(100 + i));  // no channel sharing
      auto stub = proto::Worker::NewStub(grpc::CreateCustomChannel(
          decode_->grpc_address(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(In(120));
      auto stream = stub->Session(&ctx);
      int writes = 0;  // until the worker's refusal breaks the stream
      while (writes < 16 && stream->Write(up)) ++writes;
      stream->WritesDone();
      proto::SessionDown down;
      while (stream->Read(&down)) continue;
      results[i] = stream->Finish();
    });
  }
  for (std::thread& t : callers) t.join();
  // Each stream is refused by the token check; under load, gRPC reclaiming its buffer quota may
  // close a connection first (UNAVAILABLE or RESOURCE_EXHAUSTED), which refuses it as well.
  int unauthenticated = 0;
  for (const grpc::Status& s : results) {
    unauthenticated += s.error_code() == grpc::StatusCode::UNAUTHENTICATED;
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_code() << ": " << s.error_message();
  }
  EXPECT_GT(unauthenticated, 0);
  const int64_t after = Rss(*decode_);
  std::printf("decode worker VmRSS before %lld MiB, after 8 refused Session streams %lld MiB\n",
              static_cast<long long>(before / kMiB), static_cast<long long>(after / kMiB));
  EXPECT_LT(after - before, kRssGrowthBound);
}

TEST_F(WorkerPreauthTest, SessionSocketRefusesLargeFramesBeforeAuthentication) {
  ASSERT_NE(colocated_->stub, nullptr);
  const int port = SessionPort(*colocated_);
  ASSERT_GT(port, 0);
  AuthedSession session(port, "127.0.0.1", colocated_->instance_id);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(session.RunLeg(1));
  const int64_t before = Rss(*colocated_);
  ASSERT_GT(before, 0);

  // 24 connections from 3 addresses (so the per-address cap does not close them all at accept),
  // each announcing a 60 MiB frame and sending 8 MiB of it.
  std::vector<std::unique_ptr<RawConnection>> attackers;
  const std::string header = [] {
    std::string h;
    AppendFrameHeader(&h, static_cast<uint32_t>(kAttackFrameBytes));
    return h;
  }();
  const std::string partial(8 << 20, 'x');
  for (int i = 0; i < 24; ++i) {
    attackers.push_back(std::make_unique<RawConnection>(port, absl::StrCat("127.0.0.", 2 + i % 3)));
    ASSERT_TRUE(attackers.back()->connected());
    (void)attackers.back()->Send(header);
    (void)attackers.back()->Send(partial);  // the worker may have closed already
  }
  // The authenticated session works during the attack...
  EXPECT_TRUE(session.RunLeg(2));
  const int64_t during = Rss(*colocated_);
  // Each is closed. The `ended` naming the limit may be lost to the reset that closing a socket
  // with unread bytes sends; when it arrives it names the pre-authentication limit.
  for (auto& a : attackers) {
    const proto::CallError ended = a->ReadUntilClosed();
    if (ended.code() == 0) continue;
    EXPECT_EQ(ended.code(), grpc::StatusCode::INVALID_ARGUMENT) << ended.message();
    EXPECT_TRUE(absl::StrContains(ended.message(), "larger than the limit of 4096 bytes"))
        << ended.message();
  }
  const int64_t after = Rss(*colocated_);
  const int64_t peak = ProcStatusBytes(colocated_->process->pid(), "VmHWM");
  std::printf(
      "colocated worker VmRSS before %lld MiB, with the connections open %lld MiB, after "
      "%lld MiB, VmHWM %lld MiB\n",
      static_cast<long long>(before / kMiB), static_cast<long long>(during / kMiB),
      static_cast<long long>(after / kMiB), static_cast<long long>(peak / kMiB));
  EXPECT_LT(during - before, kRssGrowthBound);
  EXPECT_LT(after - before, kRssGrowthBound);
  EXPECT_LT(peak - before, kRssGrowthBound);
  // ...and after it.
  EXPECT_TRUE(session.RunLeg(3));
  AuthedSession fresh(port, "127.0.0.1", colocated_->instance_id);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh.RunLeg(4));
}

TEST_F(WorkerPreauthTest, UnauthenticatedConnectionsAreCappedAndTimedOut) {
  ASSERT_NE(colocated_->stub, nullptr);
  const int port = SessionPort(*colocated_);
  ASSERT_GT(port, 0);
  AuthedSession session(port, "127.0.0.1", colocated_->instance_id);
  ASSERT_TRUE(session.ok());

  // One address fills its share: the next connection from it is closed before the challenge.
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < worker::kMaxPreAuthConnectionsPerAddress; ++i) {
    silent.push_back(std::make_unique<RawConnection>(port, "127.0.0.10"));
    ASSERT_TRUE(silent.back()->connected());
    auto hello = silent.back()->Read();
    ASSERT_TRUE(hello.has_value());
    EXPECT_FALSE(hello->challenge().empty());
  }
  {
    RawConnection over(port, "127.0.0.10");
    ASSERT_TRUE(over.connected());
    EXPECT_FALSE(over.Read().has_value()) << "a connection over the per-address cap got served";
  }
  // Another address still gets in, and an authenticated session keeps working.
  {
    AuthedSession other(port, "127.0.0.20", colocated_->instance_id);
    ASSERT_TRUE(other.ok());
    EXPECT_TRUE(other.RunLeg(10));
  }
  EXPECT_TRUE(session.RunLeg(11));

  // Fill the total from more addresses; then no address gets in.
  const int per = worker::kMaxPreAuthConnectionsPerAddress;
  for (int a = 0; static_cast<int>(silent.size()) < worker::kMaxPreAuthConnections; ++a) {
    for (int i = 0; i < per && static_cast<int>(silent.size()) < worker::kMaxPreAuthConnections;
         ++i) {
      silent.push_back(std::make_unique<RawConnection>(port, absl::StrCat("127.0.0.", 11 + a)));
      ASSERT_TRUE(silent.back()->connected());
      ASSERT_TRUE(silent.back()->Read().has_value());
    }
  }
  {
    RawConnection over(port, "127.0.0.30");
    ASSERT_TRUE(over.connected());
    EXPECT_FALSE(over.Read().has_value()) << "a connection over the total cap got served";
  }
  EXPECT_TRUE(session.RunLeg(12));  // already authenticated: unaffected by the caps

  // Silent connections are ended by the handshake timeout, naming it.
  for (auto& s : silent) {
    const proto::CallError ended = s->ReadUntilClosed();
    EXPECT_EQ(ended.code(), grpc::StatusCode::DEADLINE_EXCEEDED) << ended.message();
    EXPECT_TRUE(absl::StrContains(ended.message(), "no first message within 10 s"))
        << ended.message();
  }
  silent.clear();
  // Their places are free again (released just after the close: a few bounded tries).
  bool admitted = false;
  for (int attempt = 0; attempt < 50 && !admitted; ++attempt) {
    RawConnection again(port, "127.0.0.10");
    auto hello = again.Read();
    admitted = hello.has_value() && !hello->challenge().empty();
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(admitted);
  EXPECT_LE(LinesWith(*colocated_, "session socket from").size(), 40u)
      << "refusals are logged about once a second";
}

// Sends a sealed RegisterPeer with no layout and reads answers until the worker's refusal of its
// layout: one DEALER's messages are handled in order, so by then every message sent before it
// was handled. The answers to garbage read on the way are added to `*garbage_answers`.
bool SyncWithBootstrap(zmq::socket_t& dealer, int* garbage_answers) {
  proto::ControlMessage m;
  m.mutable_register_peer()->set_decode_worker_id("preauth-test");
  const std::string sealed = worker::SealControl(kTestClusterSecret, std::move(m));
  if (!dealer.send(zmq::buffer(sealed), zmq::send_flags::none)) return false;
  for (int i = 0; i < 10000; ++i) {
    zmq::message_t reply;
    if (!dealer.recv(reply, zmq::recv_flags::none).has_value()) return false;
    auto opened = worker::OpenControl(kTestClusterSecret, reply.to_string());
    if (opened.ok() && opened->has_register_peer_reply() &&
        opened->register_peer_reply().error().find("cannot share KV") != std::string::npos) {
      return true;
    }
    ++*garbage_answers;
  }
  return false;
}

TEST_F(WorkerPreauthTest, GarbageOnTheBootstrapChannelIsLoggedOnceASecondWithACount) {
  ASSERT_NE(prefill_->stub, nullptr);
  const std::string kDropped = "bootstrap: dropped a message";
  const size_t lines_before = LinesWith(*prefill_, kDropped).size();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 30000);
  dealer.set(zmq::sockopt::sndtimeo, 30000);
  dealer.connect(absl::StrCat("tcp://127.0.0.1:", prefill_->bootstrap_port));
  constexpr int kGarbage = 5000;
  for (int i = 0; i < kGarbage; ++i) {
    const std::string garbage = absl::StrCat(std::string(40, static_cast<char>('a' + i % 26)), i);
    ASSERT_TRUE(dealer.send(zmq::buffer(garbage), zmq::send_flags::none).has_value());
  }
  int answers = 0;
  ASSERT_TRUE(SyncWithBootstrap(dealer, &answers)) << "the bootstrap server stopped answering";
  std::vector<std::string> lines = LinesWith(*prefill_, kDropped);
  ASSERT_GE(lines.size(), lines_before + 1);
  EXPECT_LE(lines.size() - lines_before, 5u) << "one line per message, not per second";

  // One more after the interval: its line counts every message that was not logged, so the lines
  // account for all of them.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(dealer.send(zmq::buffer(std::string("one more")), zmq::send_flags::none));
  ASSERT_TRUE(SyncWithBootstrap(dealer, &answers));
  lines = LinesWith(*prefill_, kDropped);
  int64_t accounted = 0;
  for (size_t i = lines_before; i < lines.size(); ++i) {
    const size_t open = lines[i].rfind('(');
    ASSERT_NE(open, std::string::npos) << lines[i];
    accounted += 1 + std::stoll(lines[i].substr(open + 1));
  }
  EXPECT_EQ(accounted, kGarbage + 1);
  // Refusals are answered ten times a second at most (one per message before).
  EXPECT_LT(answers, kGarbage / 10);
  std::printf("%d of %d garbage bootstrap messages answered\n", answers, kGarbage + 1);
  EXPECT_EQ(HttpGet(prefill_->http_port, "/health").status, 200);
}

// After all of the above, the router's legs still go through both workers (session sockets,
// bootstrap and KV transfer).
TEST_F(WorkerPreauthTest, ALegitimateLegGoesThroughAfterwards) {
  ASSERT_NE(prefill_->stub, nullptr);
  ASSERT_NE(decode_->stub, nullptr);
  std::unique_ptr<RouterProcess> router =
      StartRouter({"--pd-disaggregation", "--prefill", prefill_->url(),
                   std::to_string(prefill_->bootstrap_port), "--decode", decode_->url(),
                   "--cluster-secret", kTestClusterSecret});
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the router did not come up";
  testing::TestClient c(static_cast<uint16_t>(router->port), 120);
  const std::string body =
      nlohmann::json{{"text", "Tell me a fortune."},
                     {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}}}}
          .dump();
  ASSERT_TRUE(c.SendRequest("POST", "/generate", body,
                            "Content-Type: application/json\r\nConnection: close\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace tandem::itest
