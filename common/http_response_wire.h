// What HttpServer puts on the wire for an answer: the response message built from a handler's
// HttpResponse (status line, Server, a Content-Type that cannot split the header, the handler's
// headers that cannot break framing, the body with its length), and that message as bytes.
// Internal to the HTTP server (http_*.cc); plain functions, thread-safe.
#ifndef TANDEM_COMMON_HTTP_RESPONSE_WIRE_H_
#define TANDEM_COMMON_HTTP_RESPONSE_WIRE_H_

#include <cstddef>
#include <string>

#include "boost/beast/http.hpp"
#include "common/http_types.h"

namespace tandem::http_internal {

// Bounds on a handler-supplied header. Beast throws on a field of 64 KiB or more, and no client
// needs one near that; a header echoing peer input beyond these is dropped, not sent.
inline constexpr size_t kMaxHeaderNameBytes = 256;
inline constexpr size_t kMaxHeaderValueBytes = 8 << 10;

// Whether a handler-supplied header may be sent: the server owns the framing headers; a line
// break or another control character (e.g. from echoed peer input) would let a value inject
// headers or split the response; names and values are bounded (above).
bool AcceptableHeader(const std::string& name, const std::string& value);
// `content_type`, or application/octet-stream when it holds a control character or is longer
// than kMaxHeaderValueBytes.
std::string SafeContentType(const std::string& content_type);

// The whole response to a request of HTTP/1.`version % 10` (10 or 11), keeping the connection
// open after it or not. `head_only` (the request was a HEAD): the header is the one the body would
// have had, Content-Length included, and the body is left off. `allow_origin`, when not empty, is
// sent as Access-Control-Allow-Origin (AddCorsHeaders). Does not throw on any handler input: when
// Beast refuses the message (logged), the result is a 500 without the handler's headers.
boost::beast::http::response<boost::beast::http::string_body> ResponseMessage(
    HttpResponse response, unsigned version, bool keep_alive, bool head_only,
    const std::string& allow_origin, const std::string& server_header);
// Access-Control-Allow-Origin: `allow_origin` (none when empty), with Vary: Origin when it names
// one origin (the answer then differs by origin, which caches must know).
template <class Fields>
void AddCorsHeaders(const std::string& allow_origin, Fields* fields) {
  if (allow_origin.empty()) return;
  fields->set(boost::beast::http::field::access_control_allow_origin, allow_origin);
  if (allow_origin != "*") fields->set(boost::beast::http::field::vary, "Origin");
}
// `message` serialized: header then body.
std::string WireBytes(boost::beast::http::response<boost::beast::http::string_body>& message);

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_RESPONSE_WIRE_H_
