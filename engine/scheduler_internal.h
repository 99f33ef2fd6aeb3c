// The scheduler's per-request state and bookkeeping helpers, shared by its implementation files
// (scheduler.cc: requests and outputs; scheduler_admission.cc: blocks, prompt sharing and
// admission; scheduler_step.cc: one batch). Not part of the engine's interface.
#ifndef TANDEM_ENGINE_SCHEDULER_INTERNAL_H_
#define TANDEM_ENGINE_SCHEDULER_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/scheduler.h"

namespace tandem::engine {
namespace scheduler_internal {

// Block accounting is the scheduler's own bookkeeping: a failure here is a bug, not bad input,
// and continuing would corrupt other requests' KV.
inline void CheckBookkeeping(const absl::Status& status, const char* what) {
  TANDEM_CHECK_OK(status, absl::StrCat("KV block bookkeeping in ", what));
}

}  // namespace scheduler_internal

struct Scheduler::Sequence {
  Request req;
  State state = State::kWaiting;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t num_computed = 0;   // positions whose K/V is in the cache
  int64_t kv_reported = 0;    // kPrefillOnly: positions reported through on_kv_layer
  int64_t cached_upto = 0;    // positions offered to the radix cache
  int64_t cached_tokens = 0;  // prompt tokens matched at first admission
  bool admitted_once = false;
  BlockTable table;
  // Prompt sharing: waiting for the leader's prompt KV (share_prompt_with), and the references
  // taken on the leader's blocks that admission moves into `table` (held while kWaiting).
  bool share_pending = false;
  std::vector<int32_t> shared_blocks;
  std::optional<Sampler> sampler;
  std::optional<OutputProcessor> output;
  // Prompt logprobs (return_logprob): the logits of positions [score_start, prompt_len - 1)
  // score the prompt tokens after them. -1: none asked for.
  int64_t score_start = -1;
  std::vector<float> input_logprobs;
  std::vector<std::vector<TokenLogprob>> input_top;
  bool input_sent = false;
  // The next position whose logits score a prompt token; prompt_len - 1 when all are in.
  int64_t next_scored() const {
    if (score_start < 0 || input_sent) return prompt_len - 1;
    return score_start + static_cast<int64_t>(input_logprobs.size());
  }
  // The most known tokens the radix cache may serve: positions still to score need logits, and
  // the last known token is computed for its own.
  int64_t match_limit() const {
    return std::min(static_cast<int64_t>(tokens.size()) - 1, next_scored());
  }
  Clock::time_point submitted, admitted, first_token;
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHEDULER_INTERNAL_H_
