#include "kvtransfer/factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kvtransfer/fake/fake_engine.h"
#include "kvtransfer/rdma/rdma_engine.h"
#include "kvtransfer/rdma/verbs.h"
#include "kvtransfer/tcp/tcp_engine.h"

namespace tandem::kv {

std::vector<std::string> TransferBackends() { return {"tcp", "rdma", "fake"}; }

absl::StatusOr<TransferEnginePtr> CreateTransferEngine(const std::string& backend,
                                                       EngineOptions options) {
  if (backend == "tcp") return CreateTcpEngine(std::move(options));
  if (backend == "fake") return CreateFakeEngine(std::move(options));
  if (backend == "rdma") {
    auto verbs =
        rdma::CreateIbverbs(options.rdma_device, options.rdma_port, options.rdma_gid_index);
    if (!verbs.ok()) return verbs.status();
    return CreateRdmaEngine(std::move(options), std::move(*verbs));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transfer backend '", backend,
                   "'; expected one of: ", absl::StrJoin(TransferBackends(), ", ")));
}

}  // namespace tandem::kv
