// The HTTP server at its connection cap (HttpServerOptions::max_connections): a new connection
// takes the place of the one that has waited longest for a request, silent or half-sent; only
// when every connection has a request in progress is the newcomer closed.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::HttpServerTest;
using ::tandem::testing::TestClient;

// True when the server closes `client` within `timeout` (EOF or reset), false when the
// connection is still open then. Reads nothing a response could have left: call it only on a
// connection with no answer due.
bool ClosedWithin(TestClient& client, std::chrono::milliseconds timeout) {
  pollfd fd{client.fd(), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char byte;
  return ::recv(client.fd(), &byte, 1, MSG_DONTWAIT) <= 0;
}

void ExpectServed(TestClient& client) {
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

class HttpConnectionCapTest : public HttpServerTest {
 protected:
  void StartCapped(int max_connections) {
    HttpServerOptions options;
    options.max_connections = max_connections;
    options.on_connection_evicted = [this] { ++evicted_; };
    options.on_connection_refused = [this] { ++refused_; };
    StartServer(options);
  }
  // A route whose requests stay with the handler until Release().
  void AddHoldRoute() {
    AddRoute("GET", "/hold", [this](HttpRequest, HttpResponder responder) {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(std::make_unique<HttpResponder>(std::move(responder)));
    });
  }
  size_t Held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  bool WaitHeld(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Held() < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& responder : held_) responder->Send(HttpResponse::Text(200, "released"));
    held_.clear();
  }

  std::atomic<int> evicted_{0};
  std::atomic<int> refused_{0};
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpResponder>> held_;
};

TEST_F(HttpConnectionCapTest, TheConnectionWaitingLongestMakesRoom) {
  StartCapped(3);
  // Accepted in the order they connect: each waits from its accept, the third from its answer.
  TestClient oldest(server_->port());  // silent
  TestClient half_sent(server_->port());
  ASSERT_TRUE(half_sent.Send("GET /health HTTP/1.1\r\nHost: t\r\n"));  // never finished
  TestClient idle(server_->port());
  ExpectServed(idle);

  TestClient newcomer(server_->port());
  ExpectServed(newcomer);
  EXPECT_TRUE(ClosedWithin(oldest, std::chrono::seconds(5)));
  EXPECT_EQ(evicted_.load(), 1);

  // The next newcomer evicts the half-sent one, which has waited longer than the idle one.
  TestClient second(server_->port());
  ExpectServed(second);
  EXPECT_TRUE(ClosedWithin(half_sent, std::chrono::seconds(5)));
  EXPECT_FALSE(ClosedWithin(idle, std::chrono::milliseconds(200)));
  EXPECT_EQ(evicted_.load(), 2);
  EXPECT_EQ(refused_.load(), 0);
}

TEST_F(HttpConnectionCapTest, AFloodOfSilentConnectionsDoesNotShutClientsOut) {
  StartCapped(8);
  std::vector<std::unique_ptr<TestClient>> silent;
  for (int i = 0; i < 64; ++i) {
    silent.push_back(std::make_unique<TestClient>(server_->port()));
    ASSERT_TRUE(silent.back()->connected());
  }
  TestClient client(server_->port());
  ExpectServed(client);
  ExpectServed(client);  // and kept: it is the newest
  int closed = 0;
  for (auto& s : silent) closed += ClosedWithin(*s, std::chrono::milliseconds(100)) ? 1 : 0;
  EXPECT_GE(closed, 57);  // at most 7 of them share the 8 places with the client
  EXPECT_EQ(refused_.load(), 0);
}

TEST_F(HttpConnectionCapTest, ConnectionsWithRequestsInProgressAreNotEvicted) {
  AddHoldRoute();
  StartCapped(2);
  TestClient first(server_->port());
  TestClient second(server_->port());
  ASSERT_TRUE(first.SendRequest("GET", "/hold"));
  ASSERT_TRUE(second.SendRequest("GET", "/hold"));
  ASSERT_TRUE(WaitHeld(2));

  TestClient refused(server_->port());
  EXPECT_TRUE(ClosedWithin(refused, std::chrono::seconds(5)));
  EXPECT_EQ(refused_.load(), 1);
  EXPECT_EQ(evicted_.load(), 0);

  Release();
  for (TestClient* client : {&first, &second}) {
    auto response = client->ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->body, "released");
  }
  // Both now wait for their next request: a newcomer takes the older one's place.
  TestClient newcomer(server_->port());
  ExpectServed(newcomer);
  EXPECT_EQ(evicted_.load(), 1);
}

}  // namespace
}  // namespace tandem
