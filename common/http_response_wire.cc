#include "common/http_response_wire.h"

#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;

bool HasLineBreak(const std::string& text) {
  return text.find_first_of("\r\n") != std::string::npos;
}

// RFC 9110 field-value characters: visible ASCII, space, tab and obs-text (>= 0x80). NUL and the
// other control characters are refused by clients' parsers and would cut the response off.
bool ValidFieldValue(const std::string& value) {
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

void BuildMessage(HttpResponse response, unsigned version, bool keep_alive, bool head_only,
                  const std::string& allow_origin, const std::string& server_header,
                  http::response<http::string_body>* message) {
  message->version(version);
  message->result(static_cast<unsigned>(response.status));
  message->reason(StatusReason(response.status));
  message->set(http::field::server, server_header);
  message->set(http::field::content_type, SafeContentType(response.content_type));
  for (const auto& [name, value] : response.headers) {
    if (AcceptableHeader(name, value)) message->insert(name, value);
  }
  AddCorsHeaders(allow_origin, message);
  message->body() = std::move(response.body);
  message->keep_alive(keep_alive);
  message->prepare_payload();
  if (head_only) message->body().clear();  // Content-Length stays the body's
}

}  // namespace

bool AcceptableHeader(const std::string& name, const std::string& value) {
  if (name.empty() || name.size() > kMaxHeaderNameBytes || value.size() > kMaxHeaderValueBytes) {
    return false;
  }
  if (HasLineBreak(name) || !ValidFieldValue(name) || !ValidFieldValue(value)) return false;
  return !absl::EqualsIgnoreCase(name, "content-length") &&
         !absl::EqualsIgnoreCase(name, "transfer-encoding") &&
         !absl::EqualsIgnoreCase(name, "connection") &&
         !absl::EqualsIgnoreCase(name, "content-type");
}

std::string SafeContentType(const std::string& content_type) {
  return content_type.size() > kMaxHeaderValueBytes || !ValidFieldValue(content_type)
             ? "application/octet-stream"
             : content_type;
}

http::response<http::string_body> ResponseMessage(HttpResponse response, unsigned version,
                                                  bool keep_alive, bool head_only,
                                                  const std::string& allow_origin,
                                                  const std::string& server_header) {
  const int status = response.status;
  http::response<http::string_body> message;
  try {
    BuildMessage(std::move(response), version, keep_alive, head_only, allow_origin, server_header,
                 &message);
    return message;
  } catch (const std::exception& e) {
    // Beast throws on fields it cannot hold (e.g. a value of 64 KiB or more). The handler's
    // answer is lost either way; a 500 without its headers still tells the client.
    spdlog::error("http: the {} response could not be built ({}); sending 500", status, e.what());
  }
  http::response<http::string_body> fallback;
  BuildMessage(HttpResponse::Error(500, "internal error: the response could not be built"), version,
               keep_alive, head_only, allow_origin, server_header, &fallback);
  return fallback;
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
