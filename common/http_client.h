// HttpClient: a small synchronous HTTP/1.1 client (Boost.Beast) for Tandem's own tools:
// tandem-bench drives the router's /generate and /v1/* routes with it, tandemctl its admin API.
//
// Model: every call opens a fresh TCP connection, sends one request ("Connection: close") and
// reads the whole answer, all under one deadline that covers resolve, connect, write and read.
// A call that passes its deadline fails with DeadlineExceeded; nothing is retried. Plain http
// only (no TLS). Responses of any status are returned as values: a 404 or 500 is a successful
// call whose HttpClientResponse says so; transport problems (refused, reset, malformed HTTP,
// a body over `max_body_bytes`) are errors naming the address.
//
// Streaming: PostStream hands each server-sent-events `data:` payload to a callback as soon as
// its line has arrived, so callers can time tokens as they come (TTFT, inter-token latency).
// A non-2xx status is not streamed: its body is collected and returned instead.
//
// Thread-safety: HttpClient holds only its configuration; every method is const and may be
// called from any number of threads at once. SseDecoder is a per-stream object for one thread.
#ifndef TANDEM_COMMON_HTTP_CLIENT_H_
#define TANDEM_COMMON_HTTP_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/http_types.h"

namespace tandem {

// The parts of an "http://host:port/prefix" URL. The port defaults to 80; `base_path` is the
// path without a trailing slash ("" for "http://h:1" and "http://h:1/").
struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  std::string base_path;
};
// Parses an http:// URL (host names, IPv4, bracketed IPv6). https, user info, a query or a
// fragment, an empty host or a bad port are InvalidArgument naming the URL.
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url);

struct HttpClientResponse {
  int status = 0;
  HttpHeaders headers;  // as received
  std::string body;     // the whole body (for PostStream: only for a non-2xx status)
};

struct HttpClientOptions {
  size_t max_body_bytes = 64 << 20;  // larger bodies fail with ResourceExhausted
  std::string user_agent = "tandem";
};

// Splits an SSE byte stream (text/event-stream) into `data:` payloads, whatever the chunking:
// bytes may arrive one at a time or many lines at once. Lines end with "\n", "\r\n" or "\r".
// "data:x" and "data: x" both give "x" (one leading space is removed, as the SSE spec says);
// comments (":..."), other fields (event:, id:, retry:) and blank lines are skipped.
class SseDecoder {
 public:
  // Called with each payload, in order. Returning false stops decoding: Feed then returns
  // false and ignores the rest of its input.
  using DataCallback = std::function<bool(std::string_view data)>;

  explicit SseDecoder(DataCallback on_data) : on_data_(std::move(on_data)) {}

  // Feeds the next bytes. False once the callback asked to stop.
  bool Feed(std::string_view bytes);
  // Ends the stream: a last line without a terminator still counts. False if the callback
  // asked to stop.
  bool Finish();

 private:
  bool HandleLine(std::string_view line);

  DataCallback on_data_;
  std::string partial_;    // an incomplete line carried over between Feed calls
  bool after_cr_ = false;  // the previous byte was '\r' (a following '\n' belongs to it)
  bool stopped_ = false;
};

class HttpClient {
 public:
  using Clock = std::chrono::steady_clock;

  HttpClient(std::string host, uint16_t port, HttpClientOptions options = {});
  // From a base URL such as "http://127.0.0.1:30000" (see ParseHttpUrl); its path, if any,
  // prefixes every target given to the calls below.
  static absl::StatusOr<HttpClient> FromUrl(std::string_view url, HttpClientOptions options = {});

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

  // One request; `target` is the path and query ("/v1/models"). `headers` are added as given.
  absl::StatusOr<HttpClientResponse> Request(const std::string& method, const std::string& target,
                                             const std::string& body, const HttpHeaders& headers,
                                             Clock::time_point deadline) const;
  absl::StatusOr<HttpClientResponse> Get(const std::string& target,
                                         Clock::time_point deadline) const;
  // POST with Content-Type: application/json.
  absl::StatusOr<HttpClientResponse> PostJson(const std::string& target, const std::string& body,
                                              Clock::time_point deadline) const;

  // POST `body` (JSON) and read the answer as an SSE stream, calling `on_data` with each
  // `data:` payload as it arrives. For a 2xx status the returned body is empty; the call ends
  // when the server ends the body, or early (OK) when `on_data` returns false. A non-2xx
  // status is returned with its whole body and `on_data` is never called.
  absl::StatusOr<HttpClientResponse> PostStream(const std::string& target, const std::string& body,
                                                const HttpHeaders& headers,
                                                Clock::time_point deadline,
                                                const SseDecoder::DataCallback& on_data) const;

 private:
  std::string host_;
  uint16_t port_;
  std::string base_path_;
  HttpClientOptions options_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_HTTP_CLIENT_H_
