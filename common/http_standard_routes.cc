// GET /metrics and GET /health, served by every daemon.
#include <utility>

#include "common/http_server.h"
#include "common/metrics.h"
#include "nlohmann/json.hpp"

namespace tandem {

void AddStandardRoutes(HttpServer& server, const MetricsRegistry& registry,
                       std::function<absl::Status()> health_fn) {
  server.Handle("GET", "/metrics", [&registry](HttpRequest, HttpResponder responder) {
    HttpResponse response;
    response.content_type = kPrometheusContentType;
    response.body = registry.Render();
    responder.Send(std::move(response));
  });
  server.Handle("GET", "/health",
                [health_fn = std::move(health_fn)](HttpRequest, HttpResponder responder) {
                  const absl::Status status = health_fn ? health_fn() : absl::OkStatus();
                  if (status.ok()) {
                    responder.Send(HttpResponse::Json(200, R"({"status":"ok"})"));
                    return;
                  }
                  nlohmann::json body = {{"status", "unhealthy"},
                                         {"error",
                                          {{"message", std::string(status.message())},
                                           {"type", "service_unavailable"},
                                           {"code", 503}}}};
                  responder.Send(HttpResponse::Json(
                      503, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
                });
}

}  // namespace tandem
