// Internals of HttpServer (common/http_server.h): the per-request Exchange shared between a
// connection and the handler's responder/stream (http_exchange.cc), the per-connection
// HttpConnection (http_stream_connection.h), and the ServerCore owning the io_context, the listener
// and the routes (http_server.cc). Only http_*.cc include this.
//
// Ownership: an HttpConnection is kept alive by its pending asynchronous operations and by its
// current Exchange (Exchange::session_), which it drops when the exchange ends (done or closed).
// The session holds its current exchange; handlers hold exchanges through HttpResponder/HttpStream.
// All HttpConnection members are used on the session's strand only. Exchange is thread-safe.
#ifndef TANDEM_COMMON_HTTP_SESSION_H_
#define TANDEM_COMMON_HTTP_SESSION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "common/http_body_budget.h"
#include "common/http_server.h"
#include "common/log_every.h"

namespace tandem::http_internal {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;

class HttpConnection;
class ServerCore;

// One request's answer, from the handler's side to the connection's side.
//   kPending --Send--> kResponding --(written)--> kDone
//   kPending --Send, written by the sender (HttpConnection::TrySend)--> kDone
//   kPending --StartStream--> kStreaming --Finish, (last chunk written)--> kDone
//   any state but kDone --(client gone, too slow, server stopping)--> kClosed
class Exchange {
 public:
  enum class State { kPending, kResponding, kStreaming, kDone, kClosed };

  // `body_lease`: the request body's share of the server's BodyBudget, held until the handler
  // has answered (Send, or Finish of a stream) or the exchange is gone: until then the handler,
  // or whatever it handed the request to, may still hold the body. (A client that leaves does
  // not return it: a queued job may still hold its body.)
  Exchange(std::shared_ptr<HttpConnection> session, size_t max_buffer_bytes,
           BodyBudget::Lease body_lease = {});
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
  // True until the handler answers (Send) or starts a stream, and the exchange is not closed.
  bool pending() const ABSL_LOCKS_EXCLUDED(mu_);
  void SetOnClose(std::function<void()> callback) ABSL_LOCKS_EXCLUDED(mu_);

  // HttpConnection side (its strand).
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
  BodyBudget::Lease body_lease_ ABSL_GUARDED_BY(mu_);
  State state_ ABSL_GUARDED_BY(mu_) = State::kPending;
  std::shared_ptr<HttpConnection> session_ ABSL_GUARDED_BY(mu_);  // null once done or closed
  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool pump_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_close_ ABSL_GUARDED_BY(mu_);
};

// One client connection, over plain TCP or TLS (MakeHttpConnection picks; the HTTP logic is one
// template over the stream type, in http_stream_connection.h). The Post* calls come from the
// current Exchange (any thread); the work runs on the connection's strand. An exchange can only
// reach its session while it is the current one (it drops the session when it ends).
//
// Direct answers: a whole response sent from another thread while the connection waits for it
// is written to the socket by that thread (TrySend), instead of being posted to the strand and
// written there: that saves waking an I/O thread for every deferred answer (the router's every
// answer). It applies to a plain keep-alive connection whose disconnect watch is armed, i.e.
// nothing else is reading or writing it; the watch's completion (the client's next request or
// its close) then ends the exchange on the strand, and ServerCore's idle sweep closes a
// connection left idle after a direct answer, as idle_timeout does for the others.
class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  virtual void Start() = 0;
  // Closes the connection from any thread (posted to the strand).
  virtual void PostClose() = 0;
  // Any thread, under the exchange's lock: writes `response` to the socket now if the connection
  // is waiting for it (see "Direct answers"). True when the response was taken: written whole,
  // or what the socket did not take handed to the strand; the exchange is then answered. False
  // (nothing taken, `response` untouched): PostSend it.
  virtual bool TrySend(HttpResponse& response) = 0;
  virtual void PostSend(HttpResponse response) = 0;
  virtual void PostStartStream(int status, std::string content_type, HttpHeaders headers) = 0;
  virtual void PostPump() = 0;
  // Any thread: closes the connection (on its strand) if it has sat idle for at least
  // `idle_timeout` after a direct answer.
  virtual void SweepIdle(std::chrono::steady_clock::time_point now) = 0;
  // Any thread: since when the connection has waited for its next request (from its accept or
  // its last answer, through any part of the request that has arrived), or nullopt while a
  // request is with a handler or being answered. ServerCore evicts the one that has waited
  // longest to make room at the connection cap.
  virtual std::optional<std::chrono::steady_clock::time_point> WaitingSince(
      std::chrono::steady_clock::time_point now) const = 0;
  // Any thread: closes the connection (on its strand) if it is still waiting for a request then.
  virtual void PostEvict() = 0;
};

// A session for an accepted connection: TLS (server side; the handshake runs first, bounded by
// read_timeout) when `tls` is non-null, plain HTTP otherwise. `core` and `tls` are borrowed and
// outlive every session.
std::shared_ptr<HttpConnection> MakeHttpConnection(tcp::socket socket, ServerCore* core,
                                                   uint64_t id, std::string peer,
                                                   net::ssl::context* tls);

// The io_context, listener, routes and live sessions of one HttpServer.
class ServerCore {
 public:
  explicit ServerCore(HttpServerOptions options);
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  const HttpServerOptions& options() const { return options_; }
  BodyBudget& body_budget() { return body_budget_; }
  const BodyBudget& body_budget() const { return body_budget_; }
  net::io_context& io_context() { return ioc_; }

  void Handle(const std::string& method, const std::string& path, HttpHandler handler,
              HttpHeadCheck head_check);
  // Loads the TLS files if any (errors name the file), binds and listens; returns the bound port.
  absl::StatusOr<uint16_t> Listen();
  void StartAccepting();
  // Runs the io_context on the calling thread until it has no more work.
  void Run();
  // Closes the listener and every session; lets Run() return once they are gone.
  void Shutdown();

  // Marks `path` as not for cross-origin use (HttpServer::KeepSameOrigin); before Listen().
  void KeepSameOrigin(const std::string& path);
  // The Access-Control-Allow-Origin value the answer to `head` carries; "" for none (CORS off,
  // a same-origin path, no Origin or one not allowed).
  std::string AllowOrigin(const HttpRequest& head) const;

  // Routes a complete request (on the session's strand).
  void Dispatch(HttpRequest request, HttpResponder responder) const;
  // The answer a request gets from its head alone, before its body is read (see HttpHeadCheck):
  // 404, 405 or the route's head check's refusal; nullopt when the body should be read.
  std::optional<HttpResponse> RefuseHead(const HttpRequest& head) const;
  void RemoveSession(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  // Every idle_timeout / 4 (10 ms to 1 s) on accept_strand_: HttpConnection::SweepIdle on each
  // session.
  void Sweep();
  // At the cap: the session that has waited longest for a request and was not chosen before,
  // marked chosen; null when every session is busy with a request.
  std::shared_ptr<HttpConnection> ChooseEvictionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HttpServerOptions options_;
  // The connections at once: options_.max_connections, lowered to leave room under the
  // process's open-file limit (RLIMIT_NOFILE) so that the cap, not the file table, is met first.
  const int max_connections_;
  BodyBudget body_budget_;
  std::unique_ptr<net::ssl::context> tls_;  // null: plain HTTP; set by Listen()
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  net::strand<net::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_retry_;
  net::steady_timer sweep_timer_;
  bool stopping_ = false;  // on accept_strand_
  struct Route {
    HttpHandler handler;
    HttpHeadCheck head_check;  // may be empty
  };
  // The answer to a CORS preflight for a cross-origin path (http_cors.h); nullopt for any other
  // request.
  std::optional<HttpResponse> Preflight(const HttpRequest& head) const;
  // The routes of `path` by method: its own, else those of the first pattern it matches
  // (HttpServer::Handle); null when none.
  const std::map<std::string, Route>* RoutesOf(const std::string& path) const;
  // The route of `method` + `path`, or null with the 404 or 405 to answer in `*refusal`.
  const Route* FindRoute(const std::string& method, const std::string& path,
                         HttpResponse* refusal) const;

  // path -> method -> route; written only before Start().
  std::map<std::string, std::map<std::string, Route>> routes_;
  std::vector<std::string> patterns_;        // the keys of routes_ with a {name} segment, in order
  std::set<std::string> same_origin_paths_;  // written only before Start()

  absl::Mutex mu_;
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  struct Session {
    std::weak_ptr<HttpConnection> connection;
    bool evicting = false;  // chosen to make room (ChooseEvictionLocked); closing
  };
  std::unordered_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  LogEvery cap_logs_{absl::Seconds(10)};  // evictions and refusals at the cap
};

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_SESSION_H_
