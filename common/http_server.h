// HttpServer: the asynchronous HTTP/1.1 server every Tandem daemon runs (/metrics, /health) and
// the router builds its client API on (OpenAI routes, SSE streams to many clients).
//
// Model: one io_context run by `threads` threads; each connection is served on its own strand,
// one request at a time (keep-alive; pipelined requests are answered in order). Routes are exact
// (method, path) pairs registered with Handle() before Start(). A handler runs on an I/O thread
// and must not block: it answers at once, or keeps the HttpResponder (move-only) and answers
// later from any thread. A whole answer sent later from another thread to a plain keep-alive
// connection waiting for it is written to the socket by that thread, without waking an I/O
// thread (http_session.h, "Direct answers"); the server's behaviour is the same either way.
// Two ways to answer:
//   - responder.Send(HttpResponse{...}): a whole response with Content-Length;
//   - responder.StartStream(200, "text/event-stream"): a chunked response; the returned
//     HttpStream is thread-safe, may be kept and written from any thread (Write/Finish), and
//     reports when the client has gone away (closed(), OnClose()).
// A responder destroyed without answering sends 500, so a request is never left hanging.
//
// Client disconnects: while a request is being handled or streamed, the server watches the
// socket; a client that closes it (or resets) marks the exchange closed and runs the OnClose
// callback once, so the caller can cancel upstream work. (If the client has already pipelined
// its next request, that request's bytes hide a later disconnect until the next write fails.)
//
// Back-pressure: each stream buffers at most `max_stream_buffer_bytes` not yet written to the
// socket, and a single socket write may take at most `write_timeout`. A client that falls
// further behind is treated as gone: its connection is closed, Write() returns false and
// OnClose runs. Producers therefore never block and memory per client is bounded.
//
// Limits and errors (bodies are JSON {"error":{"message","type","code"}}): body larger than
// max_body_bytes -> 413, headers larger than max_header_bytes -> 431, malformed request -> 400, a
// transfer coding other than chunked -> 400 when chunked is not last (the length is unknown),
// else 501 (RFC 9112 6.1); these close the connection. Bodies held at once over all connections
// are bounded too (`max_body_bytes_held`): a request whose body would pass that bound is answered
// 503 with Retry-After before its body is read, and the connection closes. Unknown path -> 404,
// known path with another method -> 405 (with Allow). HEAD runs the path's GET route (unless a HEAD
// route is registered) and is answered with that route's header, Content-Length included, without
// the body; a stream's writes are dropped. A request that announces a body is judged on its head
// first: an unknown path, a method not allowed, or a route's HttpHeadCheck refusing it (e.g. a
// missing key) is answered before any body byte is read (no 100 Continue), and the connection
// closes, so a peer that may not use a route cannot make the server buffer a body for it. A
// connection idle for `idle_timeout` between requests, or taking longer than `read_timeout` to
// deliver a request once it started, is closed (slow clients cannot hold connections). At
// `max_connections` (lowered, with a warning, to three quarters of the process's open-file limit
// when that is smaller), a new connection takes the place of the one that has waited longest for
// a request (idle, or still sending one), which is closed, as nginx reuses idle keep-alive
// connections; only when every connection has a request in a handler or being answered is the
// new one closed at once. So a flood of silent or half-sent connections cannot shut clients out.
//
// Cross-origin (HttpServerOptions::cors_allowed_origins, common/http_cors.h): a request from an
// allowed origin gets Access-Control-Allow-Origin on its answer, whatever the answer is; a CORS
// preflight (OPTIONS) on a path is answered by the server, before any head check. Paths marked
// KeepSameOrigin take no part.
//
// Thread-safety: Handle() before Start() only; Start()/Stop() from one controlling thread, never
// from a handler. Everything else is thread-safe. Stop() (also run by the destructor) closes the
// listener and every connection (open streams see OnClose) and joins the threads; after it,
// responders and streams still held by callers are inert.
#ifndef TANDEM_COMMON_HTTP_SERVER_H_
#define TANDEM_COMMON_HTTP_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/http_types.h"

namespace tandem {

class MetricsRegistry;

namespace http_internal {
class Exchange;
class ServerCore;
}  // namespace http_internal

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IP address or a name resolving to one
  uint16_t port = 0;               // 0 picks an ephemeral port; see HttpServer::port()
  int threads = 1;
  size_t max_body_bytes = 16 << 20;
  size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds idle_timeout{60000};   // between requests on a connection
  std::chrono::milliseconds read_timeout{30000};   // one request, first byte to last
  std::chrono::milliseconds write_timeout{30000};  // one socket write
  size_t max_stream_buffer_bytes = 4 << 20;        // per stream, see "Back-pressure"
  int max_connections = 10000;
  // Request bodies held at once over all connections (common/http_body_budget.h); a body that
  // does not fit in what is left gets 503. At least max_body_bytes (Start() fails otherwise).
  size_t max_body_bytes_held = size_t{1} << 30;
  // Runs on each such 503 (on an I/O thread: cheap, non-blocking), e.g. to count it.
  std::function<void()> on_body_refused;
  // Runs (on an I/O thread: cheap, non-blocking) for each connection closed to make room at
  // max_connections, and for each new connection closed because none could be.
  std::function<void()> on_connection_evicted;
  std::function<void()> on_connection_refused;
  std::string server_header = "tandem";
  // HTTPS: both PEM files (see common/http_tls.h); Start() fails naming a bad file. A client that
  // does not complete the TLS handshake within read_timeout (e.g. one speaking plain HTTP) is
  // closed. Empty: plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Origins whose browser pages may call the routes and read the answers ("*": any; otherwise
  // exact scheme://host[:port], see common/http_cors.h). Empty: no CORS at all.
  std::vector<std::string> cors_allowed_origins;
};

// The writer side of a chunked (streamed) response. Thread-safe; shared by the server and any
// number of producer threads (shared_ptr: whoever writes keeps it).
class HttpStream {
 public:
  explicit HttpStream(std::shared_ptr<http_internal::Exchange> exchange);
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  // Queues `data` as the next part of the body. Returns false, dropping the data, when the
  // stream is finished or closed, or when the client is too slow (see "Back-pressure"; the
  // connection is then closed). Empty data is accepted and sends nothing.
  bool Write(std::string data);
  // Ends the body once the queued data is written; later writes return false.
  void Finish();
  // True once the client went away, was too slow, or the server stopped.
  bool closed() const;
  // Runs `callback` once when the stream becomes closed (on an I/O thread), or at once on the
  // calling thread if it already is. Not run after a normal Finish. Replaces any previous one.
  void OnClose(std::function<void()> callback);

 private:
  std::shared_ptr<http_internal::Exchange> exchange_;
};
using HttpStreamPtr = std::shared_ptr<HttpStream>;

// The right to answer one request. Move-only; answer with exactly one of Send or StartStream,
// from any thread, now or later. Destroying it unanswered sends a 500.
class HttpResponder {
 public:
  explicit HttpResponder(std::shared_ptr<http_internal::Exchange> exchange);
  HttpResponder(HttpResponder&&) noexcept;
  HttpResponder& operator=(HttpResponder&&) noexcept;
  HttpResponder(const HttpResponder&) = delete;
  HttpResponder& operator=(const HttpResponder&) = delete;
  ~HttpResponder();

  void Send(HttpResponse response);
  // Starts a chunked response with this status, content type and extra headers (for SSE pass
  // "text/event-stream"; Cache-Control: no-cache is added unless given).
  HttpStreamPtr StartStream(int status, const std::string& content_type,
                            const HttpHeaders& headers = {});
  // Whether the client has gone away while the request was being handled, and a callback for
  // it (same contract as HttpStream::OnClose), so long handlers can stop early.
  bool client_gone() const;
  void OnClientGone(std::function<void()> callback);

 private:
  std::shared_ptr<http_internal::Exchange> exchange_;
};

// Handlers take the request by value (move out what you keep) and the responder.
using HttpHandler = std::function<void(HttpRequest request, HttpResponder responder)>;
// Judges a request from its head alone (method, target, path, query, headers, peer; the body is
// empty), before the server reads a body it announced: a response refuses the request with it,
// nullopt lets the body be read and the handler run. Runs on an I/O thread: cheap, non-blocking.
// It runs only for requests with a body still to read, so the handler must check the same
// thing itself for requests without one.
using HttpHeadCheck = std::function<std::optional<HttpResponse>(const HttpRequest& head)>;

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers the handler for exactly `method` + `path` (no trailing-slash or prefix matching),
  // with an optional check of the request's head (see HttpHeadCheck). A segment "{name}" of
  // `path` matches any one non-empty segment ("/v1/responses/{id}"); the handler reads it from
  // request.path. A path's own routes win over patterns, and patterns are tried in the order
  // registered. Must be called before Start(); registering the same pair twice replaces the
  // handler.
  void Handle(const std::string& method, const std::string& path, HttpHandler handler,
              HttpHeadCheck head_check = nullptr);
  // Keeps `path` out of cross-origin use whatever cors_allowed_origins says (e.g. an admin API):
  // no CORS headers, and a preflight for it is routed as any other OPTIONS. Before Start().
  void KeepSameOrigin(const std::string& path);

  // Binds host:port, listens and starts the threads. Errors (bad host, address in use,
  // permission) name the address. Calling Start twice is FailedPrecondition.
  absl::Status Start();
  // The bound port (the ephemeral one when options.port was 0); 0 before Start().
  uint16_t port() const { return port_; }
  // Closes the listener and all connections and joins the threads. Idempotent.
  void Stop();

  // Request bodies held now over all connections (see max_body_bytes_held), for metrics.
  size_t body_bytes_held() const;

 private:
  HttpServerOptions options_;
  std::unique_ptr<http_internal::ServerCore> core_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

// A health check that answers through its callback, exactly once, from any thread, now or
// later; it is called on an I/O thread and must not block.
using HealthFn = std::function<void(std::function<void(absl::Status)> done)>;

// Registers GET /metrics (Prometheus text of `registry`, which must outlive the server) and
// GET /health: 200 {"status":"ok"} when health_fn answers OK (or there is none), otherwise 503
// {"status":"unhealthy","error":{"message":<status message>,...}}.
void AddStandardRoutes(HttpServer& server, const MetricsRegistry& registry, HealthFn health_fn);

}  // namespace tandem

#endif  // TANDEM_COMMON_HTTP_SERVER_H_
