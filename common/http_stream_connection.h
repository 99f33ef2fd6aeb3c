// HttpStreamConnection: the per-connection half of HttpServer, one template over the stream type
// (plain beast::tcp_stream or TLS over it) that reads requests, hands each to ServerCore::Dispatch
// with an Exchange, and writes the answer (whole, or chunked as the handler streams it) on the
// connection's strand, or lets the answering thread write a whole answer itself (DirectAnswer,
// http_direct_answer.h). Its members are defined in two files, each instantiating them for both
// streams: http_session.cc reads requests and runs the connection's life (start, TLS handshake,
// close; MakeHttpConnection picks the stream), http_session_answer.cc writes the answers
// (whole, direct or streamed), watches for a disconnect and lingers before closing. Exchange is
// in http_exchange.cc. Internal to common/.
#ifndef TANDEM_COMMON_HTTP_STREAM_CONNECTION_H_
#define TANDEM_COMMON_HTTP_STREAM_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "boost/beast/ssl.hpp"
#include "common/http_direct_answer.h"
#include "common/http_session.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {

// Bytes asked of the socket per read (a request head, or what a lingering close drains).
inline constexpr size_t kReadChunk = 16 << 10;

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
  std::optional<std::chrono::steady_clock::time_point> WaitingSince(
      std::chrono::steady_clock::time_point now) const override;
  void PostEvict() override;

 private:
  using Clock = std::chrono::steady_clock;
  // Strand: the connection waits for a request from now on (`waiting`), or one is with the
  // handler or being answered.
  void SetWaiting(bool waiting) {
    waiting_since_.store(waiting ? Clock::now().time_since_epoch().count() : kBusy,
                         std::memory_order_relaxed);
  }

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
  bool head_only_ = false;    // the request is a HEAD: its answer is the header, without the body
  std::string allow_origin_;  // the request's Access-Control-Allow-Origin (ServerCore::AllowOrigin)
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

  // WaitingSince: the steady clock's ticks when the connection began waiting for its next
  // request, or kBusy. Written on the strand, read by ServerCore's accept strand.
  static constexpr Clock::rep kBusy = std::numeric_limits<Clock::rep>::min();
  std::atomic<Clock::rep> waiting_since_{Clock::now().time_since_epoch().count()};

  DirectAnswer direct_;  // closed by DoClose before the socket
  std::string rest_;     // on the strand: what a direct write left, being written
};

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

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_STREAM_CONNECTION_H_
