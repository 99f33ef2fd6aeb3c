#include "common/http_response_wire.h"

#include <utility>

#include "absl/strings/match.h"

namespace tandem::http_internal {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;

bool HasLineBreak(const std::string& text) {
  return text.find_first_of("\r\n") != std::string::npos;
}

}  // namespace

bool AcceptableHeader(const std::string& name, const std::string& value) {
  if (name.empty() || HasLineBreak(name) || HasLineBreak(value)) return false;
  return !absl::EqualsIgnoreCase(name, "content-length") &&
         !absl::EqualsIgnoreCase(name, "transfer-encoding") &&
         !absl::EqualsIgnoreCase(name, "connection") &&
         !absl::EqualsIgnoreCase(name, "content-type");
}

std::string SafeContentType(const std::string& content_type) {
  return HasLineBreak(content_type) ? "application/octet-stream" : content_type;
}

http::response<http::string_body> ResponseMessage(HttpResponse response, unsigned version,
                                                  bool keep_alive,
                                                  const std::string& server_header) {
  http::response<http::string_body> message;
  message.version(version);
  message.result(static_cast<unsigned>(response.status));
  message.reason(StatusReason(response.status));
  message.set(http::field::server, server_header);
  message.set(http::field::content_type, SafeContentType(response.content_type));
  for (const auto& [name, value] : response.headers) {
    if (AcceptableHeader(name, value)) message.insert(name, value);
  }
  message.body() = std::move(response.body);
  message.keep_alive(keep_alive);
  message.prepare_payload();
  return message;
}

std::string WireBytes(http::response<http::string_body>& message) {
  http::response_serializer<http::string_body> serializer(message);
  std::string wire;
  beast::error_code ec;
  while (!ec && !serializer.is_done()) {
    serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
      for (const auto buffer : beast::buffers_range_ref(buffers)) {
        wire.append(static_cast<const char*>(buffer.data()), buffer.size());
      }
      serializer.consume(beast::buffer_bytes(buffers));
    });
  }
  return wire;
}

}  // namespace tandem::http_internal
