#include "prefill_node/prefill_server.h"

#include <filesystem>
#include <utility>

#include "common/daemon.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"

namespace tandem::prefill {

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Create(PrefillOptions options) {
  RETURN_IF_ERROR(ValidatePrefillOptions(options));
  const auto config_path = std::filesystem::path(options.serving.model_path) / "config.json";
  ASSIGN_OR_RETURN(engine::ModelConfig model, engine::ModelConfig::FromFile(config_path.string()));
  std::unique_ptr<PrefillServer> server(new PrefillServer(std::move(options), std::move(model)));

  HttpServerOptions http;
  http.host = server->options_.host;
  http.port = static_cast<uint16_t>(server->options_.http_port);
  ASSIGN_OR_RETURN(server->http_, StartStatusEndpoint(
                                      http, server->metrics_,
                                      [] {
                                        return absl::UnavailableError(
                                            "tandem-prefill: the prefill leg and KV handoff are "
                                            "not part of this build; this daemon "
                                            "serves only /metrics and /health");
                                      },
                                      "--http-port: "));
  spdlog::info("tandem-prefill {} model {} ({} layers, {} KV heads x {}), HTTP on {}:{}",
               kTandemVersion, engine::ServedModelName(server->options_.serving),
               server->model_.num_layers, server->model_.num_kv_heads, server->model_.head_dim,
               server->options_.host, server->http_->port());
  spdlog::warn("tandem-prefill: prefill legs are not served by this build (/health reports 503)");
  return server;
}

PrefillServer::PrefillServer(PrefillOptions options, engine::ModelConfig model)
    : options_(std::move(options)), model_(std::move(model)) {
  metrics_.AddGauge("tandem_worker_info", "Worker role and model", {"role", "model"})
      .WithLabels({"prefill", engine::ServedModelName(options_.serving)})
      .Set(1);
}

PrefillServer::~PrefillServer() { Shutdown(); }

void PrefillServer::Shutdown() {
  if (http_) http_->Stop();
}

}  // namespace tandem::prefill
