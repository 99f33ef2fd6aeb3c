// ParseAbortRequest: SGLang's /abort_request body, and a 400-worthy error naming the field for
// everything else.
#include "router/abort_request.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem::router {
namespace {

std::string ErrorOf(std::string_view body) {
  absl::StatusOr<AbortSpec> spec = ParseAbortRequest(body);
  EXPECT_FALSE(spec.ok()) << body;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(spec.status().message());
}

TEST(ParseAbortRequestTest, SglangBodies) {
  absl::StatusOr<AbortSpec> one = ParseAbortRequest(R"({"rid":"r-1"})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->rid, "r-1");
  EXPECT_FALSE(one->abort_all);

  absl::StatusOr<AbortSpec> all = ParseAbortRequest(R"({"abort_all":true,"rid":""})");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->abort_all);

  // Other AbortReq keys and nulls are ignored.
  absl::StatusOr<AbortSpec> extra =
      ParseAbortRequest(R"({"rid":"x","abort_all":null,"finished_reason":{"type":"abort"}})");
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(extra->rid, "x");
  EXPECT_TRUE(ParseAbortRequest(R"({"rid":")" + std::string(256, 'r') + R"("})").ok());
}

TEST(ParseAbortRequestTest, ErrorsNameTheField) {
  const std::string need = "rid is required: the rid of the request to abort (or abort_all: true)";
  EXPECT_EQ(ErrorOf(""), need);
  EXPECT_EQ(ErrorOf("  \n"), need);
  EXPECT_EQ(ErrorOf("{}"), need);
  EXPECT_EQ(ErrorOf(R"({"rid":""})"), need);
  EXPECT_EQ(ErrorOf(R"({"abort_all":false})"), need);
  EXPECT_EQ(ErrorOf(R"({"rid":7})"), "rid must be a string");
  EXPECT_EQ(ErrorOf(R"({"rid":["a"]})"), "rid must be a string");
  EXPECT_EQ(ErrorOf(R"({"abort_all":1})"), "abort_all must be a boolean");
  EXPECT_EQ(ErrorOf(R"({"rid":")" + std::string(257, 'r') + R"("})"),
            "rid must be at most 256 bytes, got 257 bytes");
  const std::string shape =
      "the body must be a JSON object: {\"rid\": \"...\"} or {\"abort_all\": true}";
  EXPECT_EQ(ErrorOf("rid=x"), shape);
  EXPECT_EQ(ErrorOf("[]"), shape);
  EXPECT_EQ(ErrorOf("\"x\""), shape);
  // Deep nesting, unterminated or whole, is refused before the parser builds a node per level
  // (a 32 MiB body of brackets took the router from 26 MiB to 563 MiB of memory).
  const std::string deep = "the body nests JSON deeper than 64 levels";
  EXPECT_EQ(ErrorOf(std::string(100000, '[')), deep);
  EXPECT_EQ(ErrorOf(std::string(100000, '[') + std::string(100000, ']')), deep);
  EXPECT_EQ(
      ErrorOf(R"({"rid":"x","deep":)" + std::string(100000, '[') + std::string(100000, ']') + "}"),
      deep);
  EXPECT_TRUE(
      ParseAbortRequest(R"({"rid":"x","deep":)" + std::string(63, '[') + std::string(63, ']') + "}")
          .ok());
  // So is a body of more values than a control body needs (1 MiB parsed).
  std::string many = R"({"rid":"x","many":[0)";
  for (int i = 0; i < 30000; ++i) many += ",0";
  EXPECT_NE(ErrorOf(many + "]}").find("too many JSON values"), std::string::npos);
}

}  // namespace
}  // namespace tandem::router
