#include "decode_node/decode_server.h"

#include <filesystem>
#include <utility>

#include "common/daemon.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"

namespace tandem::decode {

absl::StatusOr<std::unique_ptr<DecodeServer>> DecodeServer::Create(DecodeOptions options) {
  RETURN_IF_ERROR(ValidateDecodeOptions(options));
  const auto config_path = std::filesystem::path(options.serving.model_path) / "config.json";
  ASSIGN_OR_RETURN(engine::ModelConfig model, engine::ModelConfig::FromFile(config_path.string()));
  std::unique_ptr<DecodeServer> server(new DecodeServer(std::move(options), std::move(model)));

  HttpServerOptions http;
  http.host = server->options_.host;
  http.port = static_cast<uint16_t>(server->options_.http_port);
  ASSIGN_OR_RETURN(server->http_, StartStatusEndpoint(
                                      http, server->metrics_,
                                      [] {
                                        return absl::UnavailableError(
                                            "tandem-decode: the decode leg, KV reservation and "
                                            "token streaming are not part of this "
                                            "build; this daemon serves only /metrics and /health");
                                      },
                                      "--http-port: "));
  spdlog::info("tandem-decode {} model {} ({} layers), {} mode, HTTP on {}:{}", kTandemVersion,
               engine::ServedModelName(server->options_.serving), server->model_.num_layers,
               server->options_.local_prefill ? "colocated" : "disaggregated",
               server->options_.host, server->http_->port());
  spdlog::warn("tandem-decode: decode legs are not served by this build (/health reports 503)");
  return server;
}

DecodeServer::DecodeServer(DecodeOptions options, engine::ModelConfig model)
    : options_(std::move(options)), model_(std::move(model)) {
  metrics_.AddGauge("tandem_worker_info", "Worker role and model", {"role", "model"})
      .WithLabels({options_.local_prefill ? "colocated" : "decode",
                   engine::ServedModelName(options_.serving)})
      .Set(1);
}

DecodeServer::~DecodeServer() { Shutdown(); }

void DecodeServer::Shutdown() {
  if (http_) http_->Stop();
}

}  // namespace tandem::decode
