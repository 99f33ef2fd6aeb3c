// What a worker's KV cache looks like to its peers, and the writes that ship part of it.
//
// The handshake record (kv::CompatibilityRecord, also sent as proto::KvLayout on the bootstrap
// channel) names the model and every dimension of the layer-major layout, so a prefill worker
// refuses a decode worker whose blocks would be misread. LayerWrites turns "layer l of positions
// [begin, end) is final" into transfer writes from the prefill side's blocks into the decode
// side's: per block touched, one write for K's slots and one for V's (adjacent runs coalesced).
#ifndef TANDEM_WORKER_HANDOFF_KV_GEOMETRY_H_
#define TANDEM_WORKER_HANDOFF_KV_GEOMETRY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/transfer_engine.h"
#include "kvtransfer/transfer_flags.h"
#include "proto/kv_control.pb.h"

namespace tandem::worker {

inline constexpr kv::RegionId kKvRegion = 1;
inline constexpr char kKvLayoutName[] = "layer-major/[block][kv][token][head][dim]";

// model_id = served model name + "/" + the first 16 hex digits of SHA-256 of config.json's
// canonical fields (with a mixture of experts, its settings too) and how the linear layers compute
// (`int8_linear`: W8A8; and under TANDEM_GEMM=onednn the oneDNN implementation, whose bits differ
// from the own kernels' and between ISAs: engine/kernels/matmul.h "GEMM backends"), so two workers
// agree only on the same model run the same way (a bf16 prefill worker never feeds an int8 decode
// one, nor an own-kernel worker a oneDNN one).
kv::CompatibilityRecord KvCompatibility(const std::string& served_model_name,
                                        const engine::ModelConfig& model,
                                        const engine::KvCacheStorage& storage, bool int8_linear);
proto::KvLayout ToProto(const kv::CompatibilityRecord& record);

// Creates the transfer engine `transfer.backend` names (falling back to tcp only when
// `transfer.fallback_to_tcp` asks for it), registers all of `storage` as kKvRegion and starts it.
// Errors name the flag (--disaggregation-transfer-backend, --transfer-port).
absl::StatusOr<kv::TransferEnginePtr> StartKvTransfer(const kv::TransferFlags& transfer,
                                                      kv::EngineOptions options,
                                                      engine::KvCacheStorage& storage);
kv::CompatibilityRecord FromProto(const proto::KvLayout& layout);

// Writes for layer `layer`, positions [begin, end): position p lives in src_blocks[p / bs] on
// this side and dst_blocks[p / bs] on the peer. Both block lists must cover `end` (checked by
// the caller). Offsets are within kKvRegion on both sides (identical geometry).
std::vector<kv::WriteOp> LayerWrites(const engine::KvCacheStorage& geometry, int64_t layer,
                                     std::span<const int32_t> src_blocks,
                                     std::span<const int32_t> dst_blocks, int64_t begin,
                                     int64_t end);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_KV_GEOMETRY_H_
