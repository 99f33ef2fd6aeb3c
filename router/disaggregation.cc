#include "router/disaggregation.h"

#include "router/admission.h"

namespace tandem::router {

const char* DisaggregationName(Disaggregation decision) {
  switch (decision) {
    case Disaggregation::kPd:
      return "pd";
    case Disaggregation::kLocalShort:
      return "local_short";
    case Disaggregation::kLocalSaturated:
      return "local_saturated";
  }
  return "pd";
}

bool ShortEnoughForLocalPrefill(const DisaggregationOptions& options, int64_t prompt_tokens) {
  return options.local_prefill_max_tokens > 0 && prompt_tokens <= options.local_prefill_max_tokens;
}

bool PrefillPoolSaturated(const DisaggregationOptions& options,
                          const std::vector<WorkerPtr>& prefills) {
  if (options.prefill_saturation_tokens <= 0 || prefills.empty()) return false;
  for (const WorkerPtr& w : prefills) {
    if (w->prefill_tokens() <= options.prefill_saturation_tokens) return false;
  }
  return true;
}

bool DecodeHasHeadroom(const proto::LoadReport& load, int64_t need_tokens) {
  if (load.total_kv_blocks() <= 0) return false;
  if (load.queued_requests() > 0) return false;
  return load.free_kv_blocks() >= KvBlocksFor(need_tokens, load.kv_block_size());
}

}  // namespace tandem::router
