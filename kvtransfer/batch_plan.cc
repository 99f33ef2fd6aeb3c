#include "kvtransfer/batch_plan.h"

#include <algorithm>

namespace tandem::kv {

std::vector<WriteOp> CoalesceOps(absl::Span<const WriteOp> ops) {
  std::vector<WriteOp> sorted;
  sorted.reserve(ops.size());
  for (const WriteOp& op : ops) {
    if (op.length > 0) sorted.push_back(op);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const WriteOp& a, const WriteOp& b) {
    if (a.remote_region != b.remote_region) return a.remote_region < b.remote_region;
    return a.remote_offset < b.remote_offset;
  });
  std::vector<WriteOp> merged;
  merged.reserve(sorted.size());
  for (const WriteOp& op : sorted) {
    if (!merged.empty()) {
      WriteOp& prev = merged.back();
      if (prev.remote_region == op.remote_region && prev.local_region == op.local_region &&
          prev.remote_offset + prev.length == op.remote_offset &&
          prev.local_offset + prev.length == op.local_offset) {
        prev.length += op.length;
        continue;
      }
    }
    merged.push_back(op);
  }
  return merged;
}

std::vector<PlannedSlice> PlanBatch(absl::Span<const WriteOp> ops, uint64_t slice_bytes, int lanes,
                                    int first_lane) {
  if (slice_bytes == 0) slice_bytes = 1;
  if (lanes < 1) lanes = 1;
  std::vector<PlannedSlice> slices;
  int lane = first_lane % lanes;
  for (const WriteOp& op : CoalesceOps(ops)) {
    for (uint64_t done = 0; done < op.length; done += slice_bytes) {
      PlannedSlice s;
      s.op = op;
      s.op.local_offset += done;
      s.op.remote_offset += done;
      s.op.length = std::min(slice_bytes, op.length - done);
      s.lane = lane;
      slices.push_back(s);
      lane = (lane + 1) % lanes;
    }
  }
  std::vector<bool> seen(lanes, false);
  for (auto it = slices.rbegin(); it != slices.rend(); ++it) {
    if (!seen[it->lane]) {
      seen[it->lane] = true;
      it->last_on_lane = true;
    }
  }
  return slices;
}

}  // namespace tandem::kv
