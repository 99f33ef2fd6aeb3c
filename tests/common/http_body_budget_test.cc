// BodyBudget (common/http_body_budget.h) on its own and inside HttpServer: request bodies held at
// once over all connections are bounded, a request that does not fit gets 503 before its body is
// read, and the budget comes back when the exchanges holding it are gone.
#include "common/http_body_budget.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/http_server.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"
#include "tests/common/http_test_client.h"

namespace tandem::testing {
namespace {

using http_internal::BodyBudget;

TEST(BodyBudgetTest, LeasesTakeAndReturnBytesWithinTheLimit) {
  BodyBudget budget(100);
  std::optional<BodyBudget::Lease> a = budget.TryReserve(60);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(budget.held(), 60u);
  EXPECT_FALSE(budget.TryReserve(41).has_value());
  EXPECT_EQ(budget.held(), 60u);  // a refusal takes nothing
  std::optional<BodyBudget::Lease> b = budget.TryReserve(40);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(budget.held(), 100u);
  EXPECT_TRUE(budget.TryReserve(0).has_value());

  EXPECT_FALSE(b->Grow(1));
  EXPECT_EQ(b->bytes(), 40u);
  a.reset();
  EXPECT_EQ(budget.held(), 40u);
  EXPECT_TRUE(b->Grow(50));
  EXPECT_EQ(b->bytes(), 90u);
  EXPECT_EQ(budget.held(), 90u);

  BodyBudget::Lease moved = *std::move(b);
  b.reset();
  EXPECT_EQ(budget.held(), 90u);  // the move carried the bytes
  moved = BodyBudget::Lease();
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_FALSE(BodyBudget::Lease().Grow(1));
}

TEST(BodyBudgetTest, ALeaseMayOutliveItsBudget) {
  std::optional<BodyBudget::Lease> lease;
  {
    BodyBudget budget(10);
    lease = budget.TryReserve(10);
    ASSERT_TRUE(lease.has_value());
  }
  EXPECT_TRUE(lease->Grow(0));
  lease.reset();  // returns its bytes to the shared count, not to freed memory (ASan would say)
}

TEST(BodyBudgetTest, RefusalIs503WithRetryAfter) {
  const HttpResponse refusal = BodyBudget(1 << 20).Refusal();
  EXPECT_EQ(refusal.status, 503);
  ASSERT_EQ(refusal.headers.size(), 1u);
  EXPECT_EQ(refusal.headers[0].first, "Retry-After");
  EXPECT_NE(refusal.body.find("1048576 bytes"), std::string::npos) << refusal.body;
}

TEST(BodyBudgetTest, ServerRefusesToStartWithABudgetBelowOneBody) {
  HttpServerOptions options;
  options.max_body_bytes = 2 << 20;
  options.max_body_bytes_held = 1 << 20;
  HttpServer server(options);
  const absl::Status status = server.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("at least the largest request body"), std::string::npos)
      << status;
}

// A server whose bodies may be 64 KiB, 128 KiB of them at once, and a /hold route that keeps
// each request's responder (and so its exchange and body) until the test lets go.
class ServerBodyBudgetTest : public HttpServerTest {
 protected:
  static constexpr size_t kBody = 64 << 10;

  void SetUp() override {
    AddRoute("POST", "/hold", [this](HttpRequest request, HttpResponder responder) {
      std::lock_guard<std::mutex> lock(mu_);
      held_.emplace_back(std::move(request), std::move(responder));
    });
    HttpServerOptions options;
    options.max_body_bytes = kBody;
    options.max_body_bytes_held = 2 * kBody;
    options.on_body_refused = [this] { ++refusals_; };
    StartServer(options);
  }

  size_t Held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  // Waits (bounded) until the handler holds `count` requests.
  bool WaitHeld(size_t count) {
    for (int i = 0; i < 1000 && Held() < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Held() == count;
  }
  // Answers and drops the oldest held request.
  void AnswerOldest() {
    std::lock_guard<std::mutex> lock(mu_);
    held_.front().second.Send(HttpResponse::Text(200, "done"));
    held_.erase(held_.begin());
  }
  void ExpectBusy(TestClient& client) {
    std::optional<ClientResponse> response = client.ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 503);
    EXPECT_EQ(response->headers["retry-after"], "1");
    EXPECT_EQ(response->headers["connection"], "close");
    EXPECT_NE(response->body.find("limit of request bodies"), std::string::npos) << response->body;
  }

  std::mutex mu_;
  std::vector<std::pair<HttpRequest, HttpResponder>> held_;
  std::atomic<int> refusals_{0};
};

TEST_F(ServerBodyBudgetTest, ABodyBeyondTheBudgetIsRefusedBeforeItIsRead) {
  TestClient a(server_->port()), b(server_->port());
  ASSERT_TRUE(a.SendRequest("POST", "/hold", std::string(kBody, 'a')));
  ASSERT_TRUE(WaitHeld(1));
  ASSERT_TRUE(b.SendRequest("POST", "/hold", std::string(kBody, 'b')));
  ASSERT_TRUE(WaitHeld(2));

  // The head alone is answered: the client never sends the body it announced.
  TestClient c(server_->port());
  ASSERT_TRUE(c.Send("POST /hold HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\n\r\n"));
  ExpectBusy(c);
  // A chunked body is refused at the chunk that does not fit.
  TestClient d(server_->port());
  ASSERT_TRUE(
      d.Send("POST /hold HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
             "10\r\n0123456789abcdef\r\n"));
  ExpectBusy(d);
  // Requests without a body take nothing from it.
  std::optional<ClientResponse> health = Get("/health");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Held(), 2u);
  EXPECT_EQ(server_->body_bytes_held(), 2 * kBody);
  EXPECT_EQ(refusals_.load(), 2);

  // Once an exchange is gone, its body's bytes are free again.
  AnswerOldest();
  std::optional<ClientResponse> answered = a.ReadResponse();
  ASSERT_TRUE(answered.has_value());
  EXPECT_EQ(answered->status, 200);
  TestClient e(server_->port());
  ASSERT_TRUE(e.SendRequest("POST", "/hold", std::string(kBody, 'e')));
  ASSERT_TRUE(WaitHeld(2));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(held_.back().first.body, std::string(kBody, 'e'));
}

TEST_F(ServerBodyBudgetTest, ChunkedBodiesReserveWhatArrivesAndClientsThatLeaveReturnIt) {
  TestClient a(server_->port());
  ASSERT_TRUE(a.SendRequest("POST", "/hold", std::string(kBody, 'a')));
  ASSERT_TRUE(WaitHeld(1));
  {
    // Half the budget is left: a chunked body of 48 KiB fits, in three chunks.
    TestClient chunked(server_->port());
    std::string request = "POST /hold HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 3; ++i) request += "4000\r\n" + std::string(16 << 10, 'c') + "\r\n";
    ASSERT_TRUE(chunked.Send(request + "0\r\n\r\n"));
    ASSERT_TRUE(WaitHeld(2));
    // 16 KiB are left: a client that announces 32 KiB is refused.
    TestClient over(server_->port());
    ASSERT_TRUE(over.Send("POST /hold HTTP/1.1\r\nHost: test\r\nContent-Length: 32768\r\n\r\n"));
    ExpectBusy(over);
    // A client that announces 16 KiB, sends part of it and leaves gives its share back.
    TestClient leaver(server_->port());
    ASSERT_TRUE(
        leaver.Send("POST /hold HTTP/1.1\r\nHost: test\r\nContent-Length: 16384\r\n\r\nab"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The leaver's share returns once the server sees it gone: a request of 16 KiB is refused
  // (503 at once) until then, and held by the handler (no answer) after.
  bool admitted = false;
  for (int attempt = 0; attempt < 100 && !admitted; ++attempt) {
    TestClient next(server_->port(), /*timeout_seconds=*/1);
    ASSERT_TRUE(next.SendRequest("POST", "/hold", std::string(16 << 10, 'n')));
    std::optional<ClientResponse> response = next.ReadResponse();
    if (response.has_value()) {
      EXPECT_EQ(response->status, 503);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    admitted = WaitHeld(3);
  }
  EXPECT_TRUE(admitted);
}

}  // namespace
}  // namespace tandem::testing
