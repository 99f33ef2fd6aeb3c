#include "router/request_headers.h"

#include "gtest/gtest.h"
#include "router/admin_request.h"

namespace tandem::router {
namespace {

HttpRequest WithHeaders(HttpHeaders headers) {
  HttpRequest r;
  r.headers = std::move(headers);
  return r;
}

TEST(RequestHeadersTest, BearerKey) {
  EXPECT_TRUE(CheckBearer(WithHeaders({}), "", "API key").ok());
  absl::Status missing = CheckBearer(WithHeaders({}), "k1", "API key");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(missing.message().find("missing API key"), std::string::npos);
  EXPECT_TRUE(CheckBearer(WithHeaders({{"authorization", "Bearer k1"}}), "k1", "API key").ok());
  EXPECT_TRUE(CheckBearer(WithHeaders({{"Authorization", "bearer  k1 "}}), "k1", "API key").ok());
  absl::Status wrong =
      CheckBearer(WithHeaders({{"Authorization", "Bearer k2"}}), "k1", "admin key");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(wrong.message().find("incorrect admin key"), std::string::npos);
  EXPECT_FALSE(CheckBearer(WithHeaders({{"Authorization", "Bearer k"}}), "k1", "API key").ok());
  EXPECT_FALSE(CheckBearer(WithHeaders({{"Authorization", "Basic k1"}}), "k1", "API key").ok());
  EXPECT_FALSE(CheckBearer(WithHeaders({{"Authorization", "Bearer"}}), "k1", "API key").ok());
}

TEST(RequestHeadersTest, RequestIdFromTheFirstListedHeader) {
  const auto& names = DefaultRequestIdHeaders();
  const auto id = [&](HttpHeaders headers, const std::vector<std::string>& from) {
    absl::StatusOr<std::optional<std::string>> got = ClientRequestId(WithHeaders(headers), from);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::nullopt;
  };
  EXPECT_FALSE(id({}, names).has_value());
  EXPECT_EQ(id({{"X-Correlation-ID", "c-1"}, {"X-Request-Id", " r-1 "}}, names), "r-1");
  EXPECT_EQ(id({{"x-correlation-id", "c-1"}}, names), "c-1");
  EXPECT_EQ(id({{"my-id", "m"}}, {"my-id"}), "m");
  EXPECT_EQ(id({{"x-request-id", std::string(256, 'a')}}, names), std::string(256, 'a'));
}

// An id is echoed in x-request-id and logs: a bad one is the client's 400, naming the header.
TEST(RequestHeadersTest, BadRequestIdIsRefusedNamingTheHeaderAndLimit) {
  const auto& names = DefaultRequestIdHeaders();
  const auto error = [&](HttpHeaders headers) {
    absl::StatusOr<std::optional<std::string>> got = ClientRequestId(WithHeaders(headers), names);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(got.status().message());
  };
  EXPECT_EQ(error({{"x-request-id", std::string(257, 'a')}}),
            "the x-request-id header must be at most 256 bytes of printable ASCII, got 257 bytes");
  EXPECT_NE(error({{"x-trace-id", "a\x01b"}}).find("the x-trace-id header must be at most 256"),
            std::string::npos);
  EXPECT_NE(error({{"x-correlation-id", "caf\xc3\xa9"}}).find("printable ASCII"),
            std::string::npos);
}

TEST(AdminRequestTest, BodyForms) {
  auto spec = ParseAdminWorkerBody(
      R"({"url":"http://127.0.0.1:9000","worker_type":"prefill","bootstrap_port":8998})",
      "regular");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->url, "http://127.0.0.1:9000");
  EXPECT_EQ(spec->worker_type, "prefill");
  EXPECT_EQ(spec->bootstrap_port, 8998);
  spec = ParseAdminWorkerBody(R"({"url":"h:1","bootstrap_port":null})", "regular");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->worker_type, "regular");
  EXPECT_FALSE(spec->bootstrap_port.has_value());
}

TEST(AdminRequestTest, BodyErrorsNameTheField) {
  auto expect_error = [](const std::string& body, const std::string& needle) {
    auto spec = ParseAdminWorkerBody(body, "regular");
    ASSERT_FALSE(spec.ok()) << body;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(needle), std::string::npos)
        << body << " -> " << spec.status();
  };
  expect_error("{", "not valid JSON");
  expect_error("[1]", "JSON object");
  expect_error("{}", "url is required");
  expect_error(R"({"url":5})", "url must be a string");
  expect_error(R"({"url":""})", "url must be a non-empty");
  expect_error(R"({"url":"h:1","worker_type":"gpu"})", "worker_type must be");
  expect_error(R"({"url":")" + std::string(60000, 'h') + R"("})", "url must be at most 1024");
  expect_error(R"({"url":"h:1\nx"})", "url must be");
  {
    // An echoed worker_type is cut to a short excerpt.
    auto spec = ParseAdminWorkerBody(
        R"({"url":"h:1","worker_type":")" + std::string(60000, 'g') + R"("})", "regular");
    ASSERT_FALSE(spec.ok());
    EXPECT_LT(spec.status().message().size(), 200u) << spec.status().message().substr(0, 200);
  }
  expect_error(R"({"url":"h:1","worker_type":3})", "worker_type must be a string");
  expect_error(R"({"url":"h:1","bootstrap_port":"x"})", "bootstrap_port must be an integer");
  expect_error(R"({"url":"h:1","bootstrap_port":70000})", "bootstrap_port must be in");
  expect_error(R"({"url":"h:1","bootstrap_port":1.5})", "bootstrap_port must be an integer");
  expect_error(R"({"url":"h:1","x":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
               "the body nests JSON deeper than 64 levels");
}

TEST(AdminRequestTest, QueryForms) {
  HttpRequest r;
  r.query = {{"url", "http://127.0.0.1:9000"}, {"bootstrap_port", "none"}};
  auto spec = ParseAdminWorkerQuery(r, "regular");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("bootstrap_port"), std::string::npos);
  r.query = {{"url", "http://127.0.0.1:9000"}};
  spec = ParseAdminWorkerQuery(r, "decode");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->worker_type, "decode");
  r.query = {};
  EXPECT_FALSE(ParseAdminWorkerQuery(r, "regular").ok());
}

}  // namespace
}  // namespace tandem::router
