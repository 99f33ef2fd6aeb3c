// The options tandem-prefill and tandem-decode share: where they listen, SGLang's
// --disaggregation-mode naming the binary's role, the drain on SIGTERM, the serving engine
// (engine/serving_options.h, with the rest of an SGLang launch_server line) and the KV transfer.
// PrefillOptions and DecodeOptions extend it with their own flags and defaults.
#ifndef TANDEM_WORKER_WORKER_OPTIONS_H_
#define TANDEM_WORKER_WORKER_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "common/flags.h"
#include "engine/serving_options.h"
#include "kvtransfer/transfer_flags.h"

namespace tandem::worker {

struct WorkerOptions {
  std::string host =
      "127.0.0.1";       // gRPC (router legs), HTTP and, on prefill, bootstrap listen here
  int port = 0;          // gRPC
  int http_port = 0;     // /metrics, /health (0: ephemeral)
  int session_port = 0;  // the session socket (0: ephemeral, -1: none)
  std::string disaggregation_mode;  // must be the binary's role ("prefill" or "decode")
  double drain_timeout_s = 30;      // on SIGTERM: finish or abort in-flight legs within this
  engine::ServingOptions serving;
  kv::TransferFlags transfer;
};

// Registers the shared flags for the binary of `role` ("prefill" or "decode", used in help
// texts); `options` must outlive flags.Parse().
void RegisterWorkerFlags(Flags& flags, const std::string& role, WorkerOptions* options);

// --disaggregation-mode names `role` (else an error naming the other binary), --port and
// --http-port differ, the serving options are valid. Errors name the flag.
absl::Status ValidateWorkerOptions(const WorkerOptions& options, const std::string& role);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_WORKER_OPTIONS_H_
