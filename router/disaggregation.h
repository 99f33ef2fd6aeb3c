// Conditional disaggregation (docs/router.md "Conditional disaggregation"): in PD mode the router
// decides per attempt whether a prompt is prefilled by a prefill worker and its KV moved (PD),
// or by the chosen decode worker itself, as a colocated leg (no room, no bootstrap host; the
// decode worker computes the prompt with its own engine: tandem-decode --allow-local-prefill).
//
//   local_short      the prompt's uncached tokens on the decode worker are at most
//                    local_prefill_max_tokens. A disaggregated decode worker keeps no radix
//                    cache, so nothing of a prompt is cached there: the uncached part is the
//                    whole prompt.
//   local_saturated  every available prefill worker has more than prefill_saturation_tokens
//                    prompt tokens of this router's prefill legs in flight (Worker::
//                    prefill_tokens: counted from selection until the leg answers, so a burst
//                    sees its own legs; polled reports lag up to --worker-load-check-interval),
//                    and the chosen decode worker has KV headroom (DecodeHasHeadroom).
//   pd               otherwise.
//
// Pure functions over the registry's workers and their last load reports; thread-safe as the
// Worker accessors they read.
#ifndef TANDEM_ROUTER_DISAGGREGATION_H_
#define TANDEM_ROUTER_DISAGGREGATION_H_

#include <cstdint>
#include <vector>

#include "proto/worker.pb.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {

struct DisaggregationOptions {
  // --pd-local-prefill-max-tokens: prompts of at most this many uncached tokens are prefilled on
  // their decode worker (0: never for this reason).
  int64_t local_prefill_max_tokens = 0;
  // --pd-prefill-saturation-tokens: the prefill pool is saturated when every available prefill
  // worker has more than this many prompt tokens in flight (0: never).
  int64_t prefill_saturation_tokens = 0;

  bool enabled() const { return local_prefill_max_tokens > 0 || prefill_saturation_tokens > 0; }
};

enum class Disaggregation { kPd, kLocalShort, kLocalSaturated };

// "pd" | "local_short" | "local_saturated": the metric label.
const char* DisaggregationName(Disaggregation decision);

// The short-prompt rule: `prompt_tokens` (all uncached on a decode worker) <= the threshold.
bool ShortEnoughForLocalPrefill(const DisaggregationOptions& options, int64_t prompt_tokens);

// The saturation rule's first half: the threshold is set, `prefills` is not empty and every one
// of them has more than prefill_saturation_tokens prompt tokens in flight.
bool PrefillPoolSaturated(const DisaggregationOptions& options,
                          const std::vector<WorkerPtr>& prefills);

// The saturation rule's second half: the decode worker's last load report shows no queued
// request and free blocks for `need_tokens` (prompt + max_new_tokens). No report yet (zero total
// blocks): no headroom is known, so false.
bool DecodeHasHeadroom(const proto::LoadReport& load, int64_t need_tokens);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_DISAGGREGATION_H_
