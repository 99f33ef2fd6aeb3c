#include "prefill_node/prefill_options.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tandem::prefill {

void RegisterPrefillFlags(Flags& flags, PrefillOptions* o) {
  flags.Add("--host", &o->host, "Address to listen on (gRPC, bootstrap, HTTP)");
  flags.Add("--port", &o->port, "gRPC port for the router's prefill legs")
      ->check(CLI::Range(0, 65535));
  flags.Add("--http-port", &o->http_port, "HTTP port for /metrics and /health (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
  flags
      .Add("--session-port", &o->session_port,
           "Port of the session socket the router sends legs on (0: ephemeral, advertised "
           "through gRPC Health; -1: none, the router uses gRPC sessions)")
      ->check(CLI::Range(-1, 65535));
  flags
      .Add("--disaggregation-bootstrap-port", &o->bootstrap_port,
           "Port of the bootstrap server decode workers connect to (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
  flags.Add("--disaggregation-mode", &o->disaggregation_mode,
            "Accepted for SGLang launch scripts; must be 'prefill' for this binary");
  flags
      .Add("--drain-timeout", &o->drain_timeout_s,
           "Seconds allowed on SIGTERM to finish in-flight rooms before aborting them")
      ->check(CLI::NonNegativeNumber);
  engine::RegisterServingFlags(flags, &o->serving);
  kv::RegisterTransferFlags(flags, &o->transfer);
}

absl::Status ValidatePrefillOptions(const PrefillOptions& o) {
  if (o.disaggregation_mode != "prefill") {
    return absl::InvalidArgumentError(
        absl::StrCat("--disaggregation-mode '", o.disaggregation_mode,
                     "': tandem-prefill only runs the prefill role (use tandem-decode for "
                     "'decode')"));
  }
  auto same = [](int a, int b) { return a != 0 && a == b; };
  if (same(o.port, o.http_port) || same(o.port, o.bootstrap_port) ||
      same(o.http_port, o.bootstrap_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port (", o.port, "), --http-port (", o.http_port,
                     ") and --disaggregation-bootstrap-port (", o.bootstrap_port, ") must differ"));
  }
  RETURN_IF_ERROR(engine::ValidateServingOptions(o.serving));
  RETURN_IF_ERROR(kv::LoadClusterSecret(o.transfer).status());
  return absl::OkStatus();
}

}  // namespace tandem::prefill
