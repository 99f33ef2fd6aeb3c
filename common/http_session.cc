#include "common/http_session.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {
namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr std::chrono::milliseconds kLingerTimeout{500};
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

std::string ToString(beast::string_view view) { return std::string(view.data(), view.size()); }

bool HasLineBreak(const std::string& text) {
  return text.find_first_of("\r\n") != std::string::npos;
}

// Whether a handler-supplied header may be sent: the server owns framing headers, and a line
// break (e.g. from echoed peer input) would let a value inject headers or split the response.
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Exchange

Exchange::Exchange(std::shared_ptr<Session> session, size_t max_buffer_bytes)
    : max_buffer_bytes_(max_buffer_bytes), session_(std::move(session)) {}

bool Exchange::Send(HttpResponse response) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kPending || session_ == nullptr) return false;
  state_ = State::kResponding;
  session_->PostSend(std::move(response));
  return true;
}

bool Exchange::StartStream(int status, const std::string& content_type,
                           const HttpHeaders& headers) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kPending || session_ == nullptr) return false;
  state_ = State::kStreaming;
  session_->PostStartStream(status, content_type, headers);
  return true;
}

bool Exchange::Write(std::string data) {
  std::shared_ptr<Session> to_close;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kStreaming || finish_requested_ || overflowed_ || session_ == nullptr) {
      return false;
    }
    if (data.empty()) return true;
    if (pending_.size() + data.size() > max_buffer_bytes_) {
      overflowed_ = true;
      to_close = session_;
    } else {
      if (pending_.empty()) {
        pending_ = std::move(data);
      } else {
        pending_ += data;
      }
      SchedulePumpLocked();
      return true;
    }
  }
  spdlog::warn("http: client too slow, more than {} bytes of stream pending; closing",
               max_buffer_bytes_);
  to_close->PostClose();
  return false;
}

void Exchange::Finish() {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kStreaming || finish_requested_ || session_ == nullptr) return;
  finish_requested_ = true;
  SchedulePumpLocked();
}

void Exchange::SchedulePumpLocked() {
  if (pump_scheduled_) return;
  pump_scheduled_ = true;
  session_->PostPump();
}

bool Exchange::closed() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kClosed || overflowed_;
}

bool Exchange::answered() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kResponding || state_ == State::kDone;
}

void Exchange::SetOnClose(std::function<void()> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kClosed) {
      if (state_ != State::kDone) on_close_ = std::move(callback);
      return;
    }
  }
  if (callback) callback();
}

std::string Exchange::TakePending(bool* finish) {
  absl::MutexLock lock(&mu_);
  pump_scheduled_ = false;
  std::string data = std::move(pending_);
  pending_.clear();
  *finish = finish_requested_ && data.empty();
  return data;
}

void Exchange::MarkDone() {
  std::shared_ptr<Session> session;  // released outside the lock
  absl::MutexLock lock(&mu_);
  if (state_ == State::kClosed) return;
  state_ = State::kDone;
  session = std::move(session_);
  on_close_ = nullptr;
}

void Exchange::MarkClosed() {
  std::function<void()> callback;
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kDone || state_ == State::kClosed) return;
    state_ = State::kClosed;
    session = std::move(session_);
    callback = std::move(on_close_);
    on_close_ = nullptr;
  }
  if (callback) {
    try {
      callback();
    } catch (const std::exception& e) {
      spdlog::error("http: close callback threw: {}", e.what());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Session

Session::Session(tcp::socket socket, ServerCore* core, uint64_t id, std::string peer)
    : stream_(std::move(socket)),
      core_(core),
      options_(core->options()),
      id_(id),
      peer_(std::move(peer)) {}

void Session::Start() {
  beast::error_code ec;
  // The disconnect watch peeks without blocking.
  stream_.socket().non_blocking(true, ec);
  stream_.socket().set_option(tcp::no_delay(true), ec);
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadNext(); });
}

void Session::PostClose() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->DoClose(); });
}

void Session::PostSend(HttpResponse response) {
  net::post(stream_.get_executor(),
            [self = shared_from_this(), response = std::move(response)]() mutable {
              if (self->closed_ || self->current_ == nullptr) return;
              self->WriteResponse(std::move(response));
            });
}

void Session::PostStartStream(int status, std::string content_type, HttpHeaders headers) {
  net::post(stream_.get_executor(),
            [self = shared_from_this(), status, content_type = std::move(content_type),
             headers = std::move(headers)] {
              if (self->closed_ || self->current_ == nullptr) return;
              self->WriteStreamHeader(status, content_type, headers);
            });
}

void Session::PostPump() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->closed_ || self->current_ == nullptr) return;
    self->Pump();
  });
}

void Session::ReadNext() {
  if (closed_) return;
  if (buffer_.size() > 0) {  // a pipelined request is already here
    ReadHeader();
    return;
  }
  stream_.expires_after(options_.idle_timeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (ec) {
                              self->DoClose();
                              return;
                            }
                            self->buffer_.commit(n);
                            self->ReadHeader();
                          });
}

void Session::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
  parser_->body_limit(options_.max_body_bytes);
  stream_.expires_after(options_.read_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(beast::error_code ec) {
  if (ec) {
    OnReadError(ec);
    return;
  }
  const auto& request = parser_->get();
  const auto expect = request.find(http::field::expect);
  if (expect != request.end() &&
      absl::EqualsIgnoreCase(ToString(expect->value()), "100-continue") && !parser_->is_done()) {
    stream_.expires_after(options_.write_timeout);
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) {
                         self->DoClose();
                         return;
                       }
                       self->stream_.expires_after(self->options_.read_timeout);
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  if (parser_->is_done()) {
    OnRequest();
    return;
  }
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (ec) {
                       self->OnReadError(ec);
                       return;
                     }
                     self->OnRequest();
                   });
}

void Session::OnReadError(beast::error_code ec) {
  if (ec == http::error::body_limit) {
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
             ec == net::error::connection_reset || ec == http::error::partial_message) {
    DoClose();  // the client left or stalled: nobody to answer
  } else {
    SendError(400, absl::StrCat("malformed HTTP request: ", ec.message()), /*close=*/true);
  }
}

void Session::OnRequest() {
  stream_.expires_never();
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  keep_alive_ = message.keep_alive();
  version_ = message.version();

  HttpRequest request;
  request.method = ToString(message.method_string());
  request.target = ToString(message.target());
  request.version = static_cast<int>(version_);
  request.peer = peer_;
  for (const auto& field : message) {
    request.headers.emplace_back(ToString(field.name_string()), ToString(field.value()));
  }
  request.body = std::move(message.body());

  current_ = std::make_shared<Exchange>(shared_from_this(), options_.max_stream_buffer_bytes);
  HttpResponder responder(current_);
  if (request.target.empty() || request.target[0] != '/') {
    responder.Send(HttpResponse::Error(400, "request target must be an absolute path"));
    return;
  }
  const size_t question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) {
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> query =
        ParseQuery(request.target.substr(question + 1));
    if (!query.ok()) {
      responder.Send(HttpResponse::Error(400, std::string(query.status().message())));
      return;
    }
    request.query = *std::move(query);
  }
  std::shared_ptr<Exchange> exchange = current_;
  core_->Dispatch(std::move(request), std::move(responder));
  // Watch for a disconnect only while someone may still act on it: most requests are answered
  // inside the handler, and arming the watch costs system calls.
  if (!exchange->answered()) ArmWatch();
}

void Session::ArmWatch() {
  if (watch_pending_ || closed_) return;
  watch_pending_ = true;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      [self = shared_from_this()](beast::error_code ec) { self->OnWatch(ec); });
}

void Session::OnWatch(beast::error_code ec) {
  watch_pending_ = false;
  if (closed_ || ec == net::error::operation_aborted) return;
  if (current_ == nullptr) return;  // between requests: the reader notices a close itself
  if (ec) {
    DoClose();
    return;
  }
  char byte;
  beast::error_code peek_ec;
  const size_t n =
      stream_.socket().receive(net::buffer(&byte, 1), tcp::socket::message_peek, peek_ec);
  if (peek_ec == net::error::would_block || peek_ec == net::error::try_again) {
    ArmWatch();
  } else if (peek_ec || n == 0) {
    DoClose();  // EOF or reset: the client is gone
  }
  // Otherwise the client sent more (a pipelined request); it is read after this exchange.
}

void Session::SendError(int status, const std::string& message, bool close) {
  if (close) keep_alive_ = false;
  current_ = std::make_shared<Exchange>(shared_from_this(), options_.max_stream_buffer_bytes);
  HttpResponder(current_).Send(HttpResponse::Error(status, message));
}

void Session::WriteResponse(HttpResponse response) {
  response_ = std::make_unique<http::response<http::string_body>>();
  response_->version(version_);
  response_->result(static_cast<unsigned>(response.status));
  response_->reason(StatusReason(response.status));
  response_->set(http::field::server, options_.server_header);
  response_->set(http::field::content_type, SafeContentType(response.content_type));
  for (const auto& [name, value] : response.headers) {
    if (AcceptableHeader(name, value)) response_->insert(name, value);
  }
  response_->body() = std::move(response.body);
  response_->keep_alive(keep_alive_);
  response_->prepare_payload();
  stream_.expires_after(options_.write_timeout);
  http::async_write(stream_, *response_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnWritten(ec);
  });
}

void Session::OnWritten(beast::error_code ec) {
  response_.reset();
  if (ec) {
    DoClose();
    return;
  }
  EndExchange();
}

void Session::EndExchange() {
  if (current_ != nullptr) current_->MarkDone();
  current_.reset();
  if (keep_alive_) {
    ReadNext();
  } else {
    Linger();
  }
}

void Session::WriteStreamHeader(int status, const std::string& content_type,
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
  stream_.expires_after(options_.write_timeout);
  http::async_write_header(stream_, *stream_serializer_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->stream_writing_ = false;
                             if (ec) {
                               self->DoClose();
                               return;
                             }
                             self->stream_header_done_ = true;
                             self->Pump();
                           });
}

void Session::Pump() {
  if (closed_ || current_ == nullptr || !stream_header_done_ || stream_writing_) return;
  bool finish = false;
  stream_chunk_ = current_->TakePending(&finish);
  auto on_write = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnStreamWrite(ec);
  };
  if (!stream_chunk_.empty()) {
    stream_writing_ = true;
    stream_.expires_after(options_.write_timeout);
    if (stream_chunked_) {
      net::async_write(stream_, http::make_chunk(net::buffer(stream_chunk_)), std::move(on_write));
    } else {
      net::async_write(stream_, net::buffer(stream_chunk_), std::move(on_write));
    }
  } else if (finish) {
    stream_writing_ = true;
    stream_finishing_ = true;
    if (stream_chunked_) {
      stream_.expires_after(options_.write_timeout);
      net::async_write(stream_, http::make_chunk_last(), std::move(on_write));
    } else {
      OnStreamWrite({});
    }
  }
}

void Session::OnStreamWrite(beast::error_code ec) {
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
void Session::Linger() {
  if (closed_) return;
  beast::error_code ec;
  if (!lingering_) {
    lingering_ = true;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
  if (ec || lingered_bytes_ >= kMaxLingerBytes) {
    DoClose();
    return;
  }
  buffer_.consume(buffer_.size());
  stream_.expires_after(kLingerTimeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (ec) {
                              self->DoClose();
                              return;
                            }
                            self->lingered_bytes_ += n;
                            self->Linger();
                          });
}

void Session::DoClose() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
  if (current_ != nullptr) {
    std::shared_ptr<Exchange> exchange = std::move(current_);
    exchange->MarkClosed();
  }
  core_->RemoveSession(id_);
}

}  // namespace tandem::http_internal
