// Internals of HttpServer (common/http_server.h): the per-request Exchange shared between a
// connection and the handler's responder/stream, the per-connection Session, and the ServerCore
// owning the io_context, the listener and the routes. Only http_*.cc include this.
//
// Ownership: a Session is kept alive by its pending asynchronous operations and by its current
// Exchange (Exchange::session_), which it drops when the exchange ends (done or closed). The
// session holds its current exchange; handlers hold exchanges through HttpResponder/HttpStream.
// All Session members are used on the session's strand only. Exchange is thread-safe.
#ifndef TANDEM_COMMON_HTTP_SESSION_H_
#define TANDEM_COMMON_HTTP_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "common/http_server.h"

namespace tandem::http_internal {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;

class Session;
class ServerCore;

// One request's answer, from the handler's side to the connection's side.
//   kPending --Send--> kResponding --(written)--> kDone
//   kPending --StartStream--> kStreaming --Finish, (last chunk written)--> kDone
//   any state but kDone --(client gone, too slow, server stopping)--> kClosed
class Exchange {
 public:
  enum class State { kPending, kResponding, kStreaming, kDone, kClosed };

  Exchange(std::shared_ptr<Session> session, size_t max_buffer_bytes);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Handler side (any thread). Each returns false when the exchange is not in a state that
  // accepts the call (already answered, closed, finished).
  bool Send(HttpResponse response) ABSL_LOCKS_EXCLUDED(mu_);
  bool StartStream(int status, const std::string& content_type, const HttpHeaders& headers)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Write(std::string data) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);
  // True once a whole response was handed over (Send); the client can no longer be "gone"
  // in a way the handler could act on.
  bool answered() const ABSL_LOCKS_EXCLUDED(mu_);
  void SetOnClose(std::function<void()> callback) ABSL_LOCKS_EXCLUDED(mu_);

  // Session side (its strand).
  // The queued body data; *finish is true when Finish was called and nothing is left.
  std::string TakePending(bool* finish) ABSL_LOCKS_EXCLUDED(mu_);
  void MarkDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the close callback (once) on the calling thread.
  void MarkClosed() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Asks the session to write what is queued, unless it has been asked already.
  void SchedulePumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_buffer_bytes_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kPending;
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);  // null once done or closed
  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool pump_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_close_ ABSL_GUARDED_BY(mu_);
};

// One client connection.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerCore* core, uint64_t id, std::string peer);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  uint64_t id() const { return id_; }
  void Start();
  // Closes the connection from any thread (posted to the strand).
  void PostClose();
  // Called by the current Exchange (any thread); the work runs on the strand. An exchange can
  // only reach its session while it is the current one (it drops the session when it ends).
  void PostSend(HttpResponse response);
  void PostStartStream(int status, std::string content_type, HttpHeaders headers);
  void PostPump();

 private:
  void ReadNext();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnReadError(beast::error_code ec);
  void OnRequest();
  void ArmWatch();
  void OnWatch(beast::error_code ec);
  void SendError(int status, const std::string& message, bool close);
  void WriteResponse(HttpResponse response);
  void OnWritten(beast::error_code ec);
  void WriteStreamHeader(int status, const std::string& content_type, const HttpHeaders& headers);
  void Pump();
  void OnStreamWrite(beast::error_code ec);
  void EndExchange();
  void Linger();
  void DoClose();

  beast::tcp_stream stream_;
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
};

// The io_context, listener, routes and live sessions of one HttpServer.
class ServerCore {
 public:
  explicit ServerCore(HttpServerOptions options);
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  const HttpServerOptions& options() const { return options_; }
  net::io_context& io_context() { return ioc_; }

  void Handle(const std::string& method, const std::string& path, HttpHandler handler);
  // Binds and listens; returns the bound port.
  absl::StatusOr<uint16_t> Listen();
  void StartAccepting();
  // Runs the io_context on the calling thread until it has no more work.
  void Run();
  // Closes the listener and every session; lets Run() return once they are gone.
  void Shutdown();

  // Routes a complete request (on the session's strand).
  void Dispatch(HttpRequest request, HttpResponder responder) const;
  void RemoveSession(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);

  const HttpServerOptions options_;
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  net::strand<net::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_retry_;
  bool stopping_ = false;  // on accept_strand_
  // path -> method -> handler; written only before Start().
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;

  absl::Mutex mu_;
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_SESSION_H_
