#include "prefill_node/prefill_options.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tandem::prefill {

void RegisterPrefillFlags(Flags& flags, PrefillOptions* o) {
  worker::RegisterWorkerFlags(flags, "prefill", o);
  flags
      .Add("--disaggregation-bootstrap-port", &o->bootstrap_port,
           "Port of the bootstrap server decode workers connect to (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
}

absl::Status ValidatePrefillOptions(const PrefillOptions& o) {
  RETURN_IF_ERROR(worker::ValidateWorkerOptions(o, "prefill"));
  auto same = [](int a, int b) { return a != 0 && a == b; };
  if (same(o.port, o.bootstrap_port) || same(o.http_port, o.bootstrap_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port (", o.port, "), --http-port (", o.http_port,
                     ") and --disaggregation-bootstrap-port (", o.bootstrap_port, ") must differ"));
  }
  RETURN_IF_ERROR(kv::LoadClusterSecret(o.transfer).status());
  return absl::OkStatus();
}

}  // namespace tandem::prefill
