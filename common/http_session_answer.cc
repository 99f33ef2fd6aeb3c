// HttpStreamConnection's answering half (http_stream_connection.h): whole answers written on the
// strand or directly by the answering thread, streamed (chunked) answers pumped from the
// Exchange, the disconnect watch, and the lingering close that lets a client still uploading
// read its answer.
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "common/http_response_wire.h"
#include "common/http_stream_connection.h"

namespace tandem::http_internal {
namespace {

constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr std::chrono::milliseconds kLingerTimeout{500};

}  // namespace

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
      // Under the direct answer's lock: version_, keep_alive_, head_only_ and allow_origin_ were
      // set before Allow, and the strand leaves them be until the exchange ends.
      http::response<http::string_body> message =
          ResponseMessage(std::move(response), version_, keep_alive_, head_only_, allow_origin_,
                          options_.server_header);
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
std::optional<std::chrono::steady_clock::time_point> HttpStreamConnection<Stream>::WaitingSince(
    Clock::time_point now) const {
  const Clock::rep since = waiting_since_.load(std::memory_order_relaxed);
  if (since != kBusy) return Clock::time_point(Clock::duration(since));
  // Answered directly: the strand learns of it only with the client's next bytes.
  return direct_.IdleSince(now, Clock::duration::zero());
}

template <class Stream>
void HttpStreamConnection<Stream>::PostEvict() {
  net::post(stream_.get_executor(), [self = this->shared_from_this()] {
    self->Safely("closing a connection to make room", [&] {
      // A request may have reached the handler since the connection was chosen: it stays.
      if (self->WaitingSince(Clock::now()).has_value()) self->DoClose();
    });
  });
}

template <class Stream>
void HttpStreamConnection<Stream>::WriteResponse(HttpResponse response) {
  response_ = std::make_unique<http::response<http::string_body>>(
      ResponseMessage(std::move(response), version_, keep_alive_, head_only_, allow_origin_,
                      options_.server_header));
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
  SetWaiting(true);
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
  AddCorsHeaders(allow_origin_, stream_header_.get());
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
  if (head_only_) {
    // A HEAD's answer ends with its header: what the handler streams is dropped.
    while (!stream_chunk_.empty()) stream_chunk_ = current_->TakePending(&finish);
    if (finish) {
      stream_writing_ = true;
      stream_finishing_ = true;
      OnStreamWrite({});
    }
    return;
  }
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

// Every member defined above, for both streams (the other half is in http_session.cc).
template class HttpStreamConnection<beast::tcp_stream>;
template class HttpStreamConnection<beast::ssl_stream<beast::tcp_stream>>;

}  // namespace tandem::http_internal
