// Cross-origin requests (HttpServerOptions::cors_allowed_origins, common/http_cors.h): what a
// browser needs to let a page call a route and read its answer, and what it must not get.
#include "common/http_cors.h"

#include <future>
#include <optional>
#include <string>

#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"
#include "tests/common/http_test_client.h"

namespace tandem {
namespace {

using ::tandem::testing::ClientResponse;
using ::tandem::testing::HttpServerTest;
using ::tandem::testing::ParseJson;
using ::tandem::testing::TestClient;
using ::testing::HasSubstr;

constexpr char kPage[] = "https://chat.example";

std::optional<ClientResponse> Exchange(TestClient& client, const std::string& method,
                                       const std::string& path, const std::string& headers,
                                       const std::string& body = "") {
  if (!client.SendRequest(method, path, body, headers)) return std::nullopt;
  return client.ReadResponse();
}

std::string OriginHeader(const std::string& origin) { return "Origin: " + origin + "\r\n"; }

std::string PreflightHeaders(const std::string& origin, const std::string& method) {
  return OriginHeader(origin) + "Access-Control-Request-Method: " + method +
         "\r\nAccess-Control-Request-Headers: authorization, content-type\r\n";
}

HttpServerOptions Cors(std::vector<std::string> origins) {
  HttpServerOptions options;
  options.cors_allowed_origins = std::move(origins);
  return options;
}

TEST_F(HttpServerTest, CorsIsOffUnlessOriginsAreGiven) {
  StartServer();
  TestClient client(server_->port());
  auto get = Exchange(client, "GET", "/echo", OriginHeader(kPage));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->headers.count("access-control-allow-origin"), 0u);
  auto preflight = Exchange(client, "OPTIONS", "/echo", PreflightHeaders(kPage, "POST"));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 405);
}

TEST_F(HttpServerTest, AnyOriginReadsEveryAnswerIncludingErrors) {
  StartServer(Cors({"*"}));
  TestClient client(server_->port());
  auto get = Exchange(client, "GET", "/echo", OriginHeader(kPage));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->headers["access-control-allow-origin"], "*");
  EXPECT_EQ(get->headers.count("vary"), 0u);
  EXPECT_EQ(get->headers.count("access-control-allow-credentials"), 0u);
  auto missing = Exchange(client, "GET", "/nope", OriginHeader(kPage));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->headers["access-control-allow-origin"], "*");
  // Without Origin (not a browser's cross-origin call), nothing is added.
  auto plain = Exchange(client, "GET", "/echo", "");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->headers.count("access-control-allow-origin"), 0u);
}

TEST_F(HttpServerTest, PreflightListsThePathsMethodsBeforeAnyKeyCheck) {
  AddRoute(
      "POST", "/keyed",
      [](HttpRequest, HttpResponder r) { r.Send(HttpResponse::Error(401, "key")); },
      [](const HttpRequest&) -> std::optional<HttpResponse> {
        return HttpResponse::Error(401, "no key");
      });
  StartServer(Cors({"*"}));
  TestClient client(server_->port());
  auto preflight = Exchange(client, "OPTIONS", "/echo", PreflightHeaders(kPage, "POST"));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 200);
  EXPECT_EQ(preflight->headers["access-control-allow-origin"], "*");
  EXPECT_EQ(preflight->headers["access-control-allow-methods"], "GET, POST, HEAD, OPTIONS");
  EXPECT_EQ(preflight->headers["access-control-allow-headers"], "authorization, content-type");
  EXPECT_EQ(preflight->headers["access-control-max-age"], "600");
  // The keyed route's preflight is answered (a browser sends no key on it); the request itself
  // is refused, and the page can read why.
  preflight = Exchange(client, "OPTIONS", "/keyed", PreflightHeaders(kPage, "POST"));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 200);
  TestClient poster(server_->port());
  auto refused = Exchange(poster, "POST", "/keyed", OriginHeader(kPage), "{}");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->headers["access-control-allow-origin"], "*");
  // A method the path does not serve: 400, and the browser stops there.
  auto wrong = Exchange(client, "OPTIONS", "/echo", PreflightHeaders(kPage, "DELETE"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400);
  EXPECT_THAT(ParseJson(wrong->body)["error"]["message"].get<std::string>(),
              HasSubstr("DELETE not allowed on /echo"));
  // An OPTIONS that is not a preflight is routed as any other method.
  auto options = Exchange(client, "OPTIONS", "/echo", OriginHeader(kPage));
  ASSERT_TRUE(options);
  EXPECT_EQ(options->status, 405);
}

TEST_F(HttpServerTest, ListedOriginsAreEchoedAndOthersGetNothing) {
  StartServer(Cors({"http://localhost:3000", kPage}));
  TestClient client(server_->port());
  auto listed = Exchange(client, "GET", "/echo", OriginHeader(kPage));
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->headers["access-control-allow-origin"], kPage);
  EXPECT_EQ(listed->headers["vary"], "Origin");
  auto other = Exchange(client, "GET", "/echo", OriginHeader("https://evil.example"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->headers.count("access-control-allow-origin"), 0u);
  auto preflight =
      Exchange(client, "OPTIONS", "/echo", PreflightHeaders("https://evil.example", "POST"));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 400);
  EXPECT_EQ(preflight->headers.count("access-control-allow-origin"), 0u);
  EXPECT_EQ(preflight->headers.count("access-control-allow-methods"), 0u);
}

TEST_F(HttpServerTest, SameOriginPathsTakeNoPartAndStreamsCarryTheHeader) {
  std::promise<HttpStreamPtr> stream_promise;
  AddRoute("GET", "/stream", [&](HttpRequest, HttpResponder responder) {
    stream_promise.set_value(responder.StartStream(200, "text/event-stream"));
  });
  AddRoute("POST", "/admin", [](HttpRequest, HttpResponder r) { r.Send({}); });
  same_origin_paths_.push_back("/admin");
  StartServer(Cors({"*"}));
  TestClient client(server_->port());
  auto admin = Exchange(client, "POST", "/admin", OriginHeader(kPage), "{}");
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->status, 200);
  EXPECT_EQ(admin->headers.count("access-control-allow-origin"), 0u);
  auto preflight = Exchange(client, "OPTIONS", "/admin", PreflightHeaders(kPage, "POST"));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 405);

  TestClient streamer(server_->port());
  ASSERT_TRUE(streamer.SendRequest("GET", "/stream", "", OriginHeader(kPage)));
  auto head = streamer.ReadHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->headers["access-control-allow-origin"], "*");
  HttpStreamPtr stream = stream_promise.get_future().get();
  stream->Finish();
  auto end = streamer.ReadChunk();
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, "");
}

TEST(CorsOriginsTest, OnlyStarOrSchemeHostPortPass) {
  for (const char* good :
       {"*", "https://chat.example", "http://localhost:3000", "http://[::1]:80"}) {
    EXPECT_TRUE(CheckCorsOrigins({good}).ok()) << good;
  }
  for (const char* bad : {"chat.example", "https://chat.example/", "https://", "ftp://x",
                          "https://a b", "https://a,https://b", "https://x\r\nSet-Cookie: a", ""}) {
    EXPECT_FALSE(CheckCorsOrigins({bad}).ok()) << bad;
  }
}

}  // namespace
}  // namespace tandem
