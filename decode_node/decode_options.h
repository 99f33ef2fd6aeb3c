// tandem-decode's options: the workers' shared ones (worker/worker_options.h, SGLang's names and
// the rest of an SGLang launch_server line) and the decode role's own.
#ifndef TANDEM_DECODE_NODE_DECODE_OPTIONS_H_
#define TANDEM_DECODE_NODE_DECODE_OPTIONS_H_

#include "absl/status/status.h"
#include "common/flags.h"
#include "worker/worker_options.h"

namespace tandem::decode {

struct DecodeOptions : worker::WorkerOptions {
  DecodeOptions() {
    port = 8001;
    http_port = 9001;
    disaggregation_mode = "decode";
  }
  bool local_prefill = false;  // colocated mode: prefill locally, no KV transfer
  // Disaggregated: also prefill the legs that name no prefill worker (the router's conditional
  // disaggregation, docs/router.md "Conditional disaggregation"). Refusing them protects the
  // decode batch's step time from prompt compute; the router sends such legs only when told to.
  bool allow_local_prefill = true;
};

void RegisterDecodeFlags(Flags& flags, DecodeOptions* options);
// Cross-flag checks; errors name the flag. A cluster secret is required unless --local-prefill.
absl::Status ValidateDecodeOptions(const DecodeOptions& options);

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_NODE_DECODE_OPTIONS_H_
