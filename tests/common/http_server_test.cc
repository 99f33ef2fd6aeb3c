// The HTTP server: routing, limits, framing, keep-alive, head checks and start-up errors (the
// fixture: tests/common/http_server_fixture.h; streams and timeouts: http_server_stream_test.cc).
#include "common/http_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_server_fixture.h"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::ClientResponse;
using ::tandem::testing::HttpServerTest;
using ::tandem::testing::ParseJson;
using ::tandem::testing::TestClient;
using ::testing::HasSubstr;

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
  EXPECT_EQ(response->headers["allow"], "GET, HEAD");
  EXPECT_EQ(ParseJson(response->body)["error"]["code"], 405);
  // The connection stays usable after a 405.
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

// HEAD (load balancers' and curl -I's health checks) is a GET route's answer without its body.
// The next request on the same connection parses cleanly only if no body byte was sent.
TEST_F(HttpServerTest, HeadIsTheGetHeaderWithoutTheBody) {
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("GET", "/echo?a=1"));
  auto get = client.ReadResponse();
  ASSERT_TRUE(get);
  ASSERT_EQ(get->status, 200);
  const nlohmann::json get_body = ParseJson(get->body);
  ASSERT_EQ(get_body["method"], "GET");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client.SendRequest("HEAD", "/echo?a=1"));
    auto head = client.ReadHead();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    EXPECT_EQ(head->headers["content-type"], "application/json");
    // The handler saw HEAD (one byte longer than GET in its echo): the length is its body's.
    EXPECT_EQ(head->headers["content-length"], std::to_string(get->body.size() + 1));
    EXPECT_EQ(client.buffered(), "");
  }
  ASSERT_TRUE(client.SendRequest("GET", "/health"));
  auto health = client.ReadResponse();
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(ParseJson(health->body)["status"], "ok");
}

TEST_F(HttpServerTest, HeadRefusalsCarryNoBody) {
  AddRoute("POST", "/only-post",
           [](HttpRequest, HttpResponder r) { r.Send(HttpResponse::Text(200, "posted")); });
  StartServer();
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("HEAD", "/nope"));
  auto missing = client.ReadHead();
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->headers["content-length"], "0");
  // A route without GET does not answer HEAD, and its Allow does not offer it.
  ASSERT_TRUE(client.SendRequest("HEAD", "/only-post"));
  auto post_only = client.ReadHead();
  ASSERT_TRUE(post_only);
  EXPECT_EQ(post_only->status, 405);
  EXPECT_EQ(post_only->headers["allow"], "POST");
  EXPECT_EQ(client.buffered(), "");
  // A request after a HEAD is answered in full: HEAD does not stick to the connection.
  ASSERT_TRUE(client.SendRequest("POST", "/echo", "body"));
  auto post = client.ReadResponse();
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200);
  EXPECT_EQ(post->body, "body");
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

TEST_F(HttpServerTest, PatternSegmentsMatchOneSegment) {
  auto path_of = [](const char* tag) {
    return [tag](HttpRequest r, HttpResponder responder) {
      responder.Send(HttpResponse::Text(200, absl::StrCat(tag, " ", r.path)));
    };
  };
  AddRoute("GET", "/items/{id}", path_of("item"));
  AddRoute("DELETE", "/items/{id}", path_of("delete"));
  AddRoute("GET", "/items/{id}/parts", path_of("parts"));
  AddRoute("GET", "/items/special", path_of("special"));
  StartServer();
  auto body_of = [&](const std::string& path) {
    auto response = Get(path);
    return response ? absl::StrCat(response->status, " ", response->body) : std::string("none");
  };
  EXPECT_EQ(body_of("/items/abc_1"), "200 item /items/abc_1");
  EXPECT_EQ(body_of("/items/abc_1?x=1"), "200 item /items/abc_1");
  EXPECT_EQ(body_of("/items/abc_1/parts"), "200 parts /items/abc_1/parts");
  EXPECT_EQ(body_of("/items/special"), "200 special /items/special");  // its own route wins
  for (const char* missing : {"/items", "/items/", "/items//parts", "/items/a/b", "/items/a/",
                              "/itemsx/a", "/items/a/parts/more"}) {
    auto response = Get(missing);
    ASSERT_TRUE(response) << missing;
    EXPECT_EQ(response->status, 404) << missing;
  }
  TestClient client(server_->port());
  ASSERT_TRUE(client.SendRequest("POST", "/items/abc"));
  auto post = client.ReadResponse();
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->headers["allow"], "DELETE, GET, HEAD");
  ASSERT_TRUE(client.SendRequest("DELETE", "/items/abc"));
  auto deleted = client.ReadResponse();
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->body, "delete /items/abc");
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

// Chunked last, after a coding the server cannot undo: 501, as RFC 9112 6.1 and SGLang's server.
TEST_F(HttpServerTest, TransferCodingsBeforeChunkedAre501) {
  StartServer();
  for (const std::string coding : {"gzip, chunked", "deflate,chunked", "chunked, chunked, x"}) {
    SCOPED_TRACE(coding);
    TestClient client(server_->port());
    ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: " + coding +
                            "\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
    auto response = client.ReadResponse();
    ASSERT_TRUE(response);
    if (coding == "chunked, chunked, x") {
      EXPECT_EQ(response->status, 400);  // chunked not last: the length is unknown
    } else {
      EXPECT_EQ(response->status, 501);
      EXPECT_THAT(ParseJson(response->body)["error"]["message"].get<std::string>(),
                  HasSubstr("is not supported: only chunked"));
    }
    EXPECT_TRUE(client.ReadsEof());
  }
  TestClient plain(server_->port());
  ASSERT_TRUE(
      plain.Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
                 "Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  auto response = plain.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "hello");
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
      options, registry, [](auto done) { done(absl::OkStatus()); }, "--http-port: ");
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
