#include "router/router_server.h"

#include <utility>

#include "common/daemon.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"

namespace tandem::router {

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterOptions options) {
  RETURN_IF_ERROR(ValidateRouterOptions(&options));
  std::unique_ptr<RouterServer> server(new RouterServer(std::move(options)));
  const RouterOptions& o = server->options_;

  HttpServerOptions http;
  http.host = o.host;
  http.port = static_cast<uint16_t>(o.port);
  http.max_body_bytes = static_cast<size_t>(o.max_payload_size);
  ASSIGN_OR_RETURN(server->http_, StartStatusEndpoint(
                                      http, server->metrics_,
                                      [] {
                                        return absl::UnavailableError(
                                            "tandem-router: request routing is not part of this "
                                            "build; this process serves only "
                                            "/metrics and /health");
                                      },
                                      "--port: "));
  spdlog::info("tandem-router {} on {}:{} ({} mode, {} prefill, {} decode, {} plain workers)",
               kTandemVersion, o.host, server->http_->port(), o.pd_disaggregation ? "pd" : "plain",
               o.prefill.size(), o.decode_urls.size(), o.worker_urls.size());
  spdlog::warn("tandem-router: routing is not served by this build (/health reports 503)");
  return server;
}

RouterServer::~RouterServer() { Shutdown(); }

void RouterServer::Shutdown() {
  if (http_) http_->Stop();
}

}  // namespace tandem::router
