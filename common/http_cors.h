// Cross-origin resource sharing (CORS) for HttpServer: which browser pages may call a route and
// read its answer (HttpServerOptions::cors_allowed_origins). Plain functions over a request's
// head, thread-safe; the server adds what they return (http_server.h, "Cross-origin").
//
// The answers follow the Fetch standard's CORS protocol as browsers enforce it:
//   - a request carrying Origin, from an allowed origin, gets Access-Control-Allow-Origin ("*"
//     when every origin is allowed, else the origin itself with Vary: Origin) on whatever answer
//     it gets, errors and streams included, so the page can read it;
//   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) for a method the path
//     serves is answered 200 with the path's methods, the requested headers and a max age,
//     before any key check (browsers send no Authorization on a preflight); one from an origin
//     not allowed, or for a method the path does not serve, is a 400.
// No Access-Control-Allow-Credentials: cookies and the browser's own HTTP authentication are not
// how a client authenticates here (keys travel in Authorization, which a page sets itself).
#ifndef TANDEM_COMMON_HTTP_CORS_H_
#define TANDEM_COMMON_HTTP_CORS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/http_types.h"

namespace tandem {

// Preflight answers may be cached by the browser this long (seconds).
inline constexpr int kCorsMaxAgeSeconds = 600;

// The Access-Control-Allow-Origin value for a request whose Origin header is `origin` (nullopt:
// none sent) against `allowed` ("*" or exact origins): "*", the origin itself, or "" for none.
std::string CorsAllowedOrigin(const std::vector<std::string>& allowed,
                              const std::optional<std::string>& origin);

// Whether `head` is a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method.
bool IsCorsPreflight(const HttpRequest& head);

// The answer to a preflight `head` on a path serving `methods` (sorted, as registered), when its
// origin is allowed (`allow_origin` non-empty, from CorsAllowedOrigin): 200 listing the methods
// (HEAD beside GET, and OPTIONS), the requested headers and kCorsMaxAgeSeconds; a 400 naming what
// is not allowed otherwise. Access-Control-Allow-Origin itself is added by the connection, as on
// every answer.
HttpResponse CorsPreflightAnswer(const HttpRequest& head, const std::vector<std::string>& methods,
                                 const std::string& allow_origin);

// Checks an operator's origin list: each entry is "*" or scheme://host[:port] with scheme http
// or https, no path, no whitespace or control characters (what a browser sends as Origin).
absl::Status CheckCorsOrigins(const std::vector<std::string>& origins);

}  // namespace tandem

#endif  // TANDEM_COMMON_HTTP_CORS_H_
