// Plain HTTP request/response values used by HttpServer handlers (common/http_server.h), and the
// helpers to build the JSON error bodies every Tandem HTTP API returns. Value types, no I/O;
// safe to copy and move between threads.
#ifndef TANDEM_COMMON_HTTP_TYPES_H_
#define TANDEM_COMMON_HTTP_TYPES_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One parsed request, as given to a handler.
struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // the raw request target: "/v1/models?limit=2"
  std::string path;    // the target up to '?', not percent-decoded: "/v1/models"
  // Query parameters in order, percent-decoded ('+' is a space). A name may repeat.
  std::vector<std::pair<std::string, std::string>> query;
  HttpHeaders headers;  // as received (names keep their case)
  std::string body;
  std::string peer;  // client address, "127.0.0.1:50312" or "[::1]:50312"
  int version = 11;  // 10 for HTTP/1.0, 11 for HTTP/1.1

  // The first value of a header, by case-insensitive name.
  std::optional<std::string> Header(const std::string& name) const;
  // The first value of a query parameter.
  std::optional<std::string> Query(const std::string& name) const;
};

// A whole response. Content-Length is set by the server.
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HttpHeaders headers;  // extra headers; Content-Type/Content-Length here are ignored
  std::string body;

  static HttpResponse Json(int status, std::string body);
  static HttpResponse Text(int status, std::string body);
  // An error in OpenAI's shape: {"error":{"message":...,"type":...,"param":null,"code":status}}
  // (param null: the message names the field). When `type` is empty it is derived from the
  // status (see ErrorTypeForStatus).
  static HttpResponse Error(int status, const std::string& message, const std::string& type = "");
};

// {"error":{"message":"...","type":"...","param":null,"code":N}}
std::string ErrorJson(int status, const std::string& message, const std::string& type = "");
// "invalid_request_error" for most 4xx, "not_found_error" (404), "authentication_error" (401),
// "permission_error" (403), "rate_limit_error" (429), "service_unavailable" (503),
// "internal_error" otherwise for 5xx.
std::string ErrorTypeForStatus(int status);
// The reason phrase of a status code ("Not Found"), "Unknown" for unlisted codes.
std::string StatusReason(int status);

// Percent-decodes `text`; with `plus_is_space`, '+' decodes to ' ' (query strings). A truncated
// or non-hex escape is InvalidArgument.
absl::StatusOr<std::string> PercentDecode(const std::string& text, bool plus_is_space);
// Splits "a=1&b=x%20y&flag" into decoded pairs ({"flag", ""} for a bare name).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    const std::string& query);

}  // namespace tandem

#endif  // TANDEM_COMMON_HTTP_TYPES_H_
