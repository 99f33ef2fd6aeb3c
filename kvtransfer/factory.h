// The one place that knows every transfer backend.
//
// CreateTransferEngine("tcp" | "rdma" | "fake", options) returns an engine in kConfiguring, or an
// error that says why the backend cannot run here (e.g. no RDMA device) and what to use instead.
// Thread-safe.
#ifndef TANDEM_KVTRANSFER_FACTORY_H_
#define TANDEM_KVTRANSFER_FACTORY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

absl::StatusOr<TransferEnginePtr> CreateTransferEngine(const std::string& backend,
                                                       EngineOptions options);

// The backend names CreateTransferEngine accepts.
std::vector<std::string> TransferBackends();

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_FACTORY_H_
