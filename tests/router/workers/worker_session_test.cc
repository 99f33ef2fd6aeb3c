// The router's WorkerClient legs (Prefill, Decode) over rpc Session against an in-process gRPC
// server running the workers' own session code (worker/session_server.h) on scripted legs:
// events and answers, leg errors, cancellation and deadlines (the leg is aborted on the server
// too), many legs on one session, a session the worker closes, a client dropped mid-leg, and
// malformed session calls. Loopback only; every wait is bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "router/workers/worker_client.h"
#include "tests/router/workers/session_test_support.h"
#include "worker/grpc_link.h"
#include "worker/session_server.h"

namespace tandem::router {
namespace {

class SessionService : public proto::Worker::CallbackService {
 public:
  explicit SessionService(ScriptedLegs* legs) : legs_(legs) {}
  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(
      grpc::CallbackServerContext* /*context*/) override {
    opened_.fetch_add(1);
    return worker::ServeGrpcLink(&sessions_, legs_);
  }
  void CloseSessions() { sessions_.CloseAll(); }
  int opened() const { return opened_.load(); }

 private:
  ScriptedLegs* legs_;
  worker::LinkServer sessions_;
  std::atomic<int> opened_{0};
};

// An in-process worker on 127.0.0.1 (port 0: any; else that port).
class TestWorker {
 public:
  explicit TestWorker(int port = 0) : service_(&legs_) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~TestWorker() { Stop(); }
  void Stop() {
    if (server_ == nullptr) return;
    service_.CloseSessions();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    server_.reset();
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  ScriptedLegs& legs() { return legs_; }
  SessionService& service() { return service_; }

 private:
  ScriptedLegs legs_;
  SessionService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::shared_ptr<WorkerClient> Connect(const TestWorker& w) {
  auto client = WorkerClient::Create(w.url());
  EXPECT_TRUE(client.ok()) << client.status();
  return *client;
}

TEST(WorkerSessionTest, DecodeEventsArriveInOrderThenOk) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "ok:3", absl::InfiniteFuture(), watch);
  DecodeResult r = Wait(watch);
  EXPECT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.events.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.events[i].token_ids(0), 100 + i);
  EXPECT_TRUE(r.events[2].finished());
  EXPECT_EQ(watch->done_calls.load(), 1);
}

TEST(WorkerSessionTest, ALegThatCannotStartEndsWithTheWorkersStatus) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "err", absl::InfiniteFuture(), watch);
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status.message(), "input_ids: empty prompt");
  EXPECT_TRUE(r.events.empty());
}

TEST(WorkerSessionTest, CancelEndsTheLegCancelledAndAbortsItOnTheWorker) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto watch = std::make_shared<DecodeWatch>();
  auto call = StartDecode(*client, "hold-1", absl::InfiniteFuture(), watch);
  ASSERT_TRUE(WaitFor([&] { return w.legs().held_count() == 1; }));
  call->Cancel();
  call->Cancel();  // idempotent
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(WaitFor([&] { return w.legs().decode_cancels() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return w.legs().live_holds() == 0; }));
  call->Cancel();  // after the end: nothing
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(watch->done_calls.load(), 1);
}

TEST(WorkerSessionTest, TheDeadlineEndsTheLegAndAbortsItOnTheWorker) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "hold-2", absl::Now() + absl::Milliseconds(200), watch);
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(WaitFor([&] { return w.legs().decode_cancels() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return w.legs().live_holds() == 0; }));
}

TEST(WorkerSessionTest, PrefillAnswersErrorsAndCancels) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto prefill = [&](const std::string& rid, uint64_t room) {
    auto promise =
        std::make_shared<std::promise<std::pair<absl::Status, proto::PrefillResponse>>>();
    proto::PrefillRequest request;
    request.set_rid(rid);
    request.set_bootstrap_room(room);
    auto call = client->StartPrefill(std::move(request), Deadline::Never(),
                                     [promise](absl::Status s, proto::PrefillResponse r) {
                                       promise->set_value({std::move(s), std::move(r)});
                                     });
    return std::make_pair(call, promise->get_future());
  };
  auto [ok_call, ok] = prefill("ok", 41);
  ASSERT_EQ(ok.wait_for(absl::ToChronoSeconds(kWait)), std::future_status::ready);
  auto ok_result = ok.get();
  EXPECT_TRUE(ok_result.first.ok());
  EXPECT_EQ(ok_result.second.first_token_id(), 7);
  EXPECT_EQ(ok_result.second.bootstrap_room(), 41u);

  auto [err_call, err] = prefill("err", 42);
  ASSERT_EQ(err.wait_for(absl::ToChronoSeconds(kWait)), std::future_status::ready);
  auto err_result = err.get();
  EXPECT_EQ(err_result.first.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(err_result.first.message(), "not a prefill worker");

  auto [held_call, held] = prefill("hold", 43);
  ASSERT_TRUE(WaitFor([&] { return w.legs().live_holds() == 1; }));
  held_call->Cancel();
  ASSERT_EQ(held.wait_for(absl::ToChronoSeconds(kWait)), std::future_status::ready);
  EXPECT_EQ(held.get().first.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(WaitFor([&] { return w.legs().prefill_cancels() == 1; }));
}

TEST(WorkerSessionTest, ManyConcurrentLegsShareOneSession) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  ExpectConcurrentLegsServed(*client, 300);
  EXPECT_EQ(w.service().opened(), 1);
}

TEST(WorkerSessionTest, AClosedSessionFailsItsLegsAndTheNextLegOpensANewOne) {
  auto w = std::make_unique<TestWorker>();
  ASSERT_TRUE(w->ok());
  const int port = w->port();
  auto client = Connect(*w);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "hold-3", absl::InfiniteFuture(), watch);
  ASSERT_TRUE(WaitFor([&] { return w->legs().held_count() == 1; }));
  w->Stop();  // closes the session: the held leg is cancelled on the worker
  DecodeResult r = Wait(watch);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w->legs().decode_cancels(), 1);

  // A worker back on the same port: a new session carries the next legs (the channel reconnects
  // with backoff, so early legs may still fail UNAVAILABLE).
  w = std::make_unique<TestWorker>(port);
  ASSERT_TRUE(w->ok());
  bool served = false;
  const absl::Time give_up = absl::Now() + kWait;
  while (!served && absl::Now() < give_up) {
    auto again = std::make_shared<DecodeWatch>();
    StartDecode(*client, "ok:1", absl::Now() + absl::Seconds(5), again);
    DecodeResult next = Wait(again);
    served = next.status.ok();
    if (!served) {
      EXPECT_EQ(next.status.code(), absl::StatusCode::kUnavailable);
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  EXPECT_TRUE(served);
  EXPECT_GE(w->service().opened(), 1);
}

TEST(WorkerSessionTest, LegsOutliveTheClientThatStartedThem) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto client = Connect(w);
  auto watch = std::make_shared<DecodeWatch>();
  StartDecode(*client, "hold-4", absl::InfiniteFuture(), watch);
  ASSERT_TRUE(WaitFor([&] { return w.legs().held_count() == 1; }));
  client.reset();  // e.g. the worker was removed from the router while the leg ran
  w.legs().Release("hold-4");
  DecodeResult r = Wait(watch);
  EXPECT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(w.legs().decode_cancels(), 0);
}

// A "worker" that answers every connection with bytes that are not HTTP/2, then closes it.
class GarbagePeer {
 public:
  GarbagePeer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listening socket was shut down
        static const char kJunk[] = "HTTP/1.1 200 OK\r\n\r\n\x01\x02 not a gRPC worker";
        (void)!write(c, kJunk, sizeof(kJunk) - 1);
        close(c);
      }
    });
  }
  ~GarbagePeer() {
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(WorkerSessionTest, APeerThatSpeaksGarbageFailsLegsPromptlyAndOnce) {
  GarbagePeer peer;
  ASSERT_GT(peer.port(), 0);
  auto client = WorkerClient::Create(absl::StrCat("http://127.0.0.1:", peer.port()));
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) {  // the first leg opens the session; later ones find it failed
    auto watch = std::make_shared<DecodeWatch>();
    StartDecode(**client, "ok:1", absl::Now() + absl::Seconds(60), watch);
    DecodeResult r = Wait(watch);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << i << ": " << r.status.message();
    EXPECT_TRUE(r.events.empty());
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(watch->done_calls.load(), 1);
  }
}

// A worker that answers every prefill leg with an unfinished decode event, which no prefill leg
// can carry; notes when its session ends.
class WrongAnswerWorker : public proto::Worker::Service {
 public:
  WrongAnswerWorker() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~WrongAnswerWorker() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }
  grpc::Status Session(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<proto::SessionDown, proto::SessionUp>* stream) override {
    proto::SessionUp up;
    while (stream->Read(&up)) {
      proto::SessionDown down;
      for (const auto& call : up.calls()) {
        if (!call.has_prefill()) continue;
        auto* reply = down.add_replies();
        reply->set_call_id(call.call_id());
        reply->mutable_event()->add_token_ids(1);
      }
      if (down.replies_size() > 0 && !stream->Write(down)) break;
    }
    session_ended_.Notify();
    return grpc::Status::OK;
  }
  int port() const { return port_; }
  absl::Notification& session_ended() { return session_ended_; }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Notification session_ended_;
};

// The leg ends INTERNAL naming the breach, and is forgotten: once the client lets go, its
// session has no legs left and closes.
TEST(WorkerSessionTest, APrefillLegAnsweredWithAnEventEndsAndIsForgotten) {
  WrongAnswerWorker w;
  ASSERT_GT(w.port(), 0);
  auto client = WorkerClient::Create(absl::StrCat("http://127.0.0.1:", w.port()));
  ASSERT_TRUE(client.ok()) << client.status();
  std::promise<absl::Status> promise;
  proto::PrefillRequest request;
  request.set_rid("p");
  request.set_bootstrap_room(9);
  (*client)->StartPrefill(
      std::move(request), LegDeadline(absl::Now() + kWait),
      [&promise](absl::Status s, proto::PrefillResponse) { promise.set_value(s); });
  auto future = promise.get_future();
  ASSERT_EQ(future.wait_for(absl::ToChronoSeconds(kWait)), std::future_status::ready);
  const absl::Status status = future.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "the worker answered a prefill leg with something else");
  EXPECT_FALSE(w.session_ended().HasBeenNotified());
  client->reset();
  EXPECT_TRUE(w.session_ended().WaitForNotificationWithTimeout(kWait));
}

// A session peer that sends malformed calls gets an error reply per call; the session and its
// other legs go on.
TEST(WorkerSessionTest, MalformedCallsAreAnsweredWithErrorsNamingThem) {
  TestWorker w;
  ASSERT_TRUE(w.ok());
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", w.port()), grpc::InsecureChannelCredentials());
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Session(&ctx);
  proto::SessionUp up;
  up.add_calls()->set_call_id(5);  // no body
  auto* held = up.add_calls();
  held->set_call_id(6);
  held->mutable_decode()->set_rid("hold-5");
  auto* twin = up.add_calls();  // the same id while 6 is live
  twin->set_call_id(6);
  twin->mutable_decode()->set_rid("ok:1");
  ASSERT_TRUE(stream->Write(up));
  std::map<uint64_t, proto::SessionReply> replies;
  proto::SessionDown down;
  while (replies.size() < 2 && stream->Read(&down)) {
    for (const auto& r : down.replies()) replies[r.call_id()] = r;
  }
  ASSERT_EQ(replies.count(5), 1u);
  EXPECT_EQ(replies[5].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(replies[5].error().message(), "session call 5 has no body");
  ASSERT_EQ(replies.count(6), 1u);
  EXPECT_EQ(replies[6].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(replies[6].error().message(), "session call 6 is already live in this session");
  // The first leg 6 is still live; cancelling it ends it with its abort event.
  proto::SessionUp cancel;
  cancel.add_calls()->set_call_id(6);
  cancel.mutable_calls(0)->set_cancel(true);
  ASSERT_TRUE(stream->Write(cancel));
  bool ended = false;
  while (!ended && stream->Read(&down)) {
    for (const auto& r : down.replies()) {
      ended = ended || (r.call_id() == 6 && r.event().finished());
    }
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(w.legs().decode_cancels(), 1);
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&down));  // the worker ends the session after the half-close
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace tandem::router
