// The HTTP server's streamed and asynchronous answers, disconnects, header hygiene, concurrency,
// timeouts and Stop() (the fixture: tests/common/http_server_fixture.h).
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_server_fixture.h"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::ClientResponse;
using ::tandem::testing::HttpServerTest;
using ::tandem::testing::ParseJson;
using ::tandem::testing::Signal;
using ::tandem::testing::TestClient;

TEST_F(HttpServerTest, StreamedResponseReadChunkByChunk) {
  std::promise<HttpStreamPtr> stream_promise;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    stream_promise.set_value(responder.StartStream(200, "text/event-stream"));
  });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("GET", "/stream"));
  auto head = client.ReadHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-type"], "text/event-stream");
  EXPECT_EQ(head->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(head->headers["cache-control"], "no-cache");

  HttpStreamPtr stream = stream_promise.get_future().get();
  // Written from this (non-I/O) thread, one chunk at a time: each arrives before the next write.
  for (int i = 0; i < 3; ++i) {
    const std::string event = "data: {\"token\":" + std::to_string(i) + "}\n\n";
    ASSERT_TRUE(stream->Write(event));
    auto chunk = client.ReadChunk();
    ASSERT_TRUE(chunk);
    EXPECT_EQ(*chunk, event);
  }
  EXPECT_TRUE(stream->Write(""));  // empty writes must not end the body
  ASSERT_TRUE(stream->Write("data: [DONE]\n\n"));
  stream->Finish();
  EXPECT_FALSE(stream->Write("too late"));
  auto last = client.ReadChunk();
  ASSERT_TRUE(last);
  EXPECT_EQ(*last, "data: [DONE]\n\n");
  auto end = client.ReadChunk();
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, "");
  EXPECT_FALSE(stream->closed());
  // Keep-alive continues after a finished stream.
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, StreamWriterNoticesClientDisconnect) {
  std::promise<HttpStreamPtr> stream_promise;
  Signal closed;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    HttpStreamPtr stream = responder.StartStream(200, "text/event-stream");
    stream->OnClose([&] { closed.Notify(); });
    stream_promise.set_value(stream);
  });
  StartServer();
  HttpStreamPtr stream;
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.SendRequest("GET", "/stream"));
    ASSERT_TRUE(client.ReadHead());
    stream = stream_promise.get_future().get();
    ASSERT_TRUE(stream->Write("data: 1\n\n"));
    ASSERT_TRUE(client.ReadChunk());
  }  // the client goes away without reading the rest
  ASSERT_TRUE(closed.WaitFor());
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->Write("data: 2\n\n"));
  // A callback registered after the close runs at once.
  bool ran = false;
  stream->OnClose([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST_F(HttpServerTest, PendingHandlerNoticesClientDisconnect) {
  std::promise<void> handler_called;
  std::unique_ptr<HttpResponder> kept;
  Signal gone;
  AddRoute("POST", "/slow", [&](HttpRequest, HttpResponder responder) {
    responder.OnClientGone([&] { gone.Notify(); });
    kept = std::make_unique<HttpResponder>(std::move(responder));
    handler_called.set_value();
  });
  StartServer();
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.SendRequest("POST", "/slow", "{}"));
    handler_called.get_future().wait();
  }
  ASSERT_TRUE(gone.WaitFor());
  EXPECT_TRUE(kept->client_gone());
  kept->Send(HttpResponse::Json(200, "{}"));  // harmless after the client left
  kept.reset();
}

TEST_F(HttpServerTest, SlowReaderIsCutOffAtBufferLimit) {
  HttpServerOptions options;
  options.max_stream_buffer_bytes = 64 << 10;
  std::promise<HttpStreamPtr> stream_promise;
  Signal closed;
  AddRoute("GET", "/firehose", [&](HttpRequest, HttpResponder responder) {
    HttpStreamPtr stream = responder.StartStream(200, "application/octet-stream");
    stream->OnClose([&] { closed.Notify(); });
    stream_promise.set_value(stream);
  });
  StartServer(options);
  TestClient client(server_->port());
  client.SetReceiveBuffer(4096);
  ASSERT_TRUE(client.SendRequest("GET", "/firehose"));
  HttpStreamPtr stream = stream_promise.get_future().get();
  const std::string piece(16 << 10, 'z');
  bool refused = false;
  // The client never reads: socket buffers fill, then the stream's own buffer, then Write
  // refuses. 64 MiB is far more than loopback socket buffers can absorb.
  for (int i = 0; i < 4096 && !refused; ++i) {
    refused = !stream->Write(piece);
    if (!refused && i % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(refused);
  ASSERT_TRUE(closed.WaitFor());
  EXPECT_TRUE(stream->closed());
}

TEST_F(HttpServerTest, AsyncAnswerFromAnotherThread) {
  std::vector<std::thread> workers;
  std::mutex workers_mu;
  AddRoute("GET", "/async", [&](HttpRequest request, HttpResponder responder) {
    std::lock_guard<std::mutex> lock(workers_mu);
    workers.emplace_back([responder = std::move(responder)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      responder.Send(HttpResponse::Text(202, "later"));
    });
  });
  StartServer();
  auto response = Get("/async");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 202);
  EXPECT_EQ(response->body, "later");
  // A HEAD answered later (written by the answering thread, "Direct answers"): the header only,
  // and the connection goes on.
  TestClient client(server_->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client.SendRequest("HEAD", "/async"));
    auto head = client.ReadHead();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 202);
    EXPECT_EQ(head->headers["content-length"], "5");
  }
  ASSERT_TRUE(client.SendRequest("GET", "/async"));
  response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "later");
  std::lock_guard<std::mutex> lock(workers_mu);
  for (auto& worker : workers) worker.join();
}

TEST_F(HttpServerTest, UnansweredOrThrowingHandlerGives500) {
  AddRoute("GET", "/drop", [](HttpRequest, HttpResponder) {});
  AddRoute("GET", "/throw",
           [](HttpRequest, HttpResponder) { throw std::runtime_error("handler bug"); });
  StartServer();
  auto dropped = Get("/drop");
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->status, 500);
  EXPECT_EQ(ParseJson(dropped->body)["error"]["code"], 500);
  auto thrown = Get("/throw");
  ASSERT_TRUE(thrown);
  EXPECT_EQ(thrown->status, 500);
}

TEST_F(HttpServerTest, HandlerHeadersCannotBreakFraming) {
  AddRoute("GET", "/headers", [](HttpRequest, HttpResponder responder) {
    HttpResponse response = HttpResponse::Text(200, "ok");
    response.headers = {{"X-Fine", "yes"},
                        {"X-Evil", "a\r\nSet-Cookie: injected=1"},
                        {"Content-Length", "999"},
                        {"Connection", "close"}};
    responder.Send(std::move(response));
  });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("GET", "/headers"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->headers["x-fine"], "yes");
  EXPECT_EQ(response->headers.count("x-evil"), 0u);
  EXPECT_EQ(response->headers.count("set-cookie"), 0u);
  EXPECT_EQ(response->headers["content-length"], "2");
  EXPECT_EQ(response->body, "ok");
  // Still keep-alive: the handler's Connection header was ignored.
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto next = client.ReadResponse();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

// Beast throws on a header field of 64 KiB or more. A handler echoing client input into a header
// (the router's x-request-id) must not take the server down or leave the client without an
// answer, whichever thread answers and whether the connection stays open or closes.
TEST_F(HttpServerTest, OversizedOrControlHeaderValuesAreDroppedNotThrown) {
  const std::string huge(70 << 10, 'r');
  std::vector<std::thread> workers;
  std::mutex workers_mu;
  const auto response_with_headers = [huge] {
    HttpResponse response = HttpResponse::Text(200, "ok");
    response.headers = {{"X-Request-Id", huge},
                        {"X-Nul", std::string("a\0b", 3)},
                        {std::string(300, 'n'), "v"},
                        {"X-Fine", "yes"}};
    return response;
  };
  AddRoute("GET", "/now",
           [&](HttpRequest, HttpResponder responder) { responder.Send(response_with_headers()); });
  AddRoute("GET", "/later", [&](HttpRequest, HttpResponder responder) {
    std::lock_guard<std::mutex> lock(workers_mu);
    workers.emplace_back([&, responder = std::move(responder)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      responder.Send(response_with_headers());
    });
  });
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    HttpStreamPtr stream = responder.StartStream(200, "text/event-stream",
                                                 {{"X-Request-Id", huge}, {"X-Fine", "yes"}});
    stream->Write("data: 1\n\n");
    stream->Finish();
  });
  StartServer();
  for (const char* target : {"/now", "/later", "/stream"}) {
    for (const bool close : {false, true}) {
      SCOPED_TRACE(std::string(target) + (close ? " Connection: close" : " keep-alive"));
      TestClient client(server_->port());
      ASSERT_TRUE(client.SendRequest("GET", target, "", close ? "Connection: close\r\n" : ""));
      std::optional<ClientResponse> response = client.ReadResponse();
      ASSERT_TRUE(response.has_value()) << "no answer";
      EXPECT_EQ(response->status, 200);
      EXPECT_EQ(response->headers["x-fine"], "yes");
      EXPECT_EQ(response->headers.count("x-request-id"), 0u);
      EXPECT_EQ(response->headers.count("x-nul"), 0u);
      if (close) {
        EXPECT_TRUE(client.ReadsEof());
      } else {
        ASSERT_TRUE(client.SendRequest("GET", "/health"));
        std::optional<ClientResponse> next = client.ReadResponse();
        ASSERT_TRUE(next.has_value());
        EXPECT_EQ(next->status, 200);
      }
    }
  }
  auto health = Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  std::lock_guard<std::mutex> lock(workers_mu);
  for (auto& worker : workers) worker.join();
}

TEST_F(HttpServerTest, ConcurrentClients) {
  StartServer();
  constexpr int kClients = 8;
  constexpr int kRequests = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      TestClient client(server_->port());
      for (int i = 0; i < kRequests; ++i) {
        const std::string body = std::to_string(c) + ":" + std::to_string(i);
        if (!client.SendRequest("POST", "/echo", body)) return;
        auto response = client.ReadResponse();
        if (response && response->status == 200 && response->body == body) ++ok;
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
}

TEST_F(HttpServerTest, IdleAndSlowClientsAreDisconnected) {
  HttpServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(200);
  options.read_timeout = std::chrono::milliseconds(300);
  StartServer(options);
  TestClient idle(server_->port());
  TestClient slow(server_->port());
  ASSERT_TRUE(slow.Send("GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: "));  // never finishes
  // Both reads end with EOF from the server well before the client's own 10 s timeout.
  EXPECT_TRUE(idle.ReadsEof());
  EXPECT_TRUE(slow.ReadsEof());
  auto response = Get("/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, StopClosesOpenStreams) {
  std::promise<HttpStreamPtr> stream_promise;
  Signal closed;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    HttpStreamPtr stream = responder.StartStream(200, "text/event-stream");
    stream->OnClose([&] { closed.Notify(); });
    stream_promise.set_value(stream);
  });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("GET", "/stream"));
  HttpStreamPtr stream = stream_promise.get_future().get();
  server_->Stop();
  EXPECT_TRUE(closed.WaitFor(std::chrono::seconds(0)));
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->Write("after stop"));
  server_.reset();
  EXPECT_FALSE(stream->Write("after destruction"));  // still safe
}

TEST_F(HttpServerTest, Http10StreamEndsWithClose) {
  std::promise<HttpStreamPtr> stream_promise;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    stream_promise.set_value(responder.StartStream(200, "text/plain"));
  });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /stream HTTP/1.0\r\n\r\n"));
  HttpStreamPtr stream = stream_promise.get_future().get();
  stream->Write("abc");
  stream->Write("def");
  stream->Finish();
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->headers.count("transfer-encoding"), 0u);
  EXPECT_EQ(response->body, "abcdef");
}

// A HEAD on a streamed GET route gets the stream's header and nothing of what is written; the
// connection then serves the next request.
TEST_F(HttpServerTest, HeadOfAStreamIsItsHeaderOnly) {
  std::promise<HttpStreamPtr> stream_promise;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    stream_promise.set_value(responder.StartStream(200, "text/event-stream"));
  });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("HEAD", "/stream"));
  auto head = client.ReadHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-type"], "text/event-stream");
  HttpStreamPtr stream = stream_promise.get_future().get();
  EXPECT_TRUE(stream->Write("data: dropped\n\n"));
  stream->Finish();
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto health = client.ReadResponse();
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(ParseJson(health->body)["status"], "ok");
}

}  // namespace
}  // namespace tandem
