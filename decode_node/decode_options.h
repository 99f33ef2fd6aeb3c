// tandem-decode's options. Flag names are SGLang's where the concept is the same, so
// `--disaggregation-mode decode` lines of existing launch scripts are accepted as they are.
#ifndef TANDEM_DECODE_NODE_DECODE_OPTIONS_H_
#define TANDEM_DECODE_NODE_DECODE_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "common/flags.h"
#include "engine/serving_options.h"
#include "kvtransfer/transfer_flags.h"

namespace tandem::decode {

struct DecodeOptions {
  std::string host = "127.0.0.1";  // gRPC (router legs) and HTTP listen here
  int port = 8001;                 // gRPC
  int http_port = 9001;            // /metrics, /health (0: ephemeral)
  int session_port = 0;            // the session socket (0: ephemeral, -1: none)
  std::string disaggregation_mode = "decode";
  bool local_prefill = false;  // colocated mode: prefill locally, no KV transfer
  // Disaggregated: also prefill the legs that name no prefill worker (the router's conditional
  // disaggregation, docs/router.md "Conditional disaggregation"). Refusing them protects the
  // decode batch's step time from prompt compute; the router sends such legs only when told to.
  bool allow_local_prefill = true;
  double drain_timeout_s = 30;  // on SIGTERM: finish or abort streams within this
  engine::ServingOptions serving;
  kv::TransferFlags transfer;
};

void RegisterDecodeFlags(Flags& flags, DecodeOptions* options);
// Cross-flag checks; errors name the flag. A cluster secret is required unless --local-prefill.
absl::Status ValidateDecodeOptions(const DecodeOptions& options);

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_NODE_DECODE_OPTIONS_H_
