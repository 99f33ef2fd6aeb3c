// Operator-facing flags of the KV transfer engine, shared by tandem-prefill and tandem-decode,
// and their translation into kv::EngineOptions. Names follow SGLang's
// (--disaggregation-transfer-backend, --disaggregation-ib-device).
#ifndef TANDEM_KVTRANSFER_TRANSFER_FLAGS_H_
#define TANDEM_KVTRANSFER_TRANSFER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace tandem::kv {

struct TransferFlags {
  std::string backend = "tcp";              // tcp | rdma
  std::string backend_alias;                // SGLang's name given for rdma (mooncake, nixl), or ""
  bool fallback_to_tcp = false;             // rdma unavailable: use tcp instead of exiting
  std::string ib_device;                    // rdma device ("" = first)
  std::string transfer_host = "127.0.0.1";  // where the transfer endpoint listens
  int transfer_port = 0;                    // 0 = ephemeral (advertised through the bootstrap)
  int lanes = 4;                            // connections / queue pairs per peer
  double bootstrap_timeout_s = 30;          // a room's handshake must finish within this
  double transfer_timeout_s = 60;   // a room's KV must land within this after prefill starts
  std::string cluster_secret;       // shared secret; prefer --cluster-secret-file
  std::string cluster_secret_file;  // file holding the secret (first line)
};

// Registers the flags above on `flags`; `out` must outlive flags.Parse().
// --disaggregation-transfer-backend takes tcp and rdma, and SGLang's RDMA engines' names, mooncake
// and nixl, as rdma (backend "rdma", backend_alias the name given): the KV moves over Tandem's
// own libibverbs engine between Tandem workers, as theirs do between SGLang's.
void RegisterTransferFlags(Flags& flags, TransferFlags* out);

// The cluster secret from --cluster-secret-file, --cluster-secret or the TANDEM_CLUSTER_SECRET
// environment variable, in that order. Errors: unreadable file, none given, shorter than 16 bytes.
absl::StatusOr<std::string> LoadClusterSecret(const TransferFlags& flags);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TRANSFER_FLAGS_H_
