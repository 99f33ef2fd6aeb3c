// The in-process `fake` backend: engines in one process write into each other with memcpy.
//
// For tests of the layers above (prefill/decode daemons). It applies the same checks as the
// real backends (local and remote bounds, windows, cluster secret, compatibility record) and
// follows the same state machines (transfer_engine.h). Engines find each other through a
// process-wide registry keyed by engine name; the descriptor's endpoint is "fake://<name>".
// One worker thread per engine applies batches and notifications in submission order, so a
// notification is delivered after every earlier batch to that peer. Options: `fake_delay`
// delays every batch, `fake_fail_every` fails every N-th batch with an injected error.
// Thread-safe.
#ifndef TANDEM_KVTRANSFER_FAKE_FAKE_ENGINE_H_
#define TANDEM_KVTRANSFER_FAKE_FAKE_ENGINE_H_

#include "absl/status/statusor.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

absl::StatusOr<TransferEnginePtr> CreateFakeEngine(EngineOptions options);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_FAKE_FAKE_ENGINE_H_
