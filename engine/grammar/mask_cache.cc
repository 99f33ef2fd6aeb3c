#include "engine/grammar/mask_cache.h"

#include <algorithm>

namespace tandem::engine::grammar {

TokenMaskCache::TokenMaskCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::span<const uint32_t> TokenMaskCache::Get(GrammarMatcher& matcher,
                                              const TokenVocabulary& vocabulary) {
  const uint32_t state = matcher.StateId();
  ++clock_;
  for (Entry& entry : entries_) {
    if (entry.state == state) {
      ++hits_;
      entry.last_used = clock_;
      return entry.mask;
    }
  }
  ++misses_;
  Entry* slot;
  if (entries_.size() < capacity_) {
    slot = &entries_.emplace_back();
  } else {
    slot = &*std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
      return a.last_used < b.last_used;
    });
  }
  slot->state = state;
  slot->last_used = clock_;
  slot->mask.resize(MaskWords(vocabulary.vocab_size()));
  ComputeTokenMask(matcher, vocabulary, slot->mask, &transitions_);
  return slot->mask;
}

}  // namespace tandem::engine::grammar
