// The per-connection half of HttpServer: HttpStreamConnection, one template over the stream type
// (plain beast::tcp_stream or TLS over it) that reads requests, hands each to ServerCore::Dispatch
// with an Exchange, and writes the answer (whole, or chunked as the handler streams it) on the
// connection's strand, or lets the answering thread write a whole answer itself (DirectAnswer,
// http_direct_answer.h); MakeHttpConnection picks the stream. Exchange itself is in
// http_exchange.cc.
#include "common/http_session.h"

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/beast/ssl.hpp"
#include "common/http_direct_answer.h"
#include "common/http_response_wire.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {
namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr std::chrono::milliseconds kLingerTimeout{500};
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

// One connection over `Stream`: beast::tcp_stream (plain) or beast::ssl_stream<beast::tcp_stream>.
template <class Stream>
class HttpStreamConnection final
    : public HttpConnection,
      public std::enable_shared_from_this<HttpStreamConnection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  // `stream_args` construct the stream: (socket) or (socket, ssl context).
  template <class... StreamArgs>
  HttpStreamConnection(ServerCore* core, uint64_t id, std::string peer,
                       StreamArgs&&... stream_args);
  HttpStreamConnection(const HttpStreamConnection&) = delete;
  HttpStreamConnection& operator=(const HttpStreamConnection&) = delete;

  void Start() override;
  void PostClose() override;
  bool TrySend(HttpResponse& response) override;
  void PostSend(HttpResponse response) override;
  void PostStartStream(int status, std::string content_type, HttpHeaders headers) override;
  void PostPump() override;
  void SweepIdle(std::chrono::steady_clock::time_point now) override;

 private:
  // The TCP layer (timeouts, the socket) under a TLS stream, or the stream itself.
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  // Runs one step of the session (a completion handler's body or a posted task) on the strand.
  // Beast, Asio and the code they call may throw (a field over Beast's limits, bad_alloc); an
  // exception leaving a step would unwind into the io_context with the connection in an unknown
  // state, so it ends in OnException instead.
  template <class Step>
  void Safely(const char* what, Step&& step) noexcept;
  // After a step threw: a 500 (closing) when nothing of the current answer is on the wire yet,
  // else the connection closes. Logged either way; the server keeps serving the others.
  void OnException(const char* what, const char* error) noexcept;
  void OnHandshake(beast::error_code ec);
  void ReadNext();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  // Reserves the announced body in the server's BodyBudget (whole, or chunk by chunk as they
  // arrive); false after refusing the request with 503.
  bool AdmitBody();
  void ReadBody();
  void OnReadError(beast::error_code ec);
  void OnRequest();
  void ArmWatch();
  void OnWatch(beast::error_code ec);
  void SendError(int status, const std::string& message, bool close);
  // Answers the request being read with `response` and closes the connection afterwards.
  void Refuse(HttpResponse response);
  void WriteResponse(HttpResponse response);
  void OnWritten(beast::error_code ec);
  // Direct answers (http_session.h). On the strand: lets a handler's thread write the answer
  // to the current exchange from now on (plain keep-alive connections only), or stops it.
  void AllowDirect(bool allow);
  // On the strand: writes what a direct write left over, then ends the exchange.
  void WriteRest();
  void WriteStreamHeader(int status, const std::string& content_type, const HttpHeaders& headers);
  void Pump();
  void OnStreamWrite(beast::error_code ec);
  void EndExchange();
  void Linger();
  void DoClose();

  Stream stream_;
  beast::flat_buffer buffer_;
  ServerCore* const core_;  // outlives every session (HttpServer::Stop closes them first)
  const HttpServerOptions& options_;
  const uint64_t id_;
  const std::string peer_;

  bool closed_ = false;
  bool keep_alive_ = false;
  unsigned version_ = 11;
  bool watch_pending_ = false;
  std::optional<http::request_parser<http::string_body>> parser_;
  BodyBudget::Lease body_lease_;  // the body being read; handed to its Exchange
  std::function<void(uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  std::shared_ptr<Exchange> current_;
  std::unique_ptr<http::response<http::string_body>> response_;
  std::unique_ptr<http::response<http::empty_body>> stream_header_;
  std::unique_ptr<http::response_serializer<http::empty_body>> stream_serializer_;
  bool stream_chunked_ = true;
  bool stream_header_done_ = false;
  bool stream_writing_ = false;
  bool stream_finishing_ = false;
  std::string stream_chunk_;
  bool lingering_ = false;
  size_t lingered_bytes_ = 0;
  // Bytes of the current exchange's answer (status line onwards) were handed to the socket: an
  // error found later can only close the connection.
  bool wire_started_ = false;
  bool failing_ = false;  // OnException is answering with a 500: a second throw closes

  DirectAnswer direct_;  // closed by DoClose before the socket
  std::string rest_;     // on the strand: what a direct write left, being written
};

// ---------------------------------------------------------------------------------------------
// HttpStreamConnection

template <class Stream>
template <class... StreamArgs>
HttpStreamConnection<Stream>::HttpStreamConnection(ServerCore* core, uint64_t id, std::string peer,
                                                   StreamArgs&&... stream_args)
    : stream_(std::forward<StreamArgs>(stream_args)...),
      core_(core),
      options_(core->options()),
      id_(id),
      peer_(std::move(peer)) {}

template <class Stream>
template <class Step>
void HttpStreamConnection<Stream>::Safely(const char* what, Step&& step) noexcept {
  try {
    step();
  } catch (const std::exception& e) {
    OnException(what, e.what());
  } catch (...) {
    OnException(what, "an exception of unknown type");
  }
}

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
void HttpStreamConnection<Stream>::PostSend(HttpResponse response) {
  net::post(stream_.get_executor(),
            [self = this->shared_from_this(), response = std::move(response)]() mutable {
              self->Safely("writing a response", [&] {
                if (self->closed_ || self->current_ == nullptr) return;
                self->WriteResponse(std::move(response));
              });
            });
}

template <class Stream>
void HttpStreamConnection<Stream>::PostStartStream(int status, std::string content_type,
                                                   HttpHeaders headers) {
  net::post(stream_.get_executor(),
            [self = this->shared_from_this(), status, content_type = std::move(content_type),
             headers = std::move(headers)] {
              self->Safely("starting a stream", [&] {
                if (self->closed_ || self->current_ == nullptr) return;
                self->WriteStreamHeader(status, content_type, headers);
              });
            });
}

template <class Stream>
void HttpStreamConnection<Stream>::PostPump() {
  net::post(stream_.get_executor(), [self = this->shared_from_this()] {
    self->Safely("writing a stream", [&] {
      if (self->closed_ || self->current_ == nullptr) return;
      self->Pump();
    });
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
  // A transfer coding other than chunked leaves the body's length unknown (RFC 9112 6.3): the
  // rest of the bytes could be taken for another request.
  if (request.find(http::field::transfer_encoding) != request.end() && !parser_->chunked()) {
    SendError(400, "malformed HTTP request: only the chunked Transfer-Encoding is supported",
              /*close=*/true);
    return;
  }
  if (!parser_->is_done()) {
    // Judged before a body byte is read (http_server.h): a refused peer's body is never held.
    version_ = request.version();
    absl::StatusOr<HttpRequest> head = RequestHead(request, peer_);
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
  wire_started_ = false;
  failing_ = false;
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  keep_alive_ = message.keep_alive();
  version_ = message.version();

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
void HttpStreamConnection<Stream>::AllowDirect(bool allow) {
  if constexpr (kTls) return;  // the TLS stream's state belongs to the strand
  // Only the watch can end a directly answered exchange, so not with a pipelined request
  // already read (it would wait for the client, who waits for its answer), and not when the
  // connection closes after the answer.
  direct_.Allow(allow && keep_alive_ && !closed_ && buffer_.size() == 0);
}

template <class Stream>
void HttpStreamConnection<Stream>::ArmWatch() {
  if (watch_pending_ || closed_) return;
  watch_pending_ = true;
  Lowest().socket().async_wait(
      tcp::socket::wait_read, [self = this->shared_from_this()](beast::error_code ec) {
        self->Safely("watching the connection", [&] { self->OnWatch(ec); });
      });
}

template <class Stream>
void HttpStreamConnection<Stream>::OnWatch(beast::error_code ec) {
  watch_pending_ = false;
  const bool sent = direct_.TakeSent();
  if (closed_) return;
  if (sent) {
    // Answered directly; the client has sent its next request, or closed: on to either.
    EndExchange();
    return;
  }
  if (ec == net::error::operation_aborted) return;
  if (current_ == nullptr) return;  // between requests: the reader notices a close itself
  if (ec) {
    DoClose();
    return;
  }
  char byte;
  beast::error_code peek_ec;
  const size_t n =
      Lowest().socket().receive(net::buffer(&byte, 1), tcp::socket::message_peek, peek_ec);
  if (peek_ec == net::error::would_block || peek_ec == net::error::try_again) {
    AllowDirect(current_->pending());
    ArmWatch();
  } else if (peek_ec || n == 0) {
    DoClose();  // EOF or reset: the client is gone
  }
  // Otherwise the client sent more (a pipelined request); it is read after this exchange.
}

template <class Stream>
void HttpStreamConnection<Stream>::SendError(int status, const std::string& message, bool close) {
  if (close) keep_alive_ = false;
  current_ = std::make_shared<Exchange>(this->shared_from_this(), options_.max_stream_buffer_bytes);
  HttpResponder(current_).Send(HttpResponse::Error(status, message));
}

template <class Stream>
void HttpStreamConnection<Stream>::Refuse(HttpResponse response) {
  keep_alive_ = false;
  current_ = std::make_shared<Exchange>(this->shared_from_this(), options_.max_stream_buffer_bytes);
  HttpResponder(current_).Send(std::move(response));
}

template <class Stream>
bool HttpStreamConnection<Stream>::TrySend(HttpResponse& response) {
  if constexpr (kTls) {
    return false;
  } else {
    const DirectAnswer::Result result = direct_.TrySend([&] {
      // Under the direct answer's lock: version_ and keep_alive_ were set before Allow, and the
      // strand leaves them be until the exchange ends.
      http::response<http::string_body> message =
          ResponseMessage(std::move(response), version_, keep_alive_, options_.server_header);
      return WireBytes(message);
    });
    if (result == DirectAnswer::Result::kPartial) {
      net::post(stream_.get_executor(), [self = this->shared_from_this()] {
        self->Safely("writing a response", [&] { self->WriteRest(); });
      });
    }
    return result != DirectAnswer::Result::kNotAllowed;
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::WriteRest() {
  rest_ = direct_.TakeRest();
  if (closed_) return;
  wire_started_ = true;
  Lowest().expires_after(options_.write_timeout);
  net::async_write(stream_, net::buffer(rest_),
                   [self = this->shared_from_this()](beast::error_code ec, size_t) {
                     self->Safely("writing a response", [&] {
                       self->rest_.clear();
                       self->OnWritten(ec);
                     });
                   });
}

template <class Stream>
void HttpStreamConnection<Stream>::SweepIdle(std::chrono::steady_clock::time_point now) {
  const auto sent_at = direct_.IdleSince(now, options_.idle_timeout);
  if (!sent_at.has_value()) return;
  net::post(stream_.get_executor(), [self = this->shared_from_this(), at = *sent_at] {
    // Still idle after that same answer (a new one needs a new request, read on the strand).
    self->Safely("closing an idle connection", [&] {
      if (self->direct_.StillIdleAfter(at)) self->DoClose();
    });
  });
}

template <class Stream>
void HttpStreamConnection<Stream>::WriteResponse(HttpResponse response) {
  response_ = std::make_unique<http::response<http::string_body>>(
      ResponseMessage(std::move(response), version_, keep_alive_, options_.server_header));
  Lowest().expires_after(options_.write_timeout);
  wire_started_ = true;
  http::async_write(stream_, *response_,
                    [self = this->shared_from_this()](beast::error_code ec, size_t) {
                      self->Safely("writing a response", [&] { self->OnWritten(ec); });
                    });
}

template <class Stream>
void HttpStreamConnection<Stream>::OnWritten(beast::error_code ec) {
  response_.reset();
  if (ec) {
    DoClose();
    return;
  }
  EndExchange();
}

template <class Stream>
void HttpStreamConnection<Stream>::EndExchange() {
  if (current_ != nullptr) current_->MarkDone();
  current_.reset();
  wire_started_ = false;
  failing_ = false;
  if (keep_alive_) {
    ReadNext();
  } else {
    Linger();
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::WriteStreamHeader(int status, const std::string& content_type,
                                                     const HttpHeaders& headers) {
  stream_header_ = std::make_unique<http::response<http::empty_body>>();
  stream_header_->version(version_);
  stream_header_->result(static_cast<unsigned>(status));
  stream_header_->reason(StatusReason(status));
  stream_header_->set(http::field::server, options_.server_header);
  stream_header_->set(http::field::content_type, SafeContentType(content_type));
  bool has_cache_control = false;
  for (const auto& [name, value] : headers) {
    if (!AcceptableHeader(name, value)) continue;
    has_cache_control = has_cache_control || absl::EqualsIgnoreCase(name, "cache-control");
    stream_header_->insert(name, value);
  }
  if (!has_cache_control) stream_header_->set(http::field::cache_control, "no-cache");
  // HTTP/1.0 has no chunked encoding: the body then ends when the connection closes.
  stream_chunked_ = version_ >= 11;
  if (!stream_chunked_) keep_alive_ = false;
  stream_header_->keep_alive(keep_alive_);
  if (stream_chunked_) stream_header_->chunked(true);
  stream_serializer_ =
      std::make_unique<http::response_serializer<http::empty_body>>(*stream_header_);
  stream_header_done_ = false;
  stream_finishing_ = false;
  stream_writing_ = true;
  Lowest().expires_after(options_.write_timeout);
  wire_started_ = true;
  http::async_write_header(stream_, *stream_serializer_,
                           [self = this->shared_from_this()](beast::error_code ec, size_t) {
                             self->Safely("starting a stream", [&] {
                               self->stream_writing_ = false;
                               if (ec) {
                                 self->DoClose();
                                 return;
                               }
                               self->stream_header_done_ = true;
                               self->Pump();
                             });
                           });
}

template <class Stream>
void HttpStreamConnection<Stream>::Pump() {
  if (closed_ || current_ == nullptr || !stream_header_done_ || stream_writing_) return;
  bool finish = false;
  stream_chunk_ = current_->TakePending(&finish);
  auto on_write = [self = this->shared_from_this()](beast::error_code ec, size_t) {
    self->Safely("writing a stream", [&] { self->OnStreamWrite(ec); });
  };
  if (!stream_chunk_.empty()) {
    stream_writing_ = true;
    Lowest().expires_after(options_.write_timeout);
    if (stream_chunked_) {
      net::async_write(stream_, http::make_chunk(net::buffer(stream_chunk_)), std::move(on_write));
    } else {
      net::async_write(stream_, net::buffer(stream_chunk_), std::move(on_write));
    }
  } else if (finish) {
    stream_writing_ = true;
    stream_finishing_ = true;
    if (stream_chunked_) {
      Lowest().expires_after(options_.write_timeout);
      net::async_write(stream_, http::make_chunk_last(), std::move(on_write));
    } else {
      OnStreamWrite({});
    }
  }
}

template <class Stream>
void HttpStreamConnection<Stream>::OnStreamWrite(beast::error_code ec) {
  stream_writing_ = false;
  if (ec) {
    DoClose();
    return;
  }
  if (!stream_finishing_) {
    Pump();
    return;
  }
  stream_serializer_.reset();
  stream_header_.reset();
  stream_header_done_ = false;
  stream_finishing_ = false;
  EndExchange();
}

// Half-closes, then drains what the client still sends for a moment before closing, so that a
// client still uploading (e.g. after a 413) reads our response instead of a reset.
template <class Stream>
void HttpStreamConnection<Stream>::Linger() {
  if (closed_) return;
  if constexpr (kTls) {
    // TLS: send close_notify (the end of a body delimited by the close must be authenticated)
    // and wait briefly for the client's; the connection is closed either way.
    Lowest().expires_after(kLingerTimeout);
    stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
      self->Safely("closing", [&] { self->DoClose(); });
    });
    return;
  }
  beast::error_code ec;
  if (!lingering_) {
    lingering_ = true;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
  }
  if (ec || lingered_bytes_ >= kMaxLingerBytes) {
    DoClose();
    return;
  }
  buffer_.consume(buffer_.size());
  Lowest().expires_after(kLingerTimeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                            self->Safely("closing", [&] {
                              if (ec) {
                                self->DoClose();
                                return;
                              }
                              self->lingered_bytes_ += n;
                              self->Linger();
                            });
                          });
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

}  // namespace tandem::http_internal
