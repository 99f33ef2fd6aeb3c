// TokenMaskCache: token masks memoised by recognizer state, so a constrained sequence pays for
// a mask (a trie walk, token_mask.h) once per distinct state rather than once per token.
//
// A mask depends only on the matcher's future, which GrammarMatcher::StateId names exactly
// (equal ids, equal futures; no hashing, so no collision can return a wrong mask). Inside free
// text such as a JSON string the state repeats token after token, so most steps are hits.
//
// The cache holds at most `capacity` masks (MaskWords(vocab_size) words each: 19 KB on a 151k
// vocabulary), evicting the least recently used. It belongs to one matcher: state ids are
// interned per matcher, so a cache is used with the matcher it was first used with (or with a
// copy of that matcher made together with a copy of the cache) and one vocabulary.
//
// A miss walks the trie with a StateTransitions memo kept across misses (token_mask.h), so
// later misses step through states met before by table lookups.
//
// Thread-compatible: one cache per sequence, as its matcher.
#ifndef TANDEM_ENGINE_GRAMMAR_MASK_CACHE_H_
#define TANDEM_ENGINE_GRAMMAR_MASK_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"

namespace tandem::engine::grammar {

class TokenMaskCache {
 public:
  // 16 masks: the states a JSON value revisits (string content, number digits, whitespace at a
  // few nesting depths) fit, at about 300 KB per sequence on a 151k vocabulary.
  static constexpr size_t kDefaultCapacity = 16;

  explicit TokenMaskCache(size_t capacity = kDefaultCapacity);

  // The mask of `matcher`'s current state (ComputeTokenMask's): from the cache, or computed and
  // stored. The span stays valid until the next call. The matcher is left as it was.
  std::span<const uint32_t> Get(GrammarMatcher& matcher, const TokenVocabulary& vocabulary);

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return entries_.size(); }
  size_t num_transitions() const { return transitions_.size(); }

 private:
  struct Entry {
    uint32_t state = 0;
    uint64_t last_used = 0;
    std::vector<uint32_t> mask;
  };

  size_t capacity_;
  std::vector<Entry> entries_;  // at most capacity_, searched linearly (it is small)
  uint64_t clock_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  StateTransitions transitions_;  // what the walks of the misses learned, for the next misses
};

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_MASK_CACHE_H_
