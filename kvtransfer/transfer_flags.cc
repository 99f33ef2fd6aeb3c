#include "kvtransfer/transfer_flags.h"

#include <string>

#include "common/cluster_token.h"

namespace tandem::kv {

void RegisterTransferFlags(Flags& flags, TransferFlags* o) {
  flags
      .Add("--disaggregation-transfer-backend", &o->backend,
           "KV transfer backend: tcp or rdma (SGLang's mooncake and nixl mean rdma)")
      ->check(CLI::IsMember({"tcp", "rdma", "mooncake", "nixl"}))
      ->transform(CLI::Validator(
          [o](std::string& name) {
            o->backend_alias.clear();
            if (name == "mooncake" || name == "nixl") {
              o->backend_alias = name;
              name = "rdma";
            }
            return std::string();
          },
          "", "sglang-backend-alias"));
  flags.Add("--transfer-fallback-tcp", &o->fallback_to_tcp,
            "When the rdma backend cannot start, use tcp instead of exiting");
  flags.Add("--disaggregation-ib-device", &o->ib_device, "RDMA device name (default: the first)");
  flags.Add("--transfer-host", &o->transfer_host, "Address the KV transfer endpoint listens on");
  flags.Add("--transfer-port", &o->transfer_port, "KV transfer endpoint port (0: ephemeral)")
      ->check(CLI::Range(0, 65535));
  flags.Add("--transfer-lanes", &o->lanes, "Connections (tcp) or queue pairs (rdma) per peer")
      ->check(CLI::Range(1, 64));
  flags
      .Add("--bootstrap-timeout", &o->bootstrap_timeout_s,
           "Seconds a room may take to pair its prefill and decode workers")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--transfer-timeout", &o->transfer_timeout_s,
           "Seconds a room's KV may take to land once its prefill started")
      ->check(CLI::PositiveNumber);
  flags.Add("--cluster-secret", &o->cluster_secret,
            "Shared secret every worker must prove (prefer --cluster-secret-file)");
  flags.Add("--cluster-secret-file", &o->cluster_secret_file,
            "File whose first line is the cluster secret");
}

absl::StatusOr<std::string> LoadClusterSecret(const TransferFlags& o) {
  return ResolveClusterSecret(o.cluster_secret_file, o.cluster_secret, /*required=*/true);
}

}  // namespace tandem::kv
