// HttpServer answers sent later from another thread (the router's every answer): on a plain
// keep-alive connection such an answer is written by the handler's thread itself, and the
// connection goes on from the client's next request (http_session.h, "Direct answers"). These
// tests hold that path to the same contract as the rest: order, whole bodies however large,
// pipelining, the idle timeout, no close callback once answered, HTTP/1.0.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/http_server.h"
#include "gtest/gtest.h"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::TestClient;

// One thread that runs queued answers in order, after `delay` each.
class Answerer {
 public:
  explicit Answerer(std::chrono::milliseconds delay) : delay_(delay), thread_([this] { Run(); }) {}
  ~Answerer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Answerer(const Answerer&) = delete;
  Answerer& operator=(const Answerer&) = delete;

  void Later(std::function<void()> answer) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(answer));
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> answer;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        answer = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(delay_);
      answer();
    }
  }

  const std::chrono::milliseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

class HttpDeferredAnswerTest : public ::testing::Test {
 protected:
  // POST /later answers the request's body (or `body_size` bytes of 'x' when non-zero) from the
  // answerer's thread; the handler itself returns at once.
  void StartServer(HttpServerOptions options = {}, size_t body_size = 0,
                   std::chrono::milliseconds delay = std::chrono::milliseconds(2)) {
    answerer_ = std::make_unique<Answerer>(delay);
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    server_ = std::make_unique<HttpServer>(options);
    server_->Handle("POST", "/later",
                    [this, body_size](HttpRequest request, HttpResponder responder) {
                      responder.OnClientGone([this] { ++close_callbacks_; });
                      auto kept = std::make_shared<HttpResponder>(std::move(responder));
                      std::string body = body_size > 0 ? std::string(body_size, 'x') : request.body;
                      answerer_->Later([kept, body = std::move(body)]() mutable {
                        kept->Send(HttpResponse::Text(200, std::move(body)));
                      });
                    });
    ASSERT_TRUE(server_->Start().ok());
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    answerer_.reset();
  }

  std::unique_ptr<Answerer> answerer_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> close_callbacks_{0};
};

std::string Post(const std::string& body, const std::string& extra_headers = "") {
  return "POST /later HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

TEST_F(HttpDeferredAnswerTest, ManyAnswersOnOneConnectionComeInOrder) {
  StartServer({}, 0, std::chrono::milliseconds(0));
  TestClient client(server_->port());
  for (int i = 0; i < 200; ++i) {
    const std::string body = "request " + std::to_string(i);
    ASSERT_TRUE(client.Send(Post(body))) << i;
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, body);
  }
  EXPECT_EQ(close_callbacks_.load(), 0);
}

TEST_F(HttpDeferredAnswerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(Post("one") + Post("two") + Post("three", "Connection: close\r\n")));
  for (const char* want : {"one", "two", "three"}) {
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << want;
    EXPECT_EQ(response->body, want);
  }
  EXPECT_TRUE(client.ReadsEof());  // Connection: close honoured
}

// An answer larger than the socket takes at once (the client does not read for a while): the
// rest is written by the connection, whole, and the connection goes on.
TEST_F(HttpDeferredAnswerTest, AnswerLargerThanTheSocketBufferArrivesWhole) {
  constexpr size_t kBody = 24 << 20;
  StartServer({}, kBody);
  TestClient client(server_->port());
  client.SetReceiveBuffer(64 << 10);
  ASSERT_TRUE(client.Send(Post("big")));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the answer is written by now
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body.size(), kBody);
  EXPECT_EQ(response->body.find_first_not_of('x'), std::string::npos);
  ASSERT_TRUE(client.Send(Post("again")));
  auto again = client.ReadResponse();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body.size(), kBody);
}

TEST_F(HttpDeferredAnswerTest, IdleConnectionAfterAnAnswerIsClosed) {
  HttpServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(200);
  StartServer(options);
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(Post("ping")));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "ping");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.ReadsEof());
  // Closed by the server after the idle timeout (up to a quarter more: the sweep's period), not
  // by the client's own 10 s read timeout.
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

// A connection in use is not idle: requests spaced under the idle timeout keep it open.
TEST_F(HttpDeferredAnswerTest, ConnectionInUseIsNotClosedAsIdle) {
  HttpServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(400);
  StartServer(options);
  TestClient client(server_->port());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(client.Send(Post(std::to_string(i)))) << i;
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->body, std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
}

TEST_F(HttpDeferredAnswerTest, ClientLeavingAfterItsAnswerRunsNoCloseCallback) {
  StartServer();
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send(Post("bye")));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(close_callbacks_.load(), 0);
  TestClient next(server_->port());  // and the server goes on serving
  ASSERT_TRUE(next.Send(Post("next")));
  auto response = next.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "next");
}

TEST_F(HttpDeferredAnswerTest, ClientLeavingBeforeItsAnswerRunsTheCloseCallback) {
  StartServer({}, 0, std::chrono::milliseconds(300));
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send(Post("gone")));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int i = 0; i < 100 && close_callbacks_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(close_callbacks_.load(), 1);
}

TEST_F(HttpDeferredAnswerTest, Http10AnswerEndsWithClose) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("POST /later HTTP/1.0\r\nContent-Length: 4\r\n\r\nold!"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "old!");
  EXPECT_TRUE(client.ReadsEof());
}

// Stop() with connections idle after direct answers, and with answers still on their way.
TEST_F(HttpDeferredAnswerTest, StopWithAnsweredAndPendingConnections) {
  StartServer({}, 0, std::chrono::milliseconds(100));
  TestClient answered(server_->port());
  ASSERT_TRUE(answered.Send(Post("done")));
  ASSERT_TRUE(answered.ReadResponse());
  TestClient pending(server_->port());
  ASSERT_TRUE(pending.Send(Post("later")));
  server_->Stop();
  EXPECT_TRUE(answered.ReadsEof());
  answerer_.reset();  // runs the pending answer against the stopped server: ignored
}

}  // namespace
}  // namespace tandem
