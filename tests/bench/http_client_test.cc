// HttpClient and SseDecoder (common/http_client.h) against the project's own HttpServer on
// loopback.
#include "common/http_client.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using Clock = HttpClient::Clock;

std::vector<std::string> DecodeInPieces(const std::string& stream, size_t piece) {
  std::vector<std::string> got;
  SseDecoder decoder([&](std::string_view data) {
    got.emplace_back(data);
    return true;
  });
  for (size_t i = 0; i < stream.size(); i += piece) {
    EXPECT_TRUE(decoder.Feed(std::string_view(stream).substr(i, piece)));
  }
  EXPECT_TRUE(decoder.Finish());
  return got;
}

TEST(SseDecoderTest, SplitChunksGiveTheSamePayloads) {
  const std::string stream =
      "data: {\"text\":\"a\"}\n\n"
      ": keep-alive comment\n"
      "event: message\r\n"
      "data:{\"text\":\"ab\"}\r\n\r\n"
      "id: 7\r"
      "data:  two spaces\r\r"
      "data: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"text\":\"a\"}", "{\"text\":\"ab\"}", " two spaces",
                                             "[DONE]"};
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    EXPECT_EQ(DecodeInPieces(stream, piece), expected) << "piece size " << piece;
  }
}

TEST(SseDecoderTest, CrLfSplitAcrossFeeds) {
  std::vector<std::string> got;
  SseDecoder decoder([&](std::string_view data) {
    got.emplace_back(data);
    return true;
  });
  decoder.Feed("data: x\r");
  decoder.Feed("\ndata: y\r");
  decoder.Feed("\n");
  EXPECT_EQ(got, (std::vector<std::string>{"x", "y"}));
}

TEST(SseDecoderTest, LastLineWithoutTerminatorCountsAtFinish) {
  std::vector<std::string> got;
  SseDecoder decoder([&](std::string_view data) {
    got.emplace_back(data);
    return true;
  });
  decoder.Feed("data: 1\ndata: 2");
  EXPECT_EQ(got, (std::vector<std::string>{"1"}));
  decoder.Finish();
  EXPECT_EQ(got, (std::vector<std::string>{"1", "2"}));
}

TEST(SseDecoderTest, CallbackCanStop) {
  int calls = 0;
  SseDecoder decoder([&](std::string_view) { return ++calls < 2; });
  EXPECT_FALSE(decoder.Feed("data: 1\ndata: 2\ndata: 3\n"));
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(decoder.Feed("data: 4\n"));
  EXPECT_EQ(calls, 2);
}

TEST(ParseHttpUrlTest, AcceptsAndRejects) {
  auto url = ParseHttpUrl("http://127.0.0.1:30000");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 30000);
  EXPECT_EQ(url->base_path, "");
  url = ParseHttpUrl("http://router.local/api/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->base_path, "/api");
  url = ParseHttpUrl("http://[::1]:8080");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 8080);
  for (const char* bad :
       {"https://h:1", "h:1", "http://:1", "http://h:0", "http://h:99999", "http://h:x",
        "http://h:", "http://u@h:1", "http://h:1/?q=1", "http://[::1"}) {
    auto parsed = ParseHttpUrl(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find(bad), std::string::npos);
    }
  }
}

class HttpClientTest : public ::testing::Test {
 protected:
  HttpClientTest() : server_(Options()) {}
  static HttpServerOptions Options() {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.threads = 2;
    return options;
  }
  void SetUp() override {
    server_.Handle("GET", "/hello",
                   [](HttpRequest, HttpResponder w) { w.Send(HttpResponse::Text(200, "hi")); });
    server_.Handle("POST", "/echo",
                   [](HttpRequest r, HttpResponder w) { w.Send(HttpResponse::Json(201, r.body)); });
    server_.Handle("POST", "/stream", [this](HttpRequest, HttpResponder w) {
      HttpStreamPtr stream = w.StartStream(200, "text/event-stream");
      producers_.emplace_back([stream] {
        for (int i = 0; i < 3; ++i) {
          stream->Write("data: {\"i\":" + std::to_string(i) + "}\n\n");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        stream->Write("data: [DONE]\n\n");
        stream->Finish();
      });
    });
    // Sends each event only after the client has seen the previous one (or 5 s passed), so a
    // client that holds events back until more bytes arrive makes `lockstep_ok_` false.
    server_.Handle("POST", "/lockstep", [this](HttpRequest, HttpResponder w) {
      HttpStreamPtr stream = w.StartStream(200, "text/event-stream");
      producers_.emplace_back([this, stream] {
        for (int i = 0; i < 3; ++i) {
          stream->Write("data: " + std::to_string(i) + "\n\n");
          absl::MutexLock lock(&mu_);
          auto seen = [this, i] { return seen_ > i; };
          if (!mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(5))) {
            lockstep_ok_ = false;
          }
        }
        stream->Finish();
      });
    });
    server_.Handle("POST", "/stream-error", [](HttpRequest, HttpResponder w) {
      w.Send(HttpResponse::Error(429, "queue full"));
    });
    server_.Handle("GET", "/never", [this](HttpRequest, HttpResponder w) {
      held_.push_back(std::move(w));  // answered only when the server stops
    });
    ASSERT_TRUE(server_.Start().ok());
  }
  void TearDown() override {
    server_.Stop();
    for (auto& t : producers_) t.join();
  }
  HttpClient Client() { return HttpClient("127.0.0.1", server_.port()); }
  static Clock::time_point Soon() { return Clock::now() + std::chrono::seconds(10); }

  HttpServer server_;
  std::vector<std::thread> producers_;
  std::vector<HttpResponder> held_;
  absl::Mutex mu_;
  int seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool lockstep_ok_ ABSL_GUARDED_BY(mu_) = true;
};

TEST_F(HttpClientTest, StreamEventsArriveBeforeTheStreamEnds) {
  std::vector<std::string> events;
  auto response = Client().PostStream("/lockstep", "{}", {}, Soon(), [&](std::string_view data) {
    events.emplace_back(data);
    absl::MutexLock lock(&mu_);
    ++seen_;
    return true;
  });
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(events, (std::vector<std::string>{"0", "1", "2"}));
  absl::MutexLock lock(&mu_);
  EXPECT_TRUE(lockstep_ok_) << "an event was held back until later bytes arrived";
}

TEST_F(HttpClientTest, GetAndPost) {
  auto response = Client().Get("/hello", Soon());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hi");
  response = Client().PostJson("/echo", "{\"a\":1}", Soon());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->body, "{\"a\":1}");
  response = Client().Get("/missing", Soon());
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 404);
}

TEST_F(HttpClientTest, BaseUrlPathPrefixesTargets) {
  auto client = HttpClient::FromUrl("http://127.0.0.1:" + std::to_string(server_.port()) + "/");
  ASSERT_TRUE(client.ok());
  auto response = client->Get("/hello", Soon());
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpClientTest, StreamHandsOverEventsInOrder) {
  std::vector<std::string> events;
  auto response = Client().PostStream("/stream", "{}", {}, Soon(), [&](std::string_view data) {
    events.emplace_back(data);
    return true;
  });
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(events, (std::vector<std::string>{"{\"i\":0}", "{\"i\":1}", "{\"i\":2}", "[DONE]"}));
}

TEST_F(HttpClientTest, StreamCanBeLeftEarly) {
  int seen = 0;
  auto response = Client().PostStream("/stream", "{}", {}, Soon(),
                                      [&](std::string_view) { return ++seen < 1; });
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(seen, 1);
}

TEST_F(HttpClientTest, ErrorStatusIsReturnedWithItsBody) {
  bool called = false;
  auto response = Client().PostStream("/stream-error", "{}", {}, Soon(), [&](std::string_view) {
    called = true;
    return true;
  });
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 429);
  EXPECT_NE(response->body.find("queue full"), std::string::npos);
  EXPECT_FALSE(called);
}

TEST_F(HttpClientTest, DeadlineIsAnError) {
  auto response = Client().Get("/never", Clock::now() + std::chrono::milliseconds(100));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(response.status().message().find("127.0.0.1"), std::string::npos);
}

TEST_F(HttpClientTest, BodyLimit) {
  HttpClientOptions options;
  options.max_body_bytes = 3;
  HttpClient client("127.0.0.1", server_.port(), options);
  auto response = client.PostJson("/echo", "{\"long\":true}", Soon());
  ASSERT_FALSE(response.ok()) << response->status << " " << response->body;
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(HttpClientNoServerTest, RefusedNamesTheAddress) {
  // Bind and close a listener to find a port nobody listens on.
  uint16_t port;
  {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    HttpServer server(options);
    ASSERT_TRUE(server.Start().ok());
    port = server.port();
  }
  auto response = HttpClient("127.0.0.1", port).Get("/", Clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(response.status().message().find("127.0.0.1:" + std::to_string(port)),
            std::string::npos);
  auto bad = HttpClient("127.0.0.1", port).Request("BREW", "/", "", {}, Clock::now());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
