// Options both sides of the KV handoff share: who this worker is, where its transfer endpoint
// listens, the timeouts and the cluster secret (kvtransfer/transfer_flags.h has the flags).
#ifndef TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_
#define TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_

#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "kvtransfer/transfer_flags.h"
#include "worker/handoff/handoff_clock.h"

namespace tandem::worker {

struct HandoffOptions {
  std::string worker_id;                     // unique in the cluster, e.g. "decode@10.0.0.2:8001"
  std::string served_model_name;             // part of the compatibility record
  std::string bootstrap_host = "127.0.0.1";  // prefill: where the bootstrap server listens
  int bootstrap_port = 8998;                 // prefill: 0 = ephemeral (tests)
  kv::TransferFlags transfer;                // backend, endpoint, lanes, timeouts
  std::string cluster_secret;                // already loaded (kv::LoadClusterSecret)
  NowFn now = MonoNow;                       // every deadline of the handoff reads this clock

  // The flags' timeouts (seconds, as SGLang names them) as the durations the handoff uses.
  // --bootstrap-timeout: a prefill leg waits this long for its room's registration, and a
  // decode worker this long for a prefill worker's handshake.
  absl::Duration bootstrap_timeout() const { return absl::Seconds(transfer.bootstrap_timeout_s); }
  // --transfer-timeout: a room's KV must land within this after its prefill starts computing.
  absl::Duration transfer_timeout() const { return absl::Seconds(transfer.transfer_timeout_s); }
  // A decode worker's budget for one room: the handshake and then the transfer.
  absl::Duration room_budget() const { return bootstrap_timeout() + transfer_timeout(); }
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_HANDOFF_OPTIONS_H_
