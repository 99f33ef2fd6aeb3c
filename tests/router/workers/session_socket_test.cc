// The session socket (worker/session_socket.h, router/workers/worker_session.h): WorkerClient
// legs against an in-process worker whose Health advertises the socket, and raw peers on both
// ends. Legs, cancels, deadlines and prefill answers travel the socket (no rpc Session is
// opened); the cluster token answers a per-connection challenge; a wrong secret, garbage, an
// oversized frame or a silent peer end the session naming why; a worker that stops fails the
// live legs; an advertised port nobody listens on fails one round of legs and the next go over
// gRPC. Loopback only; every wait is bounded.
#include "worker/session_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/frames.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "router/workers/worker_client.h"
#include "tests/router/workers/session_test_support.h"
#include "worker/cluster_proof_service.h"
#include "worker/grpc_link.h"

namespace tandem::router {
namespace {

constexpr char kSecret[] = "0123456789abcdef-session-secret";
// The stand-in worker's instance id: tokens for its session socket must name it.
constexpr char kInstanceId[] = "session-socket-test-instance";

// gRPC Health advertising `session_port`, and rpc Session (counted, to show it is not used).
class AdvertisingService : public proto::Worker::CallbackService {
 public:
  AdvertisingService(ScriptedLegs* legs, int session_port)
      : legs_(legs), session_port_(session_port) {}
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* /*request*/,
                                   proto::HealthResponse* response) override {
    response->set_status(proto::HealthResponse::SERVING);
    response->set_session_port(session_port_.load());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(
      grpc::CallbackServerContext* /*context*/) override {
    grpc_sessions_.fetch_add(1);
    return worker::ServeGrpcLink(&sessions_, legs_);
  }
  int grpc_sessions() const { return grpc_sessions_.load(); }
  void Advertise(int session_port) { session_port_.store(session_port); }
  void Close() { sessions_.CloseAll(); }

 private:
  ScriptedLegs* legs_;
  std::atomic<int> session_port_;
  worker::LinkServer sessions_;
  std::atomic<int> grpc_sessions_{0};
};

// A worker on 127.0.0.1: the session socket (unless `advertise` overrides the port Health
// reports) and gRPC.
class SocketWorker {
 public:
  explicit SocketWorker(std::string secret = "", int advertise = -1) {
    auto sockets = worker::LinkSocketServer::Start("127.0.0.1", 0, &legs_, secret, kInstanceId,
                                                   "--session-port: ");
    EXPECT_TRUE(sockets.ok()) << sockets.status();
    if (sockets.ok()) sockets_ = *std::move(sockets);
    service_ = std::make_unique<AdvertisingService>(
        &legs_, advertise >= 0 ? advertise : (sockets_ ? sockets_->port() : 0));
    proof_ = std::make_unique<worker::ClusterProofService>(secret, kInstanceId);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port_);
    builder.RegisterService(service_.get());
    builder.RegisterService(proof_.get());
    server_ = builder.BuildAndStart();
    proof_->SetGrpcPort(grpc_port_);
  }
  ~SocketWorker() {
    if (sockets_) sockets_->CloseAll();
    service_->Close();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }
  bool ok() const { return sockets_ != nullptr && server_ != nullptr && grpc_port_ > 0; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", grpc_port_); }
  int session_port() const { return sockets_->port(); }
  worker::LinkSocketServer& sockets() { return *sockets_; }
  ScriptedLegs& legs() { return legs_; }
  AdvertisingService& service() { return *service_; }

 private:
  ScriptedLegs legs_;
  std::unique_ptr<worker::LinkSocketServer> sockets_;
  std::unique_ptr<AdvertisingService> service_;
  std::unique_ptr<worker::ClusterProofService> proof_;
  int grpc_port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// The client's proof exchange with its worker, waited for.
absl::Status Prove(WorkerClient& client) {
  std::promise<absl::Status> proved;
  client.Prove(absl::Now() + kWait, [&proved](absl::Status s) { proved.set_value(std::move(s)); });
  return proved.get_future().get();
}

// A client that has heard the worker's Health (so its legs go to port `expect`), after the
// worker proved the secret when there is one.
std::shared_ptr<WorkerClient> Connect(const std::string& url, int expect,
                                      const std::string& secret = "") {
  auto client = WorkerClient::Create(url, secret);
  EXPECT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(Prove(**client).ok());
  std::promise<grpc::Status> health;
  (*client)->Health(false, absl::Now() + kWait, [&health](grpc::Status s, proto::HealthResponse) {
    health.set_value(std::move(s));
  });
  EXPECT_TRUE(health.get_future().get().ok());
  EXPECT_TRUE(WaitFor([&] { return (*client)->session_port() == expect; }));
  return *client;
}

TEST(SessionSocketTest, LegsTravelTheSocketNotRpcSession) {
  SocketWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), w.session_port());
  ExpectConcurrentLegsServed(*client, 200);
  EXPECT_EQ(w.sockets().accepted(), 1);
  EXPECT_EQ(w.service().grpc_sessions(), 0);
}

TEST(SessionSocketTest, CancelAndDeadlineAbortTheLegOnTheWorker) {
  SocketWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), w.session_port());
  auto cancelled = std::make_shared<DecodeWatch>();
  auto handle = StartDecode(*client, "hold-1", absl::InfiniteFuture(), cancelled);
  ASSERT_TRUE(WaitFor([&] { return w.legs().held_count() == 1; }));
  handle->Cancel();
  EXPECT_EQ(Wait(cancelled).status.code(), absl::StatusCode::kCancelled);
  auto timed = std::make_shared<DecodeWatch>();
  StartDecode(*client, "hold-2", absl::Now() + absl::Milliseconds(300), timed);
  EXPECT_EQ(Wait(timed).status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(WaitFor([&] { return w.legs().decode_cancels() == 2; }));
  EXPECT_TRUE(WaitFor([&] { return w.legs().live_holds() == 0; }));
}

TEST(SessionSocketTest, PrefillAnswersAndErrors) {
  SocketWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), w.session_port());
  for (const char* rid : {"ok", "err"}) {
    std::promise<std::pair<absl::Status, proto::PrefillResponse>> promise;
    proto::PrefillRequest request;
    request.set_rid(rid);
    request.set_bootstrap_room(42);
    client->StartPrefill(std::move(request), LegDeadline(absl::Now() + kWait),
                         [&promise](absl::Status s, proto::PrefillResponse r) {
                           promise.set_value({std::move(s), std::move(r)});
                         });
    auto [status, answer] = promise.get_future().get();
    if (std::string(rid) == "ok") {
      EXPECT_TRUE(status.ok()) << status;
      EXPECT_EQ(answer.first_token_id(), 7);
      EXPECT_EQ(answer.bootstrap_room(), 42u);
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(status.message(), "not a prefill worker");
    }
  }
}

TEST(SessionSocketTest, TheClusterSecretAnswersTheChallenge) {
  SocketWorker w(kSecret);
  ASSERT_TRUE(w.ok());
  auto good = Connect(w.url(), w.session_port(), kSecret);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*good, "ok:2", absl::Now() + kWait, watch);
  EXPECT_TRUE(Wait(watch).status.ok());

  // A router with another secret: the worker's proof does not check out, so the client stays
  // unverified and its leg fails without reaching the worker.
  const int accepted = w.sockets().accepted();
  auto bad = WorkerClient::Create(w.url(), "another-secret-of-16+-bytes");
  ASSERT_TRUE(bad.ok());
  const absl::Status proof = Prove(**bad);
  EXPECT_EQ(proof.code(), absl::StatusCode::kUnauthenticated) << proof;
  EXPECT_TRUE(absl::StrContains(proof.message(), "did not prove the cluster secret")) << proof;
  EXPECT_FALSE((*bad)->verified());
  auto refused = std::make_shared<DecodeWatch>();
  StartDecode(**bad, "ok:2", absl::Now() + kWait, refused);
  DecodeResult r = Wait(refused);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status.message(), "unverified")) << r.status.message();
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(w.sockets().accepted(), accepted);
  EXPECT_EQ(w.legs().held_count(), 0);
}

TEST(SessionSocketTest, AStoppingWorkerFailsItsLiveLegs) {
  auto w = std::make_unique<SocketWorker>();
  ASSERT_TRUE(w->ok());
  auto client = Connect(w->url(), w->session_port());
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "hold-3", absl::InfiniteFuture(), watch);
  ASSERT_TRUE(WaitFor([&] { return w->legs().held_count() == 1; }));
  w->sockets().CloseAll();
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status.message(), "the worker is stopping"))
      << r.status.message();
  EXPECT_EQ(w->legs().decode_cancels(), 1);
  EXPECT_EQ(watch->done_calls.load(), 1);
}

// A loopback port that refuses connections while this lives: bound, never listening.
class RefusingPort {
 public:
  RefusingPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }  // 0: the port could not be bound

 private:
  const int fd_;
  int port_ = 0;
};

TEST(SessionSocketTest, AnUnreachableSocketFailsOnceThenLegsGoOverGrpc) {
  // Health advertises a port on which nothing listens.
  RefusingPort dead;
  ASSERT_GT(dead.port(), 0);
  const int dead_port = dead.port();
  SocketWorker w("", dead_port);
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), dead_port);
  auto first = std::make_shared<DecodeWatch>();
  StartDecode(*client, "ok:1", absl::Now() + kWait, first);
  DecodeResult r = Wait(first);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status.message(), "session socket at 127.0.0.1:"))
      << r.status.message();
  bool served = false;
  for (int i = 0; i < 20 && !served; ++i) {
    auto next = std::make_shared<DecodeWatch>();
    StartDecode(*client, "ok:1", absl::Now() + kWait, next);
    served = Wait(next).status.ok();
    if (!served) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(served);
  EXPECT_GE(w.service().grpc_sessions(), 1);
}

TEST(SessionSocketTest, AWorkerOnANewSessionPortIsFoundAtOnce) {
  // The router knows a port that no longer listens (the worker was restarted); Health now
  // advertises the new one. No health check is scheduled here: the failed connection asks.
  RefusingPort old;
  ASSERT_GT(old.port(), 0);
  const int old_port = old.port();
  SocketWorker w("", old_port);
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), old_port);
  w.service().Advertise(w.session_port());
  auto first = std::make_shared<DecodeWatch>();
  StartDecode(*client, "ok:1", absl::Now() + kWait, first);
  EXPECT_EQ(Wait(first).status.code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(WaitFor([&] { return client->session_port() == w.session_port(); }));
  ExpectConcurrentLegsServed(*client, 20);
  EXPECT_EQ(w.sockets().accepted(), 1);
}

// A raw connection to a worker's session socket.
class RawPeer {
 public:
  explicit RawPeer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    timeval tv{20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawPeer() { close(fd_); }
  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // The next SessionDown; nullopt at EOF, timeout or a bad frame.
  std::optional<proto::SessionDown> Read() {
    for (;;) {
      auto frame = reader_.Next();
      if (!frame.ok()) return std::nullopt;
      if (frame->has_value()) {
        proto::SessionDown down;
        if (!down.ParseFromArray((*frame)->data(), static_cast<int>((*frame)->size()))) {
          return std::nullopt;
        }
        return down;
      }
      const ssize_t n = recv(fd_, reader_.Prepare(4096), 4096, 0);
      if (n <= 0) return std::nullopt;
      reader_.Commit(static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  FrameReader reader_{64 << 20};
};

std::string Frame(const proto::SessionUp& up) {
  std::string out;
  AppendFrame(&out, up.SerializeAsString());
  return out;
}

// The worker's last word before closing: its `ended` status.
proto::CallError EndedWith(RawPeer& peer) {
  for (;;) {
    std::optional<proto::SessionDown> down = peer.Read();
    if (!down) return proto::CallError();
    if (down->has_ended()) {
      EXPECT_FALSE(peer.Read().has_value()) << "the connection stays open after `ended`";
      return down->ended();
    }
  }
}

TEST(SessionSocketTest, TheWorkerRefusesWhatIsNotTheProtocol) {
  SocketWorker w(kSecret);
  ASSERT_TRUE(w.ok());
  {  // bytes that are not a SessionUp
    RawPeer peer(w.session_port());
    ASSERT_TRUE(peer.connected());
    auto hello = peer.Read();
    ASSERT_TRUE(hello.has_value());
    EXPECT_TRUE(absl::StartsWith(hello->challenge(), "tandem-session-v1 "));
    std::string junk;
    AppendFrame(&junk, std::string("\xff\xff\xff\xff not protobuf", 17));
    ASSERT_TRUE(peer.Send(junk));
    const proto::CallError e = EndedWith(peer);
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(e.message(), "a 17-byte message on the session socket is not a SessionUp");
  }
  {  // a frame larger than the limit
    RawPeer peer(w.session_port());
    ASSERT_TRUE(peer.Read().has_value());
    ASSERT_TRUE(peer.Send(std::string("\x7f\xff\xff\xff", 4)));
    const proto::CallError e = EndedWith(peer);
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    // Before the token, only the small first message is allowed (worker/session_preauth.h).
    EXPECT_TRUE(absl::StrContains(e.message(), "larger than the limit of 4096 bytes"))
        << e.message();
  }
  {  // a token for this challenge but made for another worker (relayed by a stranger)
    RawPeer peer(w.session_port());
    auto hello = peer.Read();
    ASSERT_TRUE(hello.has_value());
    proto::SessionUp up;
    up.set_auth(MakeClusterToken(kSecret, hello->challenge(), "another-instance", absl::Now()));
    up.add_calls()->set_call_id(1);
    up.mutable_calls(0)->mutable_decode()->set_rid("ok:1");
    ASSERT_TRUE(peer.Send(Frame(up)));
    const proto::CallError e = EndedWith(peer);
    EXPECT_EQ(e.code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(absl::StrContains(e.message(), "another worker")) << e.message();
  }
  {  // a token made for another connection's challenge: no replay
    RawPeer first(w.session_port());
    auto first_hello = first.Read();
    ASSERT_TRUE(first_hello.has_value());
    RawPeer second(w.session_port());
    ASSERT_TRUE(second.Read().has_value());
    proto::SessionUp up;
    up.set_auth(MakeClusterToken(kSecret, first_hello->challenge(), kInstanceId, absl::Now()));
    up.add_calls()->set_call_id(1);
    up.mutable_calls(0)->mutable_decode()->set_rid("ok:1");
    ASSERT_TRUE(second.Send(Frame(up)));
    const proto::CallError e = EndedWith(second);
    EXPECT_EQ(e.code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(absl::StartsWith(e.message(), "missing or wrong cluster secret")) << e.message();
    // The token does open the connection it was made for, and the leg runs.
    ASSERT_TRUE(first.Send(Frame(up)));
    auto down = first.Read();
    ASSERT_TRUE(down.has_value());
    ASSERT_EQ(down->replies_size(), 1);
    EXPECT_TRUE(down->replies(0).event().finished());
  }
  EXPECT_EQ(w.legs().held_count(), 0);
}

// A "worker" whose session socket port answers with bytes that are not frames.
TEST(SessionSocketTest, ARouterFailsLegsOnAPeerThatIsNotAWorker) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread peer([fd] {
    const int c = accept(fd, nullptr, nullptr);
    if (c < 0) return;
    static const char kJunk[] = "HTTP/1.1 200 OK\r\n\r\nnot a worker";
    (void)!write(c, kJunk, sizeof(kJunk) - 1);
    absl::SleepFor(absl::Seconds(1));
    close(c);
  });
  SocketWorker w("", ntohs(addr.sin_port));
  ASSERT_TRUE(w.ok());
  auto client = Connect(w.url(), ntohs(addr.sin_port));
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "ok:1", absl::Now() + kWait, watch);
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(r.status.message(), "does not speak the session protocol"))
      << r.status.message();
  EXPECT_EQ(watch->done_calls.load(), 1);
  peer.join();
  close(fd);
}

}  // namespace
}  // namespace tandem::router
