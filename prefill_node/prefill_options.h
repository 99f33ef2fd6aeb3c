// tandem-prefill's options. Flag names are SGLang's where the concept is the same, so
// `--disaggregation-mode prefill` lines of existing launch scripts are accepted as they are.
#ifndef TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_
#define TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "common/flags.h"
#include "engine/serving_options.h"
#include "kvtransfer/transfer_flags.h"

namespace tandem::prefill {

struct PrefillOptions {
  std::string host = "127.0.0.1";  // gRPC (router legs), bootstrap and HTTP listen here
  int port = 8000;                 // gRPC
  int http_port = 9000;            // /metrics, /health (0: ephemeral)
  int session_port = 0;            // the session socket (0: ephemeral, -1: none)
  int bootstrap_port = 8998;       // --disaggregation-bootstrap-port
  std::string disaggregation_mode = "prefill";
  double drain_timeout_s = 30;  // on SIGTERM: finish or abort in-flight rooms within this
  engine::ServingOptions serving;
  kv::TransferFlags transfer;
};

void RegisterPrefillFlags(Flags& flags, PrefillOptions* options);
// Cross-flag checks; errors name the flag.
absl::Status ValidatePrefillOptions(const PrefillOptions& options);

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_NODE_PREFILL_OPTIONS_H_
