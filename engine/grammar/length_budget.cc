#include "engine/grammar/length_budget.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace tandem::engine::grammar {

bool RestrictMaskToBudget(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                          int64_t tokens_after, bool eos_selectable, std::span<uint32_t> mask) {
  tokens_after = std::max<int64_t>(tokens_after, 0);
  // Every try below starts from this state: the search over its chart is shared.
  GrammarMatcher::MinBytesMemo memo;
  const size_t frozen_sets = matcher.num_bytes() + 1;
  if (matcher.MinBytesToComplete(&memo, frozen_sets) + kLengthBudgetSlackBytes < tokens_after) {
    return false;
  }
  // The shortest completion after every allowed byte-carrying token. Consecutive tokens share
  // the matcher's bytes up to their common prefix, so only the differing tail is re-accepted.
  std::vector<std::pair<int32_t, int64_t>> after;  // (token, shortest completion after it)
  std::string accepted;                            // the bytes the matcher holds beyond its start
  // EOS (allowed only on a complete output) leaves nothing to complete.
  bool eos_allowed = false;
  for (int32_t id : vocabulary.eos_token_ids()) eos_allowed |= MaskAllows(mask, id);
  int64_t best = eos_allowed && eos_selectable ? 0 : std::numeric_limits<int64_t>::max();
  for (int32_t id = 0; id < vocabulary.vocab_size(); ++id) {
    if (!MaskAllows(mask, id) || vocabulary.is_eos(id)) continue;
    const std::string& bytes = vocabulary.token_bytes(id);
    size_t common = 0;
    while (common < accepted.size() && common < bytes.size() && accepted[common] == bytes[common]) {
      ++common;
    }
    matcher.Rollback(accepted.size() - common);
    accepted.resize(common);
    if (!matcher.AcceptString(std::string_view(bytes).substr(common))) {
      // The mask allowed the token, so only a recognizer limit refuses it now: leave it to the
      // sampler, which reports the matcher's status when it is drawn.
      continue;
    }
    accepted = bytes;
    const int64_t shortest = matcher.MinBytesToComplete(&memo, frozen_sets);
    after.emplace_back(id, shortest);
    best = std::min(best, shortest);
  }
  matcher.Rollback(accepted.size());
  const int64_t bound = std::max(tokens_after, best);
  bool narrowed = false;
  for (const auto& [id, shortest] : after) {
    if (shortest > bound) {
      mask[id / 32] &= ~(1u << (id % 32));
      narrowed = true;
    }
  }
  return narrowed;
}

}  // namespace tandem::engine::grammar
