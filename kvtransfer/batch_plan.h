// Turns a batch of writes into slices for the wire: shared by the tcp and rdma backends.
//
// Planning changes nothing; it only computes. Ops are ordered by (remote region, remote offset),
// adjacent ops whose local and remote ranges are both contiguous are merged (coalescing), the
// result is cut into slices of at most `slice_bytes`, and slices are assigned round-robin to
// `lanes` starting at `first_lane`. The last slice on each lane is flagged: the receiver
// acknowledges it for the whole batch on that lane. Zero-length ops are dropped.
#ifndef TANDEM_KVTRANSFER_BATCH_PLAN_H_
#define TANDEM_KVTRANSFER_BATCH_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

struct PlannedSlice {
  WriteOp op;
  int lane = 0;
  bool last_on_lane = false;
};

// Ops after sorting and merging (exposed for tests).
std::vector<WriteOp> CoalesceOps(absl::Span<const WriteOp> ops);

std::vector<PlannedSlice> PlanBatch(absl::Span<const WriteOp> ops, uint64_t slice_bytes, int lanes,
                                    int first_lane);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_BATCH_PLAN_H_
