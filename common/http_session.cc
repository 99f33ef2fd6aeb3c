// HttpStreamConnection's reading half and life (http_stream_connection.h): start and TLS
// handshake, request heads judged before their bodies (route, key and BodyBudget checks), bodies,
// the hand-over to ServerCore::Dispatch, and closing; MakeHttpConnection picks the stream.
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/http_stream_connection.h"
#include "common/status.h"

namespace tandem::http_internal {
namespace {

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

std::string ToString(beast::string_view view) { return std::string(view.data(), view.size()); }

// A request's head as an HttpRequest (empty body); an error is the 400 its target earns.
template <class Fields>
absl::StatusOr<HttpRequest> RequestHead(const http::request_header<Fields>& head,
                                        const std::string& peer) {
  HttpRequest request;
  request.method = ToString(head.method_string());
  request.target = ToString(head.target());
  request.version = static_cast<int>(head.version());
  request.peer = peer;
  for (const auto& field : head) {
    request.headers.emplace_back(ToString(field.name_string()), ToString(field.value()));
  }
  if (request.target.empty() || request.target[0] != '/') {
    return absl::InvalidArgumentError("request target must be an absolute path");
  }
  const size_t question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) {
    ASSIGN_OR_RETURN(request.query, ParseQuery(request.target.substr(question + 1)));
  }
  return request;
}

}  // namespace

template <class Stream>
void HttpStreamConnection<Stream>::OnException(const char* what, const char* error) noexcept {
  try {
    spdlog::error("http: {} for {} threw: {}", what, peer_, error);
    if (closed_) return;
    if (current_ != nullptr && !wire_started_ && !failing_) {
      failing_ = true;
      // The handler may still hold this exchange: closing it makes its later answer a no-op
      // (and runs its close callback, so upstream work is cancelled).
      std::shared_ptr<Exchange> abandoned = std::move(current_);
      abandoned->MarkClosed();
      AllowDirect(false);
      response_.reset();
      SendError(500, "internal error: the server failed while handling this request",
                /*close=*/true);
      return;
    }
  } catch (...) {
    // Fall through to closing: nothing else can be done for this connection.
  }
  try {
    DoClose();
  } catch (...) {
    closed_ = true;
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::Start() {
  beast::error_code ec;
  // The disconnect watch peeks without blocking.
  Lowest().socket().non_blocking(true, ec);
  Lowest().socket().set_option(tcp::no_delay(true), ec);
  direct_.SetSocket(Lowest().socket().native_handle());
  if constexpr (kTls) {
    // A client that speaks plain HTTP, or nothing, fails or times out here and is closed.
    Lowest().expires_after(options_.read_timeout);
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->Safely("TLS handshake", [&] {
        self->stream_.async_handshake(
            net::ssl::stream_base::server, [self](beast::error_code handshake_ec) {
              self->Safely("TLS handshake", [&] { self->OnHandshake(handshake_ec); });
            });
      });
    });
  } else {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->Safely("reading a request", [&] { self->ReadNext(); });
    });
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::OnHandshake(beast::error_code ec) {
  if (ec) {
    spdlog::debug("http: TLS handshake with {} failed: {}", peer_, ec.message());
    DoClose();
    return;
  }
  ReadNext();
}

template <class Stream>
void HttpStreamConnection<Stream>::PostClose() {
  net::post(stream_.get_executor(), [self = this->shared_from_this()] {
    self->Safely("closing", [&] { self->DoClose(); });
  });
}

template <class Stream>
void HttpStreamConnection<Stream>::ReadNext() {
  if (closed_) return;
  if (buffer_.size() > 0) {  // a pipelined request is already here
    ReadHeader();
    return;
  }
  Lowest().expires_after(options_.idle_timeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                            self->Safely("reading a request", [&] {
                              if (ec) {
                                self->DoClose();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
                          });
}

template <class Stream>
void HttpStreamConnection<Stream>::ReadHeader() {
  head_only_ = false;  // until this request's head says HEAD
  allow_origin_.clear();
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
  parser_->body_limit(options_.max_body_bytes);
  Lowest().expires_after(options_.read_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = this->shared_from_this()](beast::error_code ec, size_t header_bytes) {
        // Beast checks header_limit only while the header is incomplete: one that arrived whole
        // in a single read is measured here.
        if (!ec && header_bytes > self->options_.max_header_bytes) ec = http::error::header_limit;
        self->Safely("reading a request header", [&] { self->OnHeader(ec); });
      });
}

template <class Stream>
void HttpStreamConnection<Stream>::OnHeader(beast::error_code ec) {
  if (ec) {
    OnReadError(ec);
    return;
  }
  const auto& request = parser_->get();
  head_only_ = request.method() == http::verb::head;
  // A transfer coding other than chunked leaves the body's length unknown (RFC 9112 6.3): the
  // rest of the bytes could be taken for another request.
  if (request.find(http::field::transfer_encoding) != request.end() && !parser_->chunked()) {
    SendError(400, "malformed HTTP request: only the chunked Transfer-Encoding is supported",
              /*close=*/true);
    return;
  }
  // Chunked last, after codings this server cannot undo (gzip, chunked): 501 (RFC 9112 6.1).
  const auto [first, last] = request.equal_range(http::field::transfer_encoding);
  for (auto field = first; field != last; ++field) {
    const std::string value = ToString(field->value());
    for (absl::string_view coding : absl::StrSplit(value, ',')) {
      coding = absl::StripAsciiWhitespace(coding);
      if (!coding.empty() && !absl::EqualsIgnoreCase(coding, "chunked")) {
        SendError(
            501,
            absl::StrCat("Transfer-Encoding '", coding.substr(0, 64),
                         coding.size() > 64 ? "...' " : "' ", "is not supported: only chunked"),
            /*close=*/true);
        return;
      }
    }
  }
  if (!parser_->is_done()) {
    // Judged before a body byte is read (http_server.h): a refused peer's body is never held.
    version_ = request.version();
    absl::StatusOr<HttpRequest> head = RequestHead(request, peer_);
    if (head.ok()) allow_origin_ = core_->AllowOrigin(*head);
    std::optional<HttpResponse> refusal =
        head.ok() ? core_->RefuseHead(*head)
                  : HttpResponse::Error(400, std::string(head.status().message()));
    if (refusal.has_value()) {
      Refuse(*std::move(refusal));
      return;
    }
    if (!AdmitBody()) return;
  }
  const auto expect = request.find(http::field::expect);
  if (expect != request.end() &&
      absl::EqualsIgnoreCase(ToString(expect->value()), "100-continue") && !parser_->is_done()) {
    Lowest().expires_after(options_.write_timeout);
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->Safely("reading a request body", [&] {
                         if (ec) {
                           self->DoClose();
                           return;
                         }
                         self->Lowest().expires_after(self->options_.read_timeout);
                         self->ReadBody();
                       });
                     });
    return;
  }
  ReadBody();
}

template <class Stream>
bool HttpStreamConnection<Stream>::AdmitBody() {
  BodyBudget& budget = core_->body_budget();
  const boost::optional<uint64_t> length = parser_->content_length();  // <= max_body_bytes here
  std::optional<BodyBudget::Lease> lease = budget.TryReserve(length.value_or(0));
  if (!lease.has_value()) {
    Refuse(budget.Refusal());
    return false;
  }
  body_lease_ = *std::move(lease);
  if (!length.has_value()) {  // chunked
    on_chunk_ = [this](uint64_t size, beast::string_view, beast::error_code& ec) {
      if (!body_lease_.Grow(size)) ec = net::error::no_buffer_space;
    };
    parser_->on_chunk_header(on_chunk_);
  }
  return true;
}

template <class Stream>
void HttpStreamConnection<Stream>::ReadBody() {
  if (parser_->is_done()) {
    OnRequest();
    return;
  }
  http::async_read(stream_, buffer_, *parser_,
                   [self = this->shared_from_this()](beast::error_code ec, size_t) {
                     self->Safely("handling a request", [&] {
                       if (ec) {
                         self->OnReadError(ec);
                         return;
                       }
                       self->OnRequest();
                     });
                   });
}

template <class Stream>
void HttpStreamConnection<Stream>::OnReadError(beast::error_code ec) {
  body_lease_ = {};
  if (ec == net::error::no_buffer_space) {
    Refuse(core_->body_budget().Refusal());
  } else if (ec == http::error::body_limit) {
    SendError(413,
              absl::StrCat("request body exceeds the limit of ", options_.max_body_bytes, " bytes"),
              /*close=*/true);
  } else if (ec == http::error::header_limit) {
    SendError(
        431,
        absl::StrCat("request headers exceed the limit of ", options_.max_header_bytes, " bytes"),
        /*close=*/true);
  } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
             ec == beast::error::timeout || ec == net::error::operation_aborted ||
             ec == net::error::connection_reset || ec == http::error::partial_message ||
             ec == net::ssl::error::stream_truncated) {
    DoClose();  // the client left or stalled: nobody to answer
  } else {
    SendError(400, absl::StrCat("malformed HTTP request: ", ec.message()), /*close=*/true);
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::OnRequest() {
  // A request already buffered can finish parsing after DoClose (e.g. Stop): starting its
  // exchange then would tie it and the session to each other with nothing left to part them.
  if (closed_) return;
  Lowest().expires_never();
  SetWaiting(false);
  wire_started_ = false;
  failing_ = false;
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  keep_alive_ = message.keep_alive();
  version_ = message.version();
  head_only_ = message.method() == http::verb::head;

  absl::StatusOr<HttpRequest> head = RequestHead(message, peer_);
  current_ = std::make_shared<Exchange>(this->shared_from_this(), options_.max_stream_buffer_bytes,
                                        std::move(body_lease_));
  AllowDirect(false);  // until the handler has returned without answering
  HttpResponder responder(current_);
  if (!head.ok()) {
    responder.Send(HttpResponse::Error(400, std::string(head.status().message())));
    return;
  }
  HttpRequest request = *std::move(head);
  request.body = std::move(message.body());
  allow_origin_ = core_->AllowOrigin(request);
  std::shared_ptr<Exchange> exchange = current_;
  core_->Dispatch(std::move(request), std::move(responder));
  // Watch for a disconnect only while someone may still act on it: most requests are answered
  // inside the handler, and arming the watch costs system calls.
  if (!exchange->answered()) {
    AllowDirect(exchange->pending());
    ArmWatch();
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::DoClose() {
  if (closed_) return;
  closed_ = true;
  body_lease_ = {};
  direct_.Close();  // no direct write from here on: the socket closes
  beast::error_code ec;
  Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
  Lowest().close();
  if (current_ != nullptr) {
    std::shared_ptr<Exchange> exchange = std::move(current_);
    exchange->MarkClosed();
  }
  core_->RemoveSession(id_);
}

std::shared_ptr<HttpConnection> MakeHttpConnection(tcp::socket socket, ServerCore* core,
                                                   uint64_t id, std::string peer,
                                                   net::ssl::context* tls) {
  if (tls != nullptr) {
    return std::make_shared<HttpStreamConnection<beast::ssl_stream<beast::tcp_stream>>>(
        core, id, std::move(peer), std::move(socket), *tls);
  }
  return std::make_shared<HttpStreamConnection<beast::tcp_stream>>(core, id, std::move(peer),
                                                                   std::move(socket));
}

// Every member defined above, for both streams (the other half is in http_session_answer.cc).
template class HttpStreamConnection<beast::tcp_stream>;
template class HttpStreamConnection<beast::ssl_stream<beast::tcp_stream>>;

}  // namespace tandem::http_internal
