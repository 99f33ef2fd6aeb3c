#include "engine/grammar/length_budget.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace tandem::engine::grammar {

namespace {

// (token, shortest completion after it) for every allowed byte-carrying token of `mask`, the
// search over the chart before the tokens shared through `memo`.
std::vector<std::pair<int32_t, int64_t>> ShortestAfterTokens(GrammarMatcher& matcher,
                                                             const TokenVocabulary& vocabulary,
                                                             std::span<const uint32_t> mask,
                                                             GrammarMatcher::MinBytesMemo& memo,
                                                             size_t frozen_sets) {
  std::vector<std::pair<int32_t, int64_t>> after;
  // Tokens in byte order: consecutive tokens share the matcher's bytes up to their common
  // prefix, so only the differing tail is re-accepted.
  std::string accepted;  // the bytes the matcher holds beyond its start
  for (int32_t id : vocabulary.ids_by_bytes()) {
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
    after.emplace_back(id, matcher.MinBytesToComplete(&memo, frozen_sets));
  }
  matcher.Rollback(accepted.size());
  return after;
}

// EOS (allowed only on a complete output) leaves nothing to complete.
bool EosCounts(const TokenVocabulary& vocabulary, std::span<const uint32_t> mask,
               bool eos_selectable) {
  if (!eos_selectable) return false;
  for (int32_t id : vocabulary.eos_token_ids()) {
    if (MaskAllows(mask, id)) return true;
  }
  return false;
}

// Clears the tokens of `after` whose shortest completion exceeds the budget (or, when no token
// meets it, exceeds the best one: this step never empties a mask). Returns whether any was.
bool NarrowAfter(const std::vector<std::pair<int32_t, int64_t>>& after, int64_t tokens_after,
                 bool eos_counts, std::span<uint32_t> mask) {
  int64_t best = eos_counts ? 0 : std::numeric_limits<int64_t>::max();
  for (const auto& [id, shortest] : after) best = std::min(best, shortest);
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

}  // namespace

bool RestrictMaskToBudget(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                          int64_t tokens_after, bool eos_selectable, std::span<uint32_t> mask) {
  tokens_after = std::max<int64_t>(tokens_after, 0);
  // Every try below starts from this state: the search over its chart is shared.
  GrammarMatcher::MinBytesMemo memo;
  const size_t frozen_sets = matcher.num_bytes() + 1;
  if (matcher.MinBytesToComplete(&memo, frozen_sets) + kLengthBudgetSlackBytes < tokens_after) {
    return false;
  }
  return NarrowAfter(ShortestAfterTokens(matcher, vocabulary, mask, memo, frozen_sets),
                     tokens_after, EosCounts(vocabulary, mask, eos_selectable), mask);
}

int64_t BudgetRestrictionCache::ShortestNow(GrammarMatcher& matcher) {
  const uint32_t state = matcher.StateId();
  for (const auto& [known, shortest] : shortest_now_) {
    if (known == state) return shortest;
  }
  const int64_t shortest = matcher.MinBytesToComplete();
  // A few hundred states at most in practice; bounded like the entries.
  if (shortest_now_.size() >= 64 * capacity_) shortest_now_.clear();
  shortest_now_.emplace_back(state, shortest);
  return shortest;
}

bool BudgetRestrictionCache::Near(GrammarMatcher& matcher, int64_t tokens_after) {
  return ShortestNow(matcher) + kLengthBudgetSlackBytes >= std::max<int64_t>(tokens_after, 0);
}

bool BudgetRestrictionCache::Restrict(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                                      int64_t tokens_after, bool eos_selectable,
                                      std::span<uint32_t> mask) {
  tokens_after = std::max<int64_t>(tokens_after, 0);
  if (!Near(matcher, tokens_after)) return false;
  const uint32_t state = matcher.StateId();

  Entry* entry = nullptr;
  for (Entry& e : entries_) {
    if (e.state == state) entry = &e;
  }
  if (entry != nullptr) {
    ++hits_;
  } else {
    ++misses_;
    GrammarMatcher::MinBytesMemo memo;
    const std::vector<std::pair<int32_t, int64_t>> after =
        ShortestAfterTokens(matcher, vocabulary, mask, memo, matcher.num_bytes() + 1);
    Entry fresh;
    fresh.state = state;
    for (const auto& [id, shortest] : after) fresh.levels.push_back(shortest);
    std::sort(fresh.levels.begin(), fresh.levels.end());
    fresh.levels.erase(std::unique(fresh.levels.begin(), fresh.levels.end()), fresh.levels.end());
    if (fresh.levels.size() > kMaxLevels || capacity_ == 0) {
      // Too many levels to keep as masks: the plain computation, uncached.
      return NarrowAfter(after, tokens_after, EosCounts(vocabulary, mask, eos_selectable), mask);
    }
    const size_t words = MaskWords(vocabulary.vocab_size());
    fresh.all.assign(words, 0);
    fresh.above.assign(fresh.levels.size(), std::vector<uint32_t>(words, 0));
    for (const auto& [id, shortest] : after) {
      fresh.all[id / 32] |= 1u << (id % 32);
      for (size_t i = 0; i < fresh.levels.size() && fresh.levels[i] < shortest; ++i) {
        fresh.above[i][id / 32] |= 1u << (id % 32);
      }
    }
    if (entries_.size() < capacity_) {
      entries_.push_back(std::move(fresh));
      entry = &entries_.back();
    } else {
      entry = &*std::min_element(
          entries_.begin(), entries_.end(),
          [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
      *entry = std::move(fresh);
    }
  }
  entry->last_used = ++clock_;
  if (entry->levels.empty()) return false;  // no byte-carrying token: nothing to narrow
  const int64_t best = EosCounts(vocabulary, mask, eos_selectable) ? 0 : entry->levels.front();
  const int64_t bound = std::max(tokens_after, best);
  // The tokens whose shortest completion exceeds `bound`: above the largest level <= bound, or
  // every token when bound is below them all.
  const auto first_above = std::upper_bound(entry->levels.begin(), entry->levels.end(), bound);
  if (first_above == entry->levels.end()) return false;  // every level fits
  const std::vector<uint32_t>& removed =
      first_above == entry->levels.begin()
          ? entry->all
          : entry->above[static_cast<size_t>(first_above - entry->levels.begin()) - 1];
  bool narrowed = false;
  for (size_t w = 0; w < removed.size(); ++w) {
    narrowed |= (mask[w] & removed[w]) != 0;
    mask[w] &= ~removed[w];
  }
  return narrowed;
}

}  // namespace tandem::engine::grammar
