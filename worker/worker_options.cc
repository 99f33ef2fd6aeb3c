#include "worker/worker_options.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tandem::worker {

void RegisterWorkerFlags(Flags& flags, const std::string& role, WorkerOptions* o) {
  flags.Add("--host", &o->host,
            role == "prefill" ? "Address to listen on (gRPC, bootstrap, HTTP)"
                              : "Address to listen on (gRPC, HTTP)");
  flags.Add("--port", &o->port, absl::StrCat("gRPC port for the router's ", role, " legs"))
      ->check(CLI::Range(0, 65535));
  flags.Add("--http-port", &o->http_port, "HTTP port for /metrics and /health (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
  flags
      .Add("--session-port", &o->session_port,
           "Port of the session socket the router sends legs on (0: ephemeral, advertised "
           "through gRPC Health; -1: none, the router uses gRPC sessions)")
      ->check(CLI::Range(-1, 65535));
  flags.Add(
      "--disaggregation-mode", &o->disaggregation_mode,
      absl::StrCat("Accepted for SGLang launch scripts; must be '", role, "' for this binary"));
  flags
      .Add("--drain-timeout", &o->drain_timeout_s,
           "Seconds allowed on SIGTERM to finish in-flight work before aborting it")
      ->check(CLI::NonNegativeNumber);
  engine::RegisterServingFlags(flags, &o->serving);
  kv::RegisterTransferFlags(flags, &o->transfer);
}

absl::Status ValidateWorkerOptions(const WorkerOptions& o, const std::string& role) {
  if (o.disaggregation_mode != role) {
    const std::string other = role == "prefill" ? "decode" : "prefill";
    return absl::InvalidArgumentError(
        absl::StrCat("--disaggregation-mode '", o.disaggregation_mode, "': tandem-", role,
                     " only runs the ", role, " role (use tandem-", other, " for '", other, "')"));
  }
  if (o.port != 0 && o.port == o.http_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port and --http-port must differ (both ", o.port, ")"));
  }
  RETURN_IF_ERROR(engine::ValidateServingOptions(o.serving));
  return absl::OkStatus();
}

}  // namespace tandem::worker
