// Length-aware closing of a constrained output: which tokens still let the output reach a string
// of the grammar's language before the request's token budget (max_new_tokens) runs out.
//
// Reasoning: the vocabularies served here are byte-level (every byte value is a token of its
// own: GPT-2/Qwen/Llama-3 byte-level BPE, SentencePiece byte fallback), so an output whose
// shortest completion is m bytes (GrammarMatcher::MinBytesToComplete) can always be completed in
// m more tokens. A token is therefore safe to sample when, after it, the shortest completion is
// at most the number of tokens left after it. Restricting every step to safe tokens keeps the
// invariant "completable within the budget" from one step to the next: one byte along a shortest
// completion, or EOS once the output is complete, is always a safe token. The last token of the
// budget can thus only be one that completes the output (or EOS once it is complete). The
// guarantee holds from the first token when the budget is at least the grammar's shortest string
// in bytes; a smaller budget is served best effort (each step keeps the tokens that shorten the
// completion most) and may still end incomplete.
//
// Cost: the shortest completion is a search over the recognizer's chart, and the restriction
// runs it once per allowed token (sharing the search over the chart before the token), so it
// runs only near the end of the budget: when the current shortest completion plus
// kLengthBudgetSlackBytes reaches the tokens left. Inside a JSON string, where nearly every token
// is allowed, it costs about six token masks (the shipped model's 3,072 tokens: ~9 ms). A single
// token that raises the shortest completion by more than the slack (e.g. the opening quote of a key
// whose required value is a large object) while the budget is still far is not caught; the steps
// after it then keep the shortest completion as small as they can.
//
// Thread-compatible: mutates only the matcher it is given, and restores it.
#ifndef TANDEM_ENGINE_GRAMMAR_LENGTH_BUDGET_H_
#define TANDEM_ENGINE_GRAMMAR_LENGTH_BUDGET_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"

namespace tandem::engine::grammar {

inline constexpr int64_t kLengthBudgetSlackBytes = 32;

// `mask` (ComputeTokenMask's, for `matcher`'s state) is narrowed to the tokens after which the
// output can complete within `tokens_after` more tokens (negative counts as 0). EOS ids stay as
// the mask has them: allowed once the output is complete, when they need no more tokens. A
// complete output may thus be left only with EOS; `eos_selectable` false (EOS is masked for
// another reason, e.g. min_new_tokens) makes the step keep the byte-carrying tokens with the
// shortest completion instead. Whenever no token meets the budget (it was already missed), the
// tokens with the shortest completion after them are kept, so this step never empties a mask.
// Does nothing while the budget is far (see above). Returns whether the mask was narrowed.
bool RestrictMaskToBudget(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                          int64_t tokens_after, bool eos_selectable, std::span<uint32_t> mask);

// RestrictMaskToBudget memoised by recognizer state (GrammarMatcher::StateId: equal ids, equal
// futures), for a sequence whose budget is near for many steps. The shortest completion of a
// state, and of each allowed token after it, depend on the state only, not on the budget; so an
// entry keeps them as a few masks (the tokens whose shortest completion exceeds each level met)
// and a state met again (inside a JSON string near the end of the budget) costs a mask AND
// instead of a search per allowed token. At most `capacity` states with at most kMaxLevels
// distinct levels are kept (LRU; an entry is at most kMaxLevels masks, 19 KB each on a 151k
// vocabulary); a state with more levels is computed every time. The result is bit for bit
// RestrictMaskToBudget's.
//
// Thread-compatible; belongs to one matcher (state ids are interned per matcher), like
// TokenMaskCache, and is copied together with it.
class BudgetRestrictionCache {
 public:
  static constexpr size_t kDefaultCapacity = 4;
  static constexpr size_t kMaxLevels = 16;
  explicit BudgetRestrictionCache(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // As RestrictMaskToBudget; `mask` must be ComputeTokenMask's for `matcher`'s state.
  bool Restrict(GrammarMatcher& matcher, const TokenVocabulary& vocabulary, int64_t tokens_after,
                bool eos_selectable, std::span<uint32_t> mask);

  // Whether the budget is near enough for Restrict to narrow anything (false: it would return
  // false and leave the mask as it is); memoised per state, so a caller can skip copying a mask
  // it would narrow.
  bool Near(GrammarMatcher& matcher, int64_t tokens_after);

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  // The shortest completion of `matcher`'s state, memoised per state.
  int64_t ShortestNow(GrammarMatcher& matcher);

  struct Entry {
    uint32_t state = 0;
    uint64_t last_used = 0;
    std::vector<int64_t> levels;  // distinct shortest completions after a token, ascending
    std::vector<std::vector<uint32_t>>
        above;                  // above[i]: tokens whose shortest completion > levels[i]
    std::vector<uint32_t> all;  // every token with a shortest completion
  };
  size_t capacity_;
  std::vector<Entry> entries_;
  std::vector<std::pair<uint32_t, int64_t>> shortest_now_;  // state -> its shortest completion
  uint64_t clock_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_LENGTH_BUDGET_H_
