#include "kvtransfer/descriptor.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/wire.h"

namespace tandem::kv {
namespace {

constexpr char kMagic[4] = {'T', 'K', 'V', 'D'};

template <typename T>
absl::Status Mismatch(const char* field, const T& local, const T& peer) {
  return absl::FailedPreconditionError(
      absl::StrCat("incompatible peer: ", field, ": local ", local, ", peer ", peer));
}

void WriteCompat(const CompatibilityRecord& c, WireWriter& w) {
  w.Bytes(c.model_id);
  w.U32(c.layer_count);
  w.U32(c.kv_heads);
  w.U32(c.head_dim);
  w.Bytes(c.dtype);
  w.U32(c.block_size);
  w.Bytes(c.layout);
}

absl::StatusOr<CompatibilityRecord> ReadCompat(WireReader& r) {
  CompatibilityRecord c;
  ASSIGN_OR_RETURN(c.model_id, r.Bytes("compat.model_id", kMaxDescriptorString));
  ASSIGN_OR_RETURN(c.layer_count, r.U32("compat.layer_count"));
  ASSIGN_OR_RETURN(c.kv_heads, r.U32("compat.kv_heads"));
  ASSIGN_OR_RETURN(c.head_dim, r.U32("compat.head_dim"));
  ASSIGN_OR_RETURN(c.dtype, r.Bytes("compat.dtype", kMaxDescriptorString));
  ASSIGN_OR_RETURN(c.block_size, r.U32("compat.block_size"));
  ASSIGN_OR_RETURN(c.layout, r.Bytes("compat.layout", kMaxDescriptorString));
  return c;
}

}  // namespace

absl::Status CheckCompatible(const CompatibilityRecord& local, const CompatibilityRecord& peer) {
  if (local.model_id != peer.model_id) return Mismatch("model_id", local.model_id, peer.model_id);
  if (local.layer_count != peer.layer_count)
    return Mismatch("layer_count", local.layer_count, peer.layer_count);
  if (local.kv_heads != peer.kv_heads) return Mismatch("kv_heads", local.kv_heads, peer.kv_heads);
  if (local.head_dim != peer.head_dim) return Mismatch("head_dim", local.head_dim, peer.head_dim);
  if (local.dtype != peer.dtype) return Mismatch("dtype", local.dtype, peer.dtype);
  if (local.block_size != peer.block_size)
    return Mismatch("block_size", local.block_size, peer.block_size);
  if (local.layout != peer.layout) return Mismatch("layout", local.layout, peer.layout);
  return absl::OkStatus();
}

const RegionInfo* Descriptor::FindRegion(RegionId id) const {
  for (const RegionInfo& r : regions) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

void EncodeCompat(const CompatibilityRecord& c, std::string* out) {
  WireWriter w(out);
  WriteCompat(c, w);
}

absl::StatusOr<CompatibilityRecord> DecodeCompat(const std::string& bytes) {
  WireReader r(bytes.data(), bytes.size());
  ASSIGN_OR_RETURN(CompatibilityRecord c, ReadCompat(r), "compatibility record: ");
  RETURN_IF_ERROR(r.ExpectEnd("compatibility record"));
  return c;
}

std::string EncodeDescriptor(const Descriptor& d) {
  std::string out;
  WireWriter w(&out);
  w.Raw(kMagic, sizeof(kMagic));
  w.U16(kDescriptorVersion);
  w.Bytes(d.backend);
  w.Bytes(d.engine_name);
  w.U32(static_cast<uint32_t>(d.endpoints.size()));
  for (const std::string& e : d.endpoints) w.Bytes(e);
  w.U32(static_cast<uint32_t>(d.regions.size()));
  for (const RegionInfo& r : d.regions) {
    w.U32(r.id);
    w.U64(r.size);
    w.U8(r.restricted ? 1 : 0);
    w.U64(r.remote_addr);
    w.U32(r.rkey);
  }
  WriteCompat(d.compat, w);
  return out;
}

absl::StatusOr<Descriptor> DecodeDescriptor(const std::string& bytes) {
  WireReader r(bytes.data(), bytes.size());
  char magic[4];
  RETURN_IF_ERROR(r.Raw(magic, 4, "magic"), "descriptor: ");
  if (std::memcmp(magic, kMagic, 4) != 0) {
    return absl::InvalidArgumentError("descriptor: bad magic (not a transfer engine descriptor)");
  }
  ASSIGN_OR_RETURN(uint16_t version, r.U16("version"), "descriptor: ");
  if (version != kDescriptorVersion) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor: version ", version,
                                                   " not supported (this build reads ",
                                                   kDescriptorVersion, ")"));
  }
  Descriptor d;
  ASSIGN_OR_RETURN(d.backend, r.Bytes("backend", 64), "descriptor: ");
  ASSIGN_OR_RETURN(d.engine_name, r.Bytes("engine_name", kMaxDescriptorString), "descriptor: ");
  ASSIGN_OR_RETURN(uint32_t n_endpoints, r.U32("endpoint count"), "descriptor: ");
  if (n_endpoints > kMaxDescriptorEndpoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor: ", n_endpoints, " endpoints, limit ", kMaxDescriptorEndpoints));
  }
  for (uint32_t i = 0; i < n_endpoints; ++i) {
    ASSIGN_OR_RETURN(std::string e, r.Bytes("endpoint", kMaxDescriptorString), "descriptor: ");
    d.endpoints.push_back(std::move(e));
  }
  ASSIGN_OR_RETURN(uint32_t n_regions, r.U32("region count"), "descriptor: ");
  // Each region takes 25 bytes; reject counts the remaining bytes cannot hold before reserving.
  if (n_regions > kMaxDescriptorRegions || n_regions > r.remaining() / 25) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor: region count ", n_regions, " exceeds the limit or the data"));
  }
  std::set<RegionId> seen;
  d.regions.reserve(n_regions);
  for (uint32_t i = 0; i < n_regions; ++i) {
    RegionInfo ri;
    ASSIGN_OR_RETURN(ri.id, r.U32("region.id"), "descriptor: ");
    ASSIGN_OR_RETURN(ri.size, r.U64("region.size"), "descriptor: ");
    ASSIGN_OR_RETURN(uint8_t restricted, r.U8("region.restricted"), "descriptor: ");
    if (restricted > 1) return absl::InvalidArgumentError("descriptor: region.restricted not 0/1");
    ri.restricted = restricted == 1;
    ASSIGN_OR_RETURN(ri.remote_addr, r.U64("region.remote_addr"), "descriptor: ");
    ASSIGN_OR_RETURN(ri.rkey, r.U32("region.rkey"), "descriptor: ");
    if (!seen.insert(ri.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("descriptor: duplicate region id ", ri.id));
    }
    d.regions.push_back(ri);
  }
  ASSIGN_OR_RETURN(d.compat, ReadCompat(r), "descriptor: ");
  RETURN_IF_ERROR(r.ExpectEnd("descriptor"));
  return d;
}

absl::StatusOr<Descriptor> DecodePeerDescriptor(const std::string& backend,
                                                const std::string& bytes,
                                                const CompatibilityRecord& local) {
  const std::string prefix = absl::StrCat(backend, ": ");
  ASSIGN_OR_RETURN(Descriptor d, DecodeDescriptor(bytes), prefix);
  if (d.backend != backend || d.endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "descriptor is for backend '", d.backend, "', not ", backend));
  }
  RETURN_IF_ERROR(CheckCompatible(local, d.compat), prefix);
  return d;
}

}  // namespace tandem::kv
