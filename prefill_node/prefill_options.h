// tandem-prefill's options: the workers' shared ones (worker/worker_options.h, SGLang's names and
// the rest of an SGLang launch_server line) and the prefill role's own.
#ifndef TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_
#define TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_

#include "absl/status/status.h"
#include "common/flags.h"
#include "worker/worker_options.h"

namespace tandem::prefill {

struct PrefillOptions : worker::WorkerOptions {
  PrefillOptions() {
    port = 8000;
    http_port = 9000;
    disaggregation_mode = "prefill";
  }
  int bootstrap_port = 8998;  // --disaggregation-bootstrap-port
};

void RegisterPrefillFlags(Flags& flags, PrefillOptions* options);
// Cross-flag checks; errors name the flag.
absl::Status ValidatePrefillOptions(const PrefillOptions& options);

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_
