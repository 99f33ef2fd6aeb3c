#include "worker/handoff/kv_geometry.h"

#include <openssl/sha.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/kernels/matmul.h"
#include "kvtransfer/factory.h"
#include "spdlog/spdlog.h"

namespace tandem::worker {

kv::CompatibilityRecord KvCompatibility(const std::string& served_model_name,
                                        const engine::ModelConfig& m,
                                        const engine::KvCacheStorage& storage, bool int8_linear) {
  const std::string canonical =
      absl::StrCat(m.model_type, "|", m.hidden_size, "|", m.num_layers, "|", m.num_heads, "|",
                   m.num_kv_heads, "|", m.head_dim, "|", m.intermediate_size, "|", m.vocab_size,
                   "|", m.rope_theta, "|", m.rms_norm_eps, "|", m.tie_word_embeddings, "|",
                   m.qk_norm, "|", m.attention_bias, int8_linear ? "|w8a8" : "",
                   // The own kernels give the same bits on every SIMD path; oneDNN does not.
                   engine::SelectedGemmBackend() == engine::GemmBackend::kOnednn
                       ? absl::StrCat("|", engine::GemmBackendDescription())
                       : "",
                   // Mixture of experts: the experts change the tokens, not the KV shape, but a
                   // pair serving different experts would not give the colocated tokens.
                   m.moe.num_experts == 0
                       ? ""
                       : absl::StrCat("|moe|", m.moe.num_experts, "|", m.moe.num_experts_per_tok,
                                      "|", m.moe.moe_intermediate_size, "|", m.moe.norm_topk_prob,
                                      "|", m.moe.decoder_sparse_step, "|",
                                      absl::StrJoin(m.moe.mlp_only_layers, ",")));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(canonical.data()), canonical.size(), digest);
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  kv::CompatibilityRecord r;
  r.model_id = absl::StrCat(served_model_name, "/", hex);
  r.layer_count = static_cast<uint32_t>(storage.num_layers());
  r.kv_heads = static_cast<uint32_t>(storage.num_kv_heads());
  r.head_dim = static_cast<uint32_t>(storage.head_dim());
  r.dtype = "bf16";
  r.block_size = static_cast<uint32_t>(storage.block_size());
  r.layout = kKvLayoutName;
  return r;
}

proto::KvLayout ToProto(const kv::CompatibilityRecord& r) {
  proto::KvLayout l;
  l.set_model_id(r.model_id);
  l.set_num_layers(static_cast<int32_t>(r.layer_count));
  l.set_num_kv_heads(static_cast<int32_t>(r.kv_heads));
  l.set_head_dim(static_cast<int32_t>(r.head_dim));
  l.set_dtype(r.dtype);
  l.set_block_size(static_cast<int32_t>(r.block_size));
  l.set_layout(r.layout);
  return l;
}

kv::CompatibilityRecord FromProto(const proto::KvLayout& l) {
  kv::CompatibilityRecord r;
  r.model_id = l.model_id();
  r.layer_count = static_cast<uint32_t>(l.num_layers());
  r.kv_heads = static_cast<uint32_t>(l.num_kv_heads());
  r.head_dim = static_cast<uint32_t>(l.head_dim());
  r.dtype = l.dtype();
  r.block_size = static_cast<uint32_t>(l.block_size());
  r.layout = l.layout();
  return r;
}

std::vector<kv::WriteOp> LayerWrites(const engine::KvCacheStorage& g, int64_t layer,
                                     std::span<const int32_t> src_blocks,
                                     std::span<const int32_t> dst_blocks, int64_t begin,
                                     int64_t end) {
  std::vector<kv::WriteOp> ops;
  const int64_t bs = g.block_size();
  const uint64_t row = static_cast<uint64_t>(g.num_kv_heads() * g.head_dim()) * 2;  // bf16
  const uint64_t half = static_cast<uint64_t>(g.block_bytes() / 2);
  auto add = [&ops](uint64_t src, uint64_t dst, uint64_t len) {
    if (!ops.empty()) {
      kv::WriteOp& last = ops.back();
      if (last.local_offset + last.length == src && last.remote_offset + last.length == dst) {
        last.length += len;
        return;
      }
    }
    ops.push_back({kKvRegion, src, kKvRegion, dst, len});
  };
  const uint64_t layer_base = static_cast<uint64_t>(g.LayerOffset(layer));
  for (int64_t p = begin; p < end;) {
    const int64_t block = p / bs;
    const int64_t slot = p % bs;
    const int64_t n = std::min(end - p, bs - slot);
    const uint64_t src =
        layer_base + static_cast<uint64_t>(src_blocks[static_cast<size_t>(block)]) *
                         static_cast<uint64_t>(g.block_bytes());
    const uint64_t dst =
        layer_base + static_cast<uint64_t>(dst_blocks[static_cast<size_t>(block)]) *
                         static_cast<uint64_t>(g.block_bytes());
    const uint64_t off = static_cast<uint64_t>(slot) * row;
    const uint64_t len = static_cast<uint64_t>(n) * row;
    if (slot == 0 && n == bs) {  // whole block: K and V are one contiguous run
      add(src, dst, 2 * half);
    } else {
      add(src + off, dst + off, len);
      add(src + half + off, dst + half + off, len);
    }
    p += n;
  }
  return ops;
}

absl::StatusOr<kv::TransferEnginePtr> StartKvTransfer(const kv::TransferFlags& transfer,
                                                      kv::EngineOptions options,
                                                      engine::KvCacheStorage& storage) {
  options.listen_host = transfer.transfer_host;
  options.listen_port = transfer.transfer_port;
  options.lanes = transfer.lanes;
  options.rdma_device = transfer.ib_device;
  // The name the operator gave (SGLang's mooncake or nixl stand for rdma: transfer_flags.h).
  const std::string& given =
      transfer.backend_alias.empty() ? transfer.backend : transfer.backend_alias;
  if (given != transfer.backend) {
    spdlog::info("--disaggregation-transfer-backend {}: Tandem's own {} engine moves the KV", given,
                 transfer.backend);
  }
  auto engine = kv::CreateTransferEngine(transfer.backend, options);
  if (!engine.ok() && transfer.fallback_to_tcp && transfer.backend != "tcp") {
    spdlog::warn("transfer backend {} unavailable ({}); falling back to tcp as asked", given,
                 std::string(engine.status().message()));
    engine = kv::CreateTransferEngine("tcp", options);
  }
  if (!engine.ok()) {
    return absl::Status(
        engine.status().code(),
        absl::StrCat("--disaggregation-transfer-backend ", given, ": ", engine.status().message()));
  }
  kv::TransferEnginePtr started = std::move(*engine);
  RETURN_IF_ERROR(started->RegisterRegion(
      {kKvRegion, storage.base(), static_cast<uint64_t>(storage.total_bytes()), false}));
  if (absl::Status s = started->Start(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--transfer-port: ", s.message()));
  }
  return started;
}

}  // namespace tandem::worker
