#include "common/http_server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/daemon.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::ClientResponse;
using ::tandem::testing::TestClient;
using ::testing::HasSubstr;

// A one-shot flag a test thread can wait on (bounded, so a bug fails instead of hanging).
class Signal {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  bool WaitFor(std::chrono::seconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.threads == 1) options.threads = 2;
    server_ = std::make_unique<HttpServer>(options);
    AddStandardRoutes(*server_, registry_, [this] {
      std::lock_guard<std::mutex> lock(health_mu_);
      return health_;
    });
    server_->Handle("GET", "/echo", [](HttpRequest request, HttpResponder responder) {
      nlohmann::json query = nlohmann::json::array();
      for (const auto& [name, value] : request.query) query.push_back({name, value});
      nlohmann::json body = {{"method", request.method},
                             {"path", request.path},
                             {"query", query},
                             {"peer", request.peer},
                             {"host", request.Header("HOST").value_or("")}};
      responder.Send(HttpResponse::Json(200, body.dump()));
    });
    server_->Handle("POST", "/echo", [](HttpRequest request, HttpResponder responder) {
      responder.Send(HttpResponse::Text(200, request.body));
    });
    for (auto& route : extra_routes_) {
      server_->Handle(route.method, route.path, route.handler, route.head_check);
    }
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
  }

  void AddRoute(std::string method, std::string path, HttpHandler handler,
                HttpHeadCheck head_check = nullptr) {
    extra_routes_.push_back(
        {std::move(method), std::move(path), std::move(handler), std::move(head_check)});
  }

  std::optional<ClientResponse> Get(const std::string& target) {
    TestClient client(server_->port());
    if (!client.SendRequest("GET", target)) return std::nullopt;
    return client.ReadResponse();
  }

  struct Route {
    std::string method, path;
    HttpHandler handler;
    HttpHeadCheck head_check;
  };
  MetricsRegistry registry_;
  std::mutex health_mu_;
  absl::Status health_ = absl::OkStatus();
  std::vector<Route> extra_routes_;
  std::unique_ptr<HttpServer> server_;
};

nlohmann::json ParseJson(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

TEST_F(HttpServerTest, HealthOk) {
  StartServer();
  auto response = Get("/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  EXPECT_EQ(ParseJson(response->body)["status"], "ok");
}

TEST_F(HttpServerTest, HealthUnhealthyIs503WithReason) {
  health_ = absl::UnavailableError("model still loading");
  StartServer();
  auto response = Get("/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  nlohmann::json body = ParseJson(response->body);
  EXPECT_EQ(body["status"], "unhealthy");
  EXPECT_EQ(body["error"]["message"], "model still loading");
  EXPECT_EQ(body["error"]["code"], 503);
}

TEST_F(HttpServerTest, MetricsServesPrometheusText) {
  registry_.AddCounter("tandem_test_total", "Test counter").Get().Increment(7);
  StartServer();
  auto response = Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->headers["content-type"], HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(response->body, HasSubstr("# TYPE tandem_test_total counter\ntandem_test_total 7\n"));
}

TEST_F(HttpServerTest, UnknownPathIs404JsonError) {
  StartServer();
  auto response = Get("/nope");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
  nlohmann::json body = ParseJson(response->body);
  EXPECT_EQ(body["error"]["code"], 404);
  EXPECT_EQ(body["error"]["type"], "not_found_error");
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("/nope"));
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("DELETE", "/health"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 405);
  EXPECT_EQ(response->headers["allow"], "GET");
  EXPECT_EQ(ParseJson(response->body)["error"]["code"], 405);
  // The connection stays usable after a 405.
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, QueryParametersAreDecoded) {
  StartServer();
  auto response = Get("/echo?a=1&b=x%20y+z&flag&a=2");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200);
  nlohmann::json body = ParseJson(response->body);
  EXPECT_EQ(body["path"], "/echo");
  EXPECT_EQ(body["query"],
            nlohmann::json::parse(R"([["a","1"],["b","x y z"],["flag",""],["a","2"]])"));
  EXPECT_EQ(body["host"], "test");
  EXPECT_THAT(body["peer"].get<std::string>(), HasSubstr("127.0.0.1:"));
}

TEST_F(HttpServerTest, BadQueryEscapeIs400) {
  StartServer();
  auto response = Get("/echo?a=%zz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 400);
}

TEST_F(HttpServerTest, PostBodyReachesHandler) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("POST", "/echo", "hello body"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello body");
}

TEST_F(HttpServerTest, BodyOverLimitIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" +
                          std::string(2000, 'x')));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(ParseJson(response->body)["error"]["code"], 413);
  EXPECT_EQ(response->headers["connection"], "close");
}

TEST_F(HttpServerTest, ChunkedBodyOverLimitIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  TestClient client(server_->port());
  std::string request = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) request += "200\r\n" + std::string(512, 'y') + "\r\n";
  ASSERT_TRUE(client.Send(request));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
}

TEST_F(HttpServerTest, HeadersOverLimitIs431) {
  HttpServerOptions options;
  options.max_header_bytes = 2048;
  StartServer(options);
  TestClient client(server_->port());
  ASSERT_TRUE(
      client.SendRequest("GET", "/health", "", "X-Big: " + std::string(4096, 'h') + "\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 431);
}

// Beast checks its header limit only while a header is incomplete: a header over the limit that
// arrives whole (one write of many small fields) must be refused as well.
TEST_F(HttpServerTest, HeadersOverLimitInOneWriteAre431) {
  HttpServerOptions options;
  options.max_header_bytes = 2048;
  StartServer(options);
  std::string fields;
  for (int i = 0; i < 400; ++i) fields += "X-H" + std::to_string(i) + ": v\r\n";
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /health HTTP/1.1\r\nHost: t\r\n" + fields + "\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 431);
}

// A transfer coding other than chunked leaves the body's length unknown; the bytes after the
// header must not be taken for the next request.
TEST_F(HttpServerTest, TransferEncodingOtherThanChunkedIs400) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n"
                  "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 400);
  EXPECT_THAT(ParseJson(response->body)["error"]["message"].get<std::string>(),
              HasSubstr("Transfer-Encoding"));
  EXPECT_TRUE(client.ReadsEof());
}

TEST_F(HttpServerTest, MalformedRequestIs400AndServerKeepsServing) {
  StartServer();
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send("THIS IS NOT HTTP\r\n\r\n"));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 400);
    EXPECT_THAT(ParseJson(response->body)["error"]["message"].get<std::string>(),
                HasSubstr("malformed"));
    EXPECT_TRUE(client.ReadsEof());  // the connection is closed after a 400
  }
  {
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send("GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n"));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 400);
  }
  auto response = Get("/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer();
  TestClient client(server_->port());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client.SendRequest("POST", "/echo", "request " + std::to_string(i)));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << i;
    EXPECT_EQ(response->body, "request " + std::to_string(i));
  }
}

TEST_F(HttpServerTest, PipelinedRequestsAnsweredInOrder) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\none"
                  "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\ntwo"
                  "GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  auto first = client.ReadResponse();
  auto second = client.ReadResponse();
  auto third = client.ReadResponse();
  ASSERT_TRUE(first && second && third);
  EXPECT_EQ(first->body, "one");
  EXPECT_EQ(second->body, "two");
  EXPECT_EQ(third->status, 200);
  EXPECT_TRUE(client.ReadsEof());  // Connection: close honoured
}

TEST_F(HttpServerTest, ExpectContinue) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = client.ReadHead();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(client.Send("hello"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "hello");
}

// A request announcing a body is judged on its head first. Refused (its route's head check, an
// unknown path, a method not allowed, a bad target), it is answered before any body byte
// arrives, without a 100 Continue, and the connection closes; the handler never runs. Each
// client here announces a megabyte and sends none of it: a server that waited for the body
// would answer only at its read timeout, after the client gave up.
TEST_F(HttpServerTest, HeadCheckRefusesBeforeTheBodyIsRead) {
  std::atomic<int> handled{0};
  AddRoute(
      "POST", "/guarded",
      [&](HttpRequest request, HttpResponder responder) {
        ++handled;
        responder.Send(HttpResponse::Text(200, request.body));
      },
      [](const HttpRequest& head) -> std::optional<HttpResponse> {
        if (head.Header("authorization") == "Bearer k") return std::nullopt;
        return HttpResponse::Error(401, "no key for " + head.path);
      });
  HttpServerOptions options;
  options.read_timeout = std::chrono::seconds(60);
  StartServer(options);
  const std::string announce = "Host: t\r\nContent-Length: 1000000\r\n\r\n";
  const std::vector<std::pair<std::string, int>> refused = {
      {"POST /guarded HTTP/1.1\r\n" + announce, 401},
      {"POST /guarded HTTP/1.1\r\nExpect: 100-continue\r\n" + announce, 401},
      {"POST /guarded HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: t\r\n\r\n", 401},
      {"POST /nowhere HTTP/1.1\r\n" + announce, 404},
      {"PUT /echo HTTP/1.1\r\n" + announce, 405},
      {"POST /guarded?a=%zz HTTP/1.1\r\nAuthorization: Bearer k\r\n" + announce, 400},
  };
  for (const auto& [head, status] : refused) {
    SCOPED_TRACE(head);
    TestClient client(server_->port(), 20);
    ASSERT_TRUE(client.Send(head));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << "not answered before the body";
    EXPECT_EQ(response->status, status);
    EXPECT_EQ(response->headers["connection"], "close");
    EXPECT_TRUE(client.ReadsEof());
  }
  EXPECT_EQ(handled, 0);
  auto health = Get("/health");  // the server goes on serving
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // With the key the body is read and the handler runs; without a body the head check is not
  // asked (the handler judges such requests itself).
  TestClient client(server_->port());
  ASSERT_TRUE(client.Send(
      "POST /guarded HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\nContent-Length: 4\r\n\r\n"
      "body"));
  auto served = client.ReadResponse();
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  EXPECT_EQ(served->body, "body");
  ASSERT_TRUE(client.Send("POST /guarded HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
  auto empty = client.ReadResponse();
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 200);
  EXPECT_EQ(handled, 2);
}

// A status endpoint (StartStatusEndpoint) reads no request body at all: its routes take none,
// and its port has no key.
TEST(StatusEndpointTest, ReadsNoBody) {
  MetricsRegistry registry;
  HttpServerOptions options;
  options.read_timeout = std::chrono::seconds(60);
  absl::StatusOr<std::unique_ptr<HttpServer>> server = StartStatusEndpoint(
      options, registry, [] { return absl::OkStatus(); }, "--http-port: ");
  ASSERT_TRUE(server.ok()) << server.status();
  {
    TestClient client((*server)->port(), 20);
    ASSERT_TRUE(client.Send("GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n"));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << "not answered before the body";
    EXPECT_EQ(response->status, 413);
  }
  TestClient client((*server)->port());
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto health = client.ReadResponse();
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

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

TEST(HttpServerStartTest, AddressInUseIsAClearError) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  HttpServer first(options);
  ASSERT_TRUE(first.Start().ok());
  options.port = first.port();
  HttpServer second(options);
  absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("127.0.0.1:" + std::to_string(first.port())));
  EXPECT_THAT(std::string(status.message()), HasSubstr("in use"));
  EXPECT_FALSE(first.Start().ok());  // twice
}

TEST(HttpServerStartTest, AddressNotOnThisMachineIsAClearError) {
  HttpServerOptions options;
  options.host = "192.0.2.1";  // TEST-NET-1: valid, never local
  HttpServer server(options);
  absl::Status status = server.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot listen on 192.0.2.1:0"));
}

}  // namespace
}  // namespace tandem
