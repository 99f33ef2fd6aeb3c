// Options both sides of the KV handoff share: who this worker is, where its transfer endpoint
// listens, the timeouts and the cluster secret (kvtransfer/transfer_flags.h has the flags).
#ifndef TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_
#define TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_

#include <string>

#include "kvtransfer/transfer_flags.h"

namespace tandem::worker {

struct HandoffOptions {
  std::string worker_id;                     // unique in the cluster, e.g. "decode@10.0.0.2:8001"
  std::string served_model_name;             // part of the compatibility record
  std::string bootstrap_host = "127.0.0.1";  // prefill: where the bootstrap server listens
  int bootstrap_port = 8998;                 // prefill: 0 = ephemeral (tests)
  kv::TransferFlags transfer;                // backend, endpoint, lanes, timeouts
  std::string cluster_secret;                // already loaded (kv::LoadClusterSecret)
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_
