#include "decode_node/decode_options.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tandem::decode {

void RegisterDecodeFlags(Flags& flags, DecodeOptions* o) {
  flags.Add("--host", &o->host, "Address to listen on (gRPC, HTTP)");
  flags.Add("--port", &o->port, "gRPC port for the router's decode legs")
      ->check(CLI::Range(0, 65535));
  flags.Add("--http-port", &o->http_port, "HTTP port for /metrics and /health (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
  flags
      .Add("--session-port", &o->session_port,
           "Port of the session socket the router sends legs on (0: ephemeral, advertised "
           "through gRPC Health; -1: none, the router uses gRPC sessions)")
      ->check(CLI::Range(-1, 65535));
  flags.Add("--disaggregation-mode", &o->disaggregation_mode,
            "Accepted for SGLang launch scripts; must be 'decode' for this binary");
  flags.Add("--local-prefill", &o->local_prefill,
            "Prefill locally (colocated mode, no prefill workers or KV transfer)");
  flags.Add("--allow-local-prefill", &o->allow_local_prefill,
            "Disaggregated: also prefill requests the router sends without a prefill worker "
            "(conditional disaggregation); --allow-local-prefill=false refuses them");
  flags
      .Add("--drain-timeout", &o->drain_timeout_s,
           "Seconds allowed on SIGTERM to finish in-flight streams before aborting them")
      ->check(CLI::NonNegativeNumber);
  engine::RegisterServingFlags(flags, &o->serving);
  kv::RegisterTransferFlags(flags, &o->transfer);
}

absl::Status ValidateDecodeOptions(const DecodeOptions& o) {
  if (o.disaggregation_mode != "decode") {
    return absl::InvalidArgumentError(
        absl::StrCat("--disaggregation-mode '", o.disaggregation_mode,
                     "': tandem-decode only runs the decode role (use tandem-prefill for "
                     "'prefill')"));
  }
  if (o.port != 0 && o.port == o.http_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port and --http-port must differ (both ", o.port, ")"));
  }
  RETURN_IF_ERROR(engine::ValidateServingOptions(o.serving));
  if (!o.local_prefill) RETURN_IF_ERROR(kv::LoadClusterSecret(o.transfer).status());
  return absl::OkStatus();
}

}  // namespace tandem::decode
