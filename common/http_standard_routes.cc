// GET /metrics and GET /health, served by every daemon.
#include <memory>
#include <utility>

#include "common/http_server.h"
#include "common/metrics.h"
#include "nlohmann/json.hpp"

namespace tandem {

void AddStandardRoutes(HttpServer& server, const MetricsRegistry& registry, HealthFn health_fn) {
  server.Handle("GET", "/metrics", [&registry](HttpRequest, HttpResponder responder) {
    HttpResponse response;
    response.content_type = kPrometheusContentType;
    response.body = registry.Render();
    responder.Send(std::move(response));
  });
  server.Handle("GET", "/health", [health_fn](HttpRequest, HttpResponder responder) {
    if (!health_fn) {
      responder.Send(HttpResponse::Json(200, R"({"status":"ok"})"));
      return;
    }
    // The responder answers from whichever thread `health_fn` calls back on.
    auto shared = std::make_shared<HttpResponder>(std::move(responder));
    health_fn([shared](const absl::Status& status) {
      if (status.ok()) {
        shared->Send(HttpResponse::Json(200, R"({"status":"ok"})"));
        return;
      }
      nlohmann::json body = {{"status", "unhealthy"},
                             {"error",
                              {{"message", std::string(status.message())},
                               {"type", "service_unavailable"},
                               {"code", 503}}}};
      shared->Send(HttpResponse::Json(
          503, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    });
  });
}

}  // namespace tandem
