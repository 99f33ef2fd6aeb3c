// The engine descriptor: what a peer needs to write into this engine's memory, as opaque,
// versioned, little-endian bytes. It names the backend, the engine, the endpoints to connect to,
// the registered regions (id, size, whether windows restrict them, and for rdma the remote
// address and rkey) and the compatibility record of the KV memory.
//
// Encoding (version 1): "TKVD" u16 version, then fields in declaration order; strings are
// u32-length-prefixed. DecodeDescriptor accepts untrusted bytes: every length is checked against
// the limits below and any malformed input is an InvalidArgument naming the field.
// Plain values; thread-compatible.
#ifndef TANDEM_KVTRANSFER_DESCRIPTOR_H_
#define TANDEM_KVTRANSFER_DESCRIPTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::kv {

using RegionId = uint32_t;

inline constexpr uint16_t kDescriptorVersion = 1;
inline constexpr size_t kMaxDescriptorString = 4096;
inline constexpr size_t kMaxDescriptorRegions = 65536;
inline constexpr size_t kMaxDescriptorEndpoints = 64;

// What the KV memory holds. Two engines exchange bytes only if their records are equal.
struct CompatibilityRecord {
  std::string model_id;
  uint32_t layer_count = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  std::string dtype;        // e.g. "bf16"
  uint32_t block_size = 0;  // tokens per KV block
  std::string layout;       // e.g. "layer/kv/block/head/dim"
  bool operator==(const CompatibilityRecord&) const = default;
};

// OK if equal; otherwise FailedPrecondition naming the first differing field and both values:
// "incompatible peer: layer_count: local 24, peer 28".
absl::Status CheckCompatible(const CompatibilityRecord& local, const CompatibilityRecord& peer);

struct RegionInfo {
  RegionId id = 0;
  uint64_t size = 0;
  bool restricted = false;
  uint64_t remote_addr = 0;  // rdma: virtual address of the MR; 0 otherwise
  uint32_t rkey = 0;         // rdma: remote key; 0 otherwise
  bool operator==(const RegionInfo&) const = default;
};

struct Descriptor {
  std::string backend;  // "tcp", "rdma", "fake"
  std::string engine_name;
  std::vector<std::string> endpoints;  // backend-specific addresses, e.g. "tcp://10.0.0.2:5555"
  std::vector<RegionInfo> regions;
  CompatibilityRecord compat;
  bool operator==(const Descriptor&) const = default;

  // The region with `id`, or nullptr.
  const RegionInfo* FindRegion(RegionId id) const;
};

std::string EncodeDescriptor(const Descriptor& d);
absl::StatusOr<Descriptor> DecodeDescriptor(const std::string& bytes);

// What every backend's ImportPeer checks first: `bytes` decodes, names `backend` and at least one
// endpoint, and its compatibility record equals `local`. Errors start with "<backend>: ".
absl::StatusOr<Descriptor> DecodePeerDescriptor(const std::string& backend,
                                                const std::string& bytes,
                                                const CompatibilityRecord& local);

// Encodes / decodes only the compatibility record (sent in the handshake).
void EncodeCompat(const CompatibilityRecord& c, std::string* out);
absl::StatusOr<CompatibilityRecord> DecodeCompat(const std::string& bytes);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_DESCRIPTOR_H_
