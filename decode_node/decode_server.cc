#include "decode_node/decode_server.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"
#include "worker/endpoints.h"

namespace tandem::decode {
namespace {

// After the drain timeout, aborted streams get this long to deliver their abort event.
constexpr double kAbortGraceSeconds = 5.0;
// gRPC's grace for RPCs still open when the service stops.
constexpr double kGrpcGraceSeconds = 2.0;

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeServer>> DecodeServer::Create(DecodeOptions options) {
  RETURN_IF_ERROR(ValidateDecodeOptions(options));
  std::unique_ptr<DecodeServer> server(new DecodeServer(std::move(options)));
  const DecodeOptions& o = server->options_;
  engine::ServingOptions serving = o.serving;
  // A disaggregated decode worker keeps no prefix cache: its prompts arrive as KV, and the
  // prompt tokens it computes (parallel-sampling siblings' tails, or their whole prompts when
  // they cannot share; the short prompts the router's conditional disaggregation sends it) would
  // otherwise stay cached, so an idle worker would not show every block free.
  if (!o.local_prefill) serving.disable_radix_cache = true;
  ASSIGN_OR_RETURN(server->engine_, engine::Engine::Create(serving));
  server->engine_->ExportMetrics(&server->metrics_, engine::ServedModelName(o.serving));

  worker::WorkerCoreOptions core;
  core.role = o.local_prefill ? worker::WorkerRole::kColocated : worker::WorkerRole::kDecode;
  core.model_path = o.serving.model_path;
  core.served_model_name = engine::ServedModelName(o.serving);
  core.transfer_backend = o.local_prefill ? "" : o.transfer.backend;
  core.decode_takes_colocated_legs = !o.local_prefill && o.allow_local_prefill;
  // The gRPC service demands the cluster secret whenever the worker has one: always when
  // disaggregated, and when a colocated worker is given one (it is optional there).
  std::string grpc_secret;
  if (o.local_prefill &&
      (!o.transfer.cluster_secret_file.empty() || !o.transfer.cluster_secret.empty() ||
       std::getenv("TANDEM_CLUSTER_SECRET") != nullptr)) {
    ASSIGN_OR_RETURN(grpc_secret, kv::LoadClusterSecret(o.transfer));
  }
  if (!o.local_prefill) {
    ASSIGN_OR_RETURN(std::string secret, kv::LoadClusterSecret(o.transfer));
    grpc_secret = secret;
    worker::HandoffOptions h;
    h.worker_id = absl::StrCat("decode@", o.host, ":", o.port);
    h.served_model_name = engine::ServedModelName(o.serving);
    h.transfer = o.transfer;
    h.cluster_secret = secret;
    ASSIGN_OR_RETURN(server->handoff_,
                     worker::DecodeHandoff::Create(server->engine_.get(), std::move(h)));
  }
  server->core_ = std::make_unique<worker::WorkerCore>(server->engine_.get(), std::move(core),
                                                       &server->metrics_, server->handoff_.get());

  ASSIGN_OR_RETURN(worker::WorkerEndpoints endpoints,
                   worker::StartWorkerEndpoints(server->core_.get(), server->metrics_, o.host,
                                                o.port, o.http_port, o.session_port, grpc_secret));
  server->http_ = std::move(endpoints.http);
  server->grpc_ = std::move(endpoints.grpc);
  const engine::SchedulerConfig& sc = server->engine_->config();
  spdlog::info(
      "tandem-decode {} model {} ({} layers), {} mode, {} KV blocks of {} tokens, gRPC on {}:{}, "
      "HTTP on {}:{}",
      kTandemVersion, engine::ServedModelName(o.serving),
      server->engine_->model_config().num_layers, o.local_prefill ? "colocated" : "disaggregated",
      sc.num_blocks, sc.block_size, o.host, server->grpc_->port(), o.host, server->http_->port());
  return server;
}

DecodeServer::DecodeServer(DecodeOptions options) : options_(std::move(options)) {
  metrics_.AddGauge("tandem_worker_info", "Worker role and model", {"role", "model"})
      .WithLabels({options_.local_prefill ? "colocated" : "decode",
                   engine::ServedModelName(options_.serving)})
      .Set(1);
}

DecodeServer::~DecodeServer() { Shutdown(); }

void DecodeServer::Drain() {
  if (core_ == nullptr) return Shutdown();
  core_->BeginDrain();
  const int64_t live = core_->live_legs();
  spdlog::info("draining: {} streams running, up to {} s to finish", live,
               options_.drain_timeout_s);
  if (!core_->WaitNoLegs(options_.drain_timeout_s)) {
    spdlog::warn("drain timeout: aborting {} streams still running", core_->live_legs());
    core_->AbortAllLegs(absl::StrCat("the worker is shutting down: streams still running after ",
                                     options_.drain_timeout_s, " s (--drain-timeout) are aborted"));
    if (!core_->WaitNoLegs(kAbortGraceSeconds)) {
      spdlog::error("{} streams did not end after their abort", core_->live_legs());
    }
  }
  Shutdown();
}

void DecodeServer::Shutdown() {
  // gRPC first so no leg starts on a stopping engine; then the engine, whose shutdown ends any
  // leg still live; the WorkerCore outlives both (destroyed with this object).
  if (grpc_) grpc_->Shutdown(kGrpcGraceSeconds);
  if (handoff_) handoff_->Shutdown();
  if (engine_) engine_->Shutdown();
  if (http_) http_->Stop();
}

}  // namespace tandem::decode
