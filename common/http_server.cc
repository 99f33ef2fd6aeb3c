#include "common/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/http_cors.h"
#include "common/http_session.h"
#include "common/http_tls_context.h"
#include "spdlog/spdlog.h"

namespace tandem {
namespace http_internal {
namespace {

std::string FormatEndpoint(const tcp::endpoint& endpoint) {
  const net::ip::address address = endpoint.address();
  if (address.is_v6()) return absl::StrCat("[", address.to_string(), "]:", endpoint.port());
  return absl::StrCat(address.to_string(), ":", endpoint.port());
}

// True when `path` has `pattern`'s segments, a "{name}" segment standing for any one non-empty
// segment.
bool PathMatches(std::string_view pattern, std::string_view path) {
  while (!pattern.empty() && !path.empty()) {
    const size_t p_end = std::min(pattern.find('/', 1), pattern.size());
    const size_t s_end = std::min(path.find('/', 1), path.size());
    const std::string_view p = pattern.substr(0, p_end);
    const std::string_view s = path.substr(0, s_end);
    const bool wildcard = p.size() > 3 && p[1] == '{' && p.back() == '}';
    if (wildcard ? s.size() < 2 : p != s) return false;
    pattern.remove_prefix(p_end);
    path.remove_prefix(s_end);
  }
  return pattern.empty() && path.empty();
}

// max_connections, lowered to three quarters of the open-file limit when that is smaller: the
// rest is left for the process's other descriptors (its other ports, gRPC channels, files).
int ConnectionCap(int max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return max_connections;
  }
  const auto room = static_cast<int>(std::min<rlim_t>(limit.rlim_cur / 4 * 3, 1 << 30));
  if (room >= max_connections) return max_connections;
  spdlog::warn(
      "http: the open-file limit is {} (ulimit -n); at most {} connections at once instead of {}",
      limit.rlim_cur, std::max(room, 1), max_connections);
  return std::max(room, 1);
}

std::string FormatHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

ServerCore::ServerCore(HttpServerOptions options)
    : options_(std::move(options)),
      max_connections_(ConnectionCap(options_.max_connections)),
      body_budget_(options_.max_body_bytes_held, options_.on_body_refused),
      work_(net::make_work_guard(ioc_)),
      accept_strand_(net::make_strand(ioc_)),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_),
      sweep_timer_(accept_strand_) {}

void ServerCore::Handle(const std::string& method, const std::string& path, HttpHandler handler,
                        HttpHeadCheck head_check) {
  auto [route, added] = routes_.try_emplace(path);
  route->second[method] = Route{std::move(handler), std::move(head_check)};
  if (added && path.find('{') != std::string::npos) patterns_.push_back(path);
}

const std::map<std::string, ServerCore::Route>* ServerCore::RoutesOf(
    const std::string& path) const {
  if (const auto exact = routes_.find(path); exact != routes_.end()) return &exact->second;
  for (const std::string& pattern : patterns_) {
    if (PathMatches(pattern, path)) return &routes_.find(pattern)->second;
  }
  return nullptr;
}

void ServerCore::KeepSameOrigin(const std::string& path) { same_origin_paths_.insert(path); }

std::string ServerCore::AllowOrigin(const HttpRequest& head) const {
  if (options_.cors_allowed_origins.empty() || same_origin_paths_.contains(head.path)) return "";
  return CorsAllowedOrigin(options_.cors_allowed_origins, head.Header("Origin"));
}

std::optional<HttpResponse> ServerCore::Preflight(const HttpRequest& head) const {
  if (options_.cors_allowed_origins.empty() || !IsCorsPreflight(head) ||
      same_origin_paths_.contains(head.path)) {
    return std::nullopt;  // routed as any other OPTIONS: a 405 (or 404)
  }
  const std::map<std::string, Route>* routes = RoutesOf(head.path);
  if (routes == nullptr) return std::nullopt;
  std::vector<std::string> methods;
  for (const auto& [name, unused] : *routes) methods.push_back(name);
  return CorsPreflightAnswer(head, methods, AllowOrigin(head));
}

absl::StatusOr<uint16_t> ServerCore::Listen() {
  if (options_.max_body_bytes_held < options_.max_body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request bodies held at once (", options_.max_body_bytes_held,
        " bytes) must be at least the largest request body (", options_.max_body_bytes, " bytes)"));
  }
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    absl::StatusOr<std::unique_ptr<net::ssl::context>> tls =
        MakeTlsServerContext(options_.tls_cert_file, options_.tls_key_file);
    if (!tls.ok()) return tls.status();
    tls_ = *std::move(tls);
  }
  const std::string where = FormatHostPort(options_.host, options_.port);
  beast::error_code ec;
  tcp::endpoint endpoint;
  const net::ip::address address = net::ip::make_address(options_.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, options_.port);
  } else {
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port), ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot listen on ", where, ": cannot resolve host: ", ec ? ec.message() : "no address"));
    }
    endpoint = results.begin()->endpoint();
  }
  auto fail = [&](const char* step) {
    const std::string message =
        absl::StrCat("cannot listen on ", where, ": ", step, ": ", ec.message());
    beast::error_code ignored;
    acceptor_.close(ignored);
    if (ec == net::error::address_in_use) return absl::UnavailableError(message);
    if (ec == net::error::access_denied) return absl::PermissionDeniedError(message);
    if (ec == boost::system::errc::address_not_available)
      return absl::InvalidArgumentError(message);
    return absl::UnavailableError(message);
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return fail("open");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) return fail("setsockopt");
  acceptor_.bind(endpoint, ec);
  if (ec) return fail("bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  const tcp::endpoint local = acceptor_.local_endpoint(ec);
  if (ec) return fail("getsockname");
  return local.port();
}

void ServerCore::StartAccepting() {
  net::dispatch(accept_strand_, [this] {
    Accept();
    Sweep();
  });
}

void ServerCore::Sweep() {
  if (stopping_) return;
  std::vector<std::shared_ptr<HttpConnection>> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.reserve(sessions_.size());
    for (const auto& [id, entry] : sessions_) {
      if (auto session = entry.connection.lock()) sessions.push_back(std::move(session));
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& session : sessions) session->SweepIdle(now);
  const auto period = std::clamp<std::chrono::milliseconds>(
      options_.idle_timeout / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
  sweep_timer_.expires_after(period);
  sweep_timer_.async_wait([this](beast::error_code ec) {
    if (ec) return;
    try {
      Sweep();
    } catch (const std::exception& e) {
      // The sweep is re-armed at its end; without it idle direct-answer connections would stay.
      spdlog::error("http: the idle sweep threw: {}; re-arming it", e.what());
      sweep_timer_.expires_after(std::chrono::seconds(1));
      sweep_timer_.async_wait([this](beast::error_code again) {
        if (!again) Sweep();
      });
    }
  });
}

void ServerCore::Accept() {
  if (stopping_) return;
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    // A throw here (e.g. bad_alloc making the session) would skip re-arming the accept and
    // leave the server deaf: log it, drop that connection, keep accepting.
    try {
      OnAccept(ec, std::move(socket));
    } catch (const std::exception& e) {
      spdlog::error("http: accepting a connection threw: {}", e.what());
      Accept();
    } catch (...) {
      spdlog::error("http: accepting a connection threw an exception of unknown type");
      Accept();
    }
  });
}

void ServerCore::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (stopping_ || ec == net::error::operation_aborted) {
    beast::error_code ignored;
    socket.close(ignored);
    return;
  }
  if (ec) {
    // Typically out of file descriptors: back off instead of spinning on the error.
    spdlog::warn("http: accept failed: {}; retrying in 100 ms", ec.message());
    accept_retry_.expires_after(std::chrono::milliseconds(100));
    accept_retry_.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  beast::error_code endpoint_ec;
  const tcp::endpoint remote = socket.remote_endpoint(endpoint_ec);
  std::string peer = endpoint_ec ? "unknown" : FormatEndpoint(remote);
  std::shared_ptr<HttpConnection> session;
  std::shared_ptr<HttpConnection> evicted;
  size_t open = 0;
  {
    absl::MutexLock lock(&mu_);
    open = sessions_.size();
    if (static_cast<int>(open) >= max_connections_) evicted = ChooseEvictionLocked();
    if (static_cast<int>(open) < max_connections_ || evicted != nullptr) {
      const uint64_t id = next_session_id_++;
      session = MakeHttpConnection(std::move(socket), this, id, peer, tls_.get());
      sessions_.emplace(id, Session{session});
    }
  }
  // Counted before the close, which the peer may see at once.
  if (session == nullptr) {
    if (options_.on_connection_refused) options_.on_connection_refused();
    beast::error_code ignored;
    socket.close(ignored);
  } else if (evicted != nullptr) {
    if (options_.on_connection_evicted) options_.on_connection_evicted();
    evicted->PostEvict();
  }
  int64_t unlogged = 0;
  if (static_cast<int>(open) >= max_connections_ && cap_logs_.Allow(&unlogged)) {
    spdlog::warn(
        "http: {} connections open (the limit); {} {} ({} more at the limit since the last line)",
        open,
        session == nullptr ? "every one has a request in progress: refusing"
                           : "closed the one waiting longest for a request to let in",
        peer, unlogged);
  }
  if (session != nullptr) session->Start();
  Accept();
}

std::shared_ptr<HttpConnection> ServerCore::ChooseEvictionLocked() {
  const auto now = std::chrono::steady_clock::now();
  Session* oldest = nullptr;
  std::shared_ptr<HttpConnection> chosen;
  std::chrono::steady_clock::time_point oldest_since = now;
  for (auto& [id, entry] : sessions_) {
    if (entry.evicting) continue;
    std::shared_ptr<HttpConnection> connection = entry.connection.lock();
    if (connection == nullptr) continue;
    const std::optional<std::chrono::steady_clock::time_point> since =
        connection->WaitingSince(now);
    if (since.has_value() && (oldest == nullptr || *since < oldest_since)) {
      oldest = &entry;
      oldest_since = *since;
      chosen = std::move(connection);
    }
  }
  if (oldest != nullptr) oldest->evicting = true;
  return chosen;
}

void ServerCore::Run() {
  for (;;) {
    try {
      ioc_.run();
      return;
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this is a bug, but one connection's problem must not
      // take the server down.
      spdlog::error("http: exception escaped an I/O handler: {}", e.what());
    }
  }
}

void ServerCore::Shutdown() {
  // On the accept strand, so no session is registered after the snapshot below.
  net::post(accept_strand_, [this] {
    stopping_ = true;
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    sweep_timer_.cancel();
    std::vector<std::shared_ptr<HttpConnection>> sessions;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, entry] : sessions_) {
        if (auto session = entry.connection.lock()) sessions.push_back(std::move(session));
      }
    }
    for (const auto& session : sessions) session->PostClose();
  });
  work_.reset();
}

const ServerCore::Route* ServerCore::FindRoute(const std::string& method, const std::string& path,
                                               HttpResponse* refusal) const {
  const std::map<std::string, Route>* routes = RoutesOf(path);
  if (routes == nullptr) {
    *refusal = HttpResponse::Error(404, absl::StrCat("no route for ", path));
    return nullptr;
  }
  auto found = routes->find(method);
  // HEAD is GET without the body (RFC 9110 9.3.2): a GET route answers it unless the path has a
  // HEAD route of its own; the connection leaves the body off the wire.
  if (found == routes->end() && method == "HEAD") found = routes->find("GET");
  if (found == routes->end()) {
    std::vector<std::string> allowed;
    for (const auto& [name, unused] : *routes) allowed.push_back(name);
    if (routes->contains("GET") && !routes->contains("HEAD")) {
      allowed.insert(std::upper_bound(allowed.begin(), allowed.end(), "HEAD"), "HEAD");
    }
    *refusal =
        HttpResponse::Error(405, absl::StrCat("method ", method, " not allowed on ", path,
                                              " (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    refusal->headers.emplace_back("Allow", absl::StrJoin(allowed, ", "));
    return nullptr;
  }
  return &found->second;
}

std::optional<HttpResponse> ServerCore::RefuseHead(const HttpRequest& head) const {
  if (std::optional<HttpResponse> preflight = Preflight(head)) return preflight;
  HttpResponse refusal;
  const Route* route = FindRoute(head.method, head.path, &refusal);
  if (route == nullptr) return refusal;
  if (!route->head_check) return std::nullopt;
  try {
    return route->head_check(head);
  } catch (const std::exception& e) {
    spdlog::error("http: head check for {} {} threw: {}", head.method, head.path, e.what());
  } catch (...) {
    spdlog::error("http: head check for {} {} threw a non-exception", head.method, head.path);
  }
  return HttpResponse::Error(500, "internal error: the server failed while handling this request");
}

void ServerCore::Dispatch(HttpRequest request, HttpResponder responder) const {
  if (std::optional<HttpResponse> preflight = Preflight(request)) {
    responder.Send(*std::move(preflight));
    return;
  }
  HttpResponse refusal;
  const Route* route = FindRoute(request.method, request.path, &refusal);
  if (route == nullptr) {
    responder.Send(std::move(refusal));
    return;
  }
  const std::string method = request.method;
  const std::string path = request.path;
  try {
    // If the handler throws, its responder parameter is destroyed unanswered: a 500 goes out.
    route->handler(std::move(request), std::move(responder));
  } catch (const std::exception& e) {
    spdlog::error("http: handler for {} {} threw: {}", method, path, e.what());
  } catch (...) {
    spdlog::error("http: handler for {} {} threw a non-exception", method, path);
  }
}

void ServerCore::RemoveSession(uint64_t id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

}  // namespace http_internal

// ---------------------------------------------------------------------------------------------
// HttpStream and HttpResponder

HttpStream::HttpStream(std::shared_ptr<http_internal::Exchange> exchange)
    : exchange_(std::move(exchange)) {}

bool HttpStream::Write(std::string data) { return exchange_->Write(std::move(data)); }
void HttpStream::Finish() { exchange_->Finish(); }
bool HttpStream::closed() const { return exchange_->closed(); }
void HttpStream::OnClose(std::function<void()> callback) {
  exchange_->SetOnClose(std::move(callback));
}

HttpResponder::HttpResponder(std::shared_ptr<http_internal::Exchange> exchange)
    : exchange_(std::move(exchange)) {}
HttpResponder::HttpResponder(HttpResponder&&) noexcept = default;

HttpResponder& HttpResponder::operator=(HttpResponder&& other) noexcept {
  if (this != &other) {
    if (exchange_ != nullptr) {
      exchange_->Send(HttpResponse::Error(500, "the request handler did not answer"));
    }
    exchange_ = std::move(other.exchange_);
  }
  return *this;
}

HttpResponder::~HttpResponder() {
  // No-op when already answered.
  if (exchange_ != nullptr) {
    exchange_->Send(HttpResponse::Error(500, "the request handler did not answer"));
  }
}

void HttpResponder::Send(HttpResponse response) {
  if (exchange_ == nullptr) return;
  exchange_->Send(std::move(response));
  exchange_.reset();
}

HttpStreamPtr HttpResponder::StartStream(int status, const std::string& content_type,
                                         const HttpHeaders& headers) {
  if (exchange_ == nullptr) {
    // Already answered: a stream that accepts nothing.
    auto dead = std::make_shared<http_internal::Exchange>(nullptr, 0);
    dead->MarkClosed();
    return std::make_shared<HttpStream>(std::move(dead));
  }
  exchange_->StartStream(status, content_type, headers);
  auto stream = std::make_shared<HttpStream>(std::move(exchange_));
  exchange_.reset();
  return stream;
}

bool HttpResponder::client_gone() const {
  return exchange_ == nullptr ? false : exchange_->closed();
}

void HttpResponder::OnClientGone(std::function<void()> callback) {
  if (exchange_ != nullptr) exchange_->SetOnClose(std::move(callback));
}

// ---------------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), core_(std::make_unique<http_internal::ServerCore>(options_)) {}

HttpServer::~HttpServer() { Stop(); }

size_t HttpServer::body_bytes_held() const { return core_->body_budget().held(); }

void HttpServer::Handle(const std::string& method, const std::string& path, HttpHandler handler,
                        HttpHeadCheck head_check) {
  TANDEM_CHECK(!started_,
               absl::StrCat("HttpServer::Handle(", method, " ", path, ") after Start()"));
  core_->Handle(method, path, std::move(handler), std::move(head_check));
}

void HttpServer::KeepSameOrigin(const std::string& path) {
  TANDEM_CHECK(!started_, absl::StrCat("HttpServer::KeepSameOrigin(", path, ") after Start()"));
  core_->KeepSameOrigin(path);
}

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer already started");
  absl::StatusOr<uint16_t> port = core_->Listen();
  if (!port.ok()) return port.status();
  started_ = true;
  port_ = *port;
  core_->StartAccepting();
  const int threads = options_.threads < 1 ? 1 : options_.threads;
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([core = core_.get()] { core->Run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  core_->Shutdown();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

}  // namespace tandem
