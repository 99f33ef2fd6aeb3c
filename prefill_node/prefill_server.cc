#include "prefill_node/prefill_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"
#include "worker/endpoints.h"

namespace tandem::prefill {
namespace {

constexpr double kAbortGraceSeconds = 5.0;
constexpr double kGrpcGraceSeconds = 2.0;

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Create(PrefillOptions options) {
  RETURN_IF_ERROR(ValidatePrefillOptions(options));
  ASSIGN_OR_RETURN(std::string secret, kv::LoadClusterSecret(options.transfer));
  std::unique_ptr<PrefillServer> server(new PrefillServer(std::move(options)));
  const PrefillOptions& o = server->options_;
  ASSIGN_OR_RETURN(server->engine_, engine::Engine::Create(o.serving));
  server->engine_->ExportMetrics(&server->metrics_, engine::ServedModelName(o.serving));

  worker::HandoffOptions h;
  h.worker_id = absl::StrCat("prefill@", o.host, ":", o.port);
  h.served_model_name = engine::ServedModelName(o.serving);
  h.bootstrap_host = o.host;
  h.bootstrap_port = o.bootstrap_port;
  h.transfer = o.transfer;
  h.cluster_secret = secret;
  ASSIGN_OR_RETURN(server->handoff_,
                   worker::PrefillHandoff::Create(server->engine_.get(), std::move(h)));

  worker::WorkerCoreOptions core;
  core.role = worker::WorkerRole::kPrefill;
  core.model_path = o.serving.model_path;
  core.served_model_name = engine::ServedModelName(o.serving);
  core.transfer_backend = o.transfer.backend;
  core.bootstrap_port = server->handoff_->bootstrap_port();
  server->core_ = std::make_unique<worker::WorkerCore>(
      server->engine_.get(), std::move(core), &server->metrics_, nullptr, server->handoff_.get());

  ASSIGN_OR_RETURN(worker::WorkerEndpoints endpoints,
                   worker::StartWorkerEndpoints(server->core_.get(), server->metrics_, o.host,
                                                o.port, o.http_port, o.session_port, secret));
  server->http_ = std::move(endpoints.http);
  server->grpc_ = std::move(endpoints.grpc);
  const engine::SchedulerConfig& sc = server->engine_->config();
  spdlog::info(
      "tandem-prefill {} model {} ({} layers), {} KV blocks of {} tokens, gRPC on {}:{}, "
      "bootstrap on {}:{}, transfer backend {}, HTTP on {}:{}",
      kTandemVersion, engine::ServedModelName(o.serving),
      server->engine_->model_config().num_layers, sc.num_blocks, sc.block_size, o.host,
      server->grpc_->port(), o.host, server->handoff_->bootstrap_port(), o.transfer.backend, o.host,
      server->http_->port());
  return server;
}

PrefillServer::PrefillServer(PrefillOptions options) : options_(std::move(options)) {
  metrics_.AddGauge("tandem_worker_info", "Worker role and model", {"role", "model"})
      .WithLabels({"prefill", engine::ServedModelName(options_.serving)})
      .Set(1);
}

PrefillServer::~PrefillServer() { Shutdown(); }

void PrefillServer::Drain() {
  if (core_ == nullptr) return Shutdown();
  core_->BeginDrain();
  spdlog::info("draining: {} rooms in flight, up to {} s to finish", core_->live_legs(),
               options_.drain_timeout_s);
  if (!core_->WaitNoLegs(options_.drain_timeout_s)) {
    spdlog::warn("drain timeout: failing {} rooms still in flight", core_->live_legs());
    handoff_->Shutdown();  // fails every room still in flight and tells its decode worker
    if (!core_->WaitNoLegs(kAbortGraceSeconds)) {
      spdlog::error("{} rooms did not end after their abort", core_->live_legs());
    }
  }
  Shutdown();
}

void PrefillServer::Shutdown() {
  if (grpc_) grpc_->Shutdown(kGrpcGraceSeconds);
  if (handoff_) handoff_->Shutdown();
  if (engine_) engine_->Shutdown();
  if (http_) http_->Stop();
}

}  // namespace tandem::prefill
