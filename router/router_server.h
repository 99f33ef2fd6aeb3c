// RouterServer: the tandem-router process-level object. It owns the options, the metrics registry
// and the HTTP front door, on which /metrics and /health are served.
//
// Request routing (the OpenAI and SGLang routes, policies, PD pairing, admin API) is not part of
// this build yet: /health answers 503 and says so. Thread-safe: Create/Shutdown on the main
// thread; HTTP handlers on I/O threads.
#ifndef TANDEM_ROUTER_ROUTER_SERVER_H_
#define TANDEM_ROUTER_ROUTER_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "router/router_options.h"

namespace tandem::router {

class RouterServer {
 public:
  // Validates options and starts the HTTP front door.
  static absl::StatusOr<std::unique_ptr<RouterServer>> Create(RouterOptions options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int port() const { return http_->port(); }
  // Stops accepting, closes connections. Idempotent.
  void Shutdown();

 private:
  explicit RouterServer(RouterOptions options) : options_(std::move(options)) {}

  RouterOptions options_;
  MetricsRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_SERVER_H_
