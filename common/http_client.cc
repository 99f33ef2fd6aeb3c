#include "common/http_client.h"

#include <array>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "common/status.h"

namespace tandem {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;

std::string ToStd(beast::string_view view) { return std::string(view.data(), view.size()); }

// One connection's worth of I/O under one deadline. Every step is an asynchronous operation run
// on a private io_context until it completes or the deadline passes; in the latter case the
// socket is closed, the operation drains with an error, and the step reports DeadlineExceeded.
class Exchange {
 public:
  Exchange(const std::string& host, uint16_t port, HttpClient::Clock::time_point deadline)
      : host_(host), port_(port), deadline_(deadline), resolver_(ioc_), socket_(ioc_) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  absl::Status Connect() {
    tcp::resolver::results_type endpoints;
    RETURN_IF_ERROR(Run("resolve", [&](auto handler) {
      resolver_.async_resolve(
          host_, std::to_string(port_),
          [&endpoints, handler](beast::error_code ec, tcp::resolver::results_type results) {
            endpoints = std::move(results);
            handler(ec);
          });
    }));
    return Run("connect", [&](auto handler) {
      net::async_connect(socket_, endpoints,
                         [handler](beast::error_code ec, const tcp::endpoint&) { handler(ec); });
    });
  }

  absl::Status Write(http::request<http::string_body>& request) {
    return Run("write", [&](auto handler) {
      http::async_write(socket_, request, [handler](beast::error_code ec, size_t) { handler(ec); });
    });
  }

  template <typename Parser>
  absl::Status ReadHeader(Parser& parser) {
    return Run("read", [&](auto handler) {
      http::async_read_header(socket_, buffer_, parser,
                              [handler](beast::error_code ec, size_t) { handler(ec); });
    });
  }

  template <typename Parser>
  absl::Status Read(Parser& parser) {
    return Run("read", [&](auto handler) {
      http::async_read(socket_, buffer_, parser, [handler](beast::error_code ec, size_t) {
        // A buffer_body parser stops whenever its buffer is full: not an error.
        handler(ec == http::error::need_buffer ? beast::error_code{} : ec);
      });
    });
  }

  // Returns as soon as some body bytes were parsed (not when the buffer is full), so a stream's
  // events reach the caller when they arrive.
  template <typename Parser>
  absl::Status ReadSome(Parser& parser) {
    return Run("read", [&](auto handler) {
      http::async_read_some(socket_, buffer_, parser, [handler](beast::error_code ec, size_t) {
        handler(ec == http::error::need_buffer ? beast::error_code{} : ec);
      });
    });
  }

  std::string Address() const { return absl::StrCat(host_, ":", port_); }

 private:
  // Starts an operation with a completion callback taking an error_code and runs it.
  template <typename Start>
  absl::Status Run(const char* step, Start start) {
    bool done = false;
    beast::error_code result;
    start([&done, &result](beast::error_code ec) {
      result = ec;
      done = true;
    });
    ioc_.restart();
    while (!done) {
      if (ioc_.run_one_until(deadline_) == 0 && !done) {
        beast::error_code ignored;
        resolver_.cancel();
        socket_.close(ignored);
        ioc_.restart();
        ioc_.run();
        return absl::DeadlineExceededError(
            absl::StrCat("http://", Address(), ": deadline passed during ", step));
      }
    }
    if (!result) return absl::OkStatus();
    if (result == http::error::body_limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("http://", Address(), ": response body over the limit"));
    }
    return absl::UnavailableError(
        absl::StrCat("http://", Address(), ": ", step, ": ", result.message()));
  }

  std::string host_;
  uint16_t port_;
  HttpClient::Clock::time_point deadline_;
  net::io_context ioc_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

absl::StatusOr<http::request<http::string_body>> BuildRequest(
    const std::string& method, const std::string& target, const std::string& host, uint16_t port,
    const std::string& body, const HttpHeaders& headers, const HttpClientOptions& options) {
  http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    return absl::InvalidArgumentError(absl::StrCat("unknown HTTP method '", method, "'"));
  }
  if (target.empty() || target[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP target must start with '/', got '", target, "'"));
  }
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, absl::StrCat(host, ":", port));
  request.set(http::field::user_agent, options.user_agent);
  request.set(http::field::connection, "close");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.body() = body;
  request.prepare_payload();
  return request;
}

HttpHeaders CopyHeaders(const http::fields& fields) {
  HttpHeaders headers;
  for (const auto& field : fields) {
    headers.emplace_back(ToStd(field.name_string()), ToStd(field.value()));
  }
  return headers;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ParseHttpUrl

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad URL '", std::string(url), "': ", std::string(why)));
  };
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return invalid("only http:// URLs are supported");
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t path_start = rest.find('/');
  std::string_view authority = rest.substr(0, path_start);
  std::string_view path = path_start == std::string_view::npos ? "" : rest.substr(path_start);
  if (path.find_first_of("?#") != std::string_view::npos) {
    return invalid("a query or fragment is not allowed in a base URL");
  }
  if (authority.find('@') != std::string_view::npos) return invalid("user info is not supported");

  HttpUrl result;
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid("unterminated IPv6 address");
    result.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return invalid("junk after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return invalid("empty port");
    }
  } else {
    size_t colon = authority.rfind(':');
    result.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return invalid("empty port");
    }
  }
  if (result.host.empty()) return invalid("empty host");
  if (!port_text.empty()) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return invalid("port must be a number in [1, 65535]");
    }
    result.port = static_cast<uint16_t>(value);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  result.base_path = std::string(path);
  return result;
}

// ---------------------------------------------------------------------------------------------
// SseDecoder

bool SseDecoder::HandleLine(std::string_view line) {
  constexpr std::string_view kData = "data:";
  if (line.substr(0, kData.size()) != kData) return true;  // blank, comment or other field
  std::string_view payload = line.substr(kData.size());
  if (!payload.empty() && payload[0] == ' ') payload.remove_prefix(1);
  if (!on_data_(payload)) stopped_ = true;
  return !stopped_;
}

bool SseDecoder::Feed(std::string_view bytes) {
  if (stopped_) return false;
  size_t line_start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    bool lf_after_cr = c == '\n' && after_cr_ && i == line_start;
    after_cr_ = c == '\r';
    if (lf_after_cr) {  // the '\n' of a "\r\n" whose '\r' ended the previous line
      line_start = i + 1;
      continue;
    }
    std::string_view piece = bytes.substr(line_start, i - line_start);
    line_start = i + 1;
    bool keep_going;
    if (partial_.empty()) {
      keep_going = HandleLine(piece);
    } else {
      partial_.append(piece);
      std::string line = std::move(partial_);
      partial_.clear();
      keep_going = HandleLine(line);
    }
    if (!keep_going) return false;
  }
  partial_.append(bytes.substr(line_start));
  return true;
}

bool SseDecoder::Finish() {
  if (stopped_) return false;
  after_cr_ = false;
  if (partial_.empty()) return true;
  std::string line = std::move(partial_);
  partial_.clear();
  return HandleLine(line);
}

// ---------------------------------------------------------------------------------------------
// HttpClient

HttpClient::HttpClient(std::string host, uint16_t port, HttpClientOptions options)
    : host_(std::move(host)), port_(port), options_(std::move(options)) {}

absl::StatusOr<HttpClient> HttpClient::FromUrl(std::string_view url, HttpClientOptions options) {
  ASSIGN_OR_RETURN(HttpUrl parsed, ParseHttpUrl(url));
  HttpClient client(parsed.host, parsed.port, std::move(options));
  client.base_path_ = parsed.base_path;
  return client;
}

absl::StatusOr<HttpClientResponse> HttpClient::Request(const std::string& method,
                                                       const std::string& target,
                                                       const std::string& body,
                                                       const HttpHeaders& headers,
                                                       Clock::time_point deadline) const {
  ASSIGN_OR_RETURN(auto request, BuildRequest(method, base_path_ + target, host_, port_, body,
                                              headers, options_));
  Exchange exchange(host_, port_, deadline);
  RETURN_IF_ERROR(exchange.Connect());
  RETURN_IF_ERROR(exchange.Write(request));
  http::response_parser<http::string_body> parser;
  parser.body_limit(options_.max_body_bytes);
  if (method == "HEAD") parser.skip(true);
  // Boost 1.74's parser does not enforce body_limit against a Content-Length, so the limit is
  // checked here too: before reading a declared length, and on what a chunked body gave.
  RETURN_IF_ERROR(exchange.ReadHeader(parser));
  auto over_limit = [&] {
    return absl::ResourceExhaustedError(absl::StrCat("http://", exchange.Address(),
                                                     ": response body over the limit of ",
                                                     options_.max_body_bytes, " bytes"));
  };
  if (parser.content_length() && *parser.content_length() > options_.max_body_bytes) {
    return over_limit();
  }
  if (!parser.is_done()) RETURN_IF_ERROR(exchange.Read(parser));
  const auto& message = parser.get();
  if (message.body().size() > options_.max_body_bytes) return over_limit();
  HttpClientResponse response;
  response.status = static_cast<int>(message.result_int());
  response.headers = CopyHeaders(message);
  response.body = message.body();
  return response;
}

absl::StatusOr<HttpClientResponse> HttpClient::Get(const std::string& target,
                                                   Clock::time_point deadline) const {
  return Request("GET", target, "", {}, deadline);
}

absl::StatusOr<HttpClientResponse> HttpClient::PostJson(const std::string& target,
                                                        const std::string& body,
                                                        Clock::time_point deadline) const {
  return Request("POST", target, body, {{"Content-Type", "application/json"}}, deadline);
}

absl::StatusOr<HttpClientResponse> HttpClient::PostStream(
    const std::string& target, const std::string& body, const HttpHeaders& headers,
    Clock::time_point deadline, const SseDecoder::DataCallback& on_data) const {
  HttpHeaders all_headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  all_headers.insert(all_headers.end(), headers.begin(), headers.end());
  ASSIGN_OR_RETURN(auto request, BuildRequest("POST", base_path_ + target, host_, port_, body,
                                              all_headers, options_));
  Exchange exchange(host_, port_, deadline);
  RETURN_IF_ERROR(exchange.Connect());
  RETURN_IF_ERROR(exchange.Write(request));

  http::response_parser<http::buffer_body> parser;
  // A stream's length is bounded by the deadline instead. (Not boost::none: Boost 1.74 compares
  // a Content-Length against an empty optional as "over the limit".)
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  RETURN_IF_ERROR(exchange.ReadHeader(parser));
  HttpClientResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  response.headers = CopyHeaders(parser.get());
  const bool success = response.status >= 200 && response.status < 300;

  SseDecoder decoder(on_data);
  std::array<char, 16 << 10> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    RETURN_IF_ERROR(exchange.ReadSome(parser));
    size_t got = chunk.size() - parser.get().body().size;
    std::string_view bytes(chunk.data(), got);
    if (success) {
      if (!decoder.Feed(bytes)) return response;  // the caller has seen enough
    } else {
      if (response.body.size() + got > options_.max_body_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("http://", exchange.Address(), ": response body over the limit"));
      }
      response.body.append(bytes);
    }
  }
  if (success) decoder.Finish();
  return response;
}

}  // namespace tandem
