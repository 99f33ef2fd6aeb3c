#include "common/http_cors.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {

std::string CorsAllowedOrigin(const std::vector<std::string>& allowed,
                              const std::optional<std::string>& origin) {
  if (!origin.has_value()) return "";
  for (const std::string& entry : allowed) {
    if (entry == "*") return "*";
    if (entry == *origin) return entry;
  }
  return "";
}

bool IsCorsPreflight(const HttpRequest& head) {
  return head.method == "OPTIONS" && head.Header("Origin").has_value() &&
         head.Header("Access-Control-Request-Method").has_value();
}

HttpResponse CorsPreflightAnswer(const HttpRequest& head, const std::vector<std::string>& methods,
                                 const std::string& allow_origin) {
  if (allow_origin.empty()) {
    return HttpResponse::Error(
        400, absl::StrCat("cross-origin requests from ", head.Header("Origin").value_or(""),
                          " are not allowed (--cors-allowed-origins)"));
  }
  std::vector<std::string> allowed = methods;
  const auto has = [&allowed](const std::string& m) {
    return std::find(allowed.begin(), allowed.end(), m) != allowed.end();
  };
  if (has("GET") && !has("HEAD")) allowed.push_back("HEAD");
  const std::string requested = head.Header("Access-Control-Request-Method").value_or("");
  if (!has(requested)) {
    return HttpResponse::Error(400,
                               absl::StrCat("method ", requested, " not allowed on ", head.path,
                                            " (allowed: ", absl::StrJoin(allowed, ", "), ")"));
  }
  allowed.push_back("OPTIONS");
  HttpResponse answer = HttpResponse::Text(200, "OK");
  answer.headers.emplace_back("Access-Control-Allow-Methods", absl::StrJoin(allowed, ", "));
  // Any header the page asks to send (keys included: each route checks them itself).
  if (const auto headers = head.Header("Access-Control-Request-Headers")) {
    answer.headers.emplace_back("Access-Control-Allow-Headers", *headers);
  }
  answer.headers.emplace_back("Access-Control-Max-Age", std::to_string(kCorsMaxAgeSeconds));
  return answer;
}

absl::Status CheckCorsOrigins(const std::vector<std::string>& origins) {
  for (const std::string& origin : origins) {
    if (origin == "*") continue;
    const bool scheme = absl::StartsWith(origin, "http://") || absl::StartsWith(origin, "https://");
    const size_t host = origin.find("://") + 3;
    const bool plain = std::none_of(origin.begin(), origin.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return u <= 0x20 || u >= 0x7f || c == ',';
    });
    if (!scheme || host >= origin.size() || origin.find('/', host) != std::string::npos || !plain) {
      return absl::InvalidArgumentError(
          absl::StrCat("CORS origin '", origin,
                       "' is neither * nor scheme://host[:port] (http or https, no path)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
