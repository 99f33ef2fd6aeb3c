// GrammarMatcher: recognizes a Grammar byte by byte (an Earley recognizer over bytes).
//
// The matcher holds the output accepted so far as a chart: one set of Earley items per byte
// position. Accept(byte) adds one set if `byte` keeps the output a prefix of some string of the
// language, and otherwise refuses it and leaves the state as it was. Rollback(n) drops the
// last n bytes, which is how a token trie is walked (token_mask.h) without copying. Copies are
// independent matchers (the chart is copied; the grammar is shared).
//
// Every state the matcher reaches can be completed (GrammarBuilder::Build drops alternatives
// that cannot), so "the output can continue or is complete" holds after every accepted byte.
// Bounds: a state with more than GrammarLimits::max_items_per_position items, or a byte costing
// more than max_work_per_byte item operations, is refused and status() says so
// (ResourceExhausted); grammars built from hostile input thus fail instead of hanging.
//
// StateId() names the recognizer state exactly: two outputs of one matcher (or of its copies, up
// to the copy) with the same id are extended by exactly the same continuations, so anything that
// depends only on the future (a token mask, mask_cache.h) can be memoised by it. A state is the
// last Earley set's items with the states of their origin sets, recursively; ids are interned
// per matcher, so they are meaningful only between a matcher and the copies made from it.
//
// Thread-compatible: one matcher per sequence, used by one thread at a time. The Grammar is
// shared and immutable.
#ifndef TANDEM_ENGINE_GRAMMAR_MATCHER_H_
#define TANDEM_ENGINE_GRAMMAR_MATCHER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace tandem::engine::grammar {

class GrammarMatcher {
 public:
  // The matcher at the empty output. Fails (ResourceExhausted) if the initial state alone
  // exceeds the grammar's limits.
  static absl::StatusOr<GrammarMatcher> Create(GrammarPtr grammar);

  // Appends `byte` if the output stays a prefix of the language; returns false (state
  // unchanged) otherwise.
  bool Accept(uint8_t byte);
  // All of `bytes` or nothing: on a refusal the bytes accepted so far are rolled back.
  bool AcceptString(std::string_view bytes);
  // Drops the last `n` accepted bytes (n <= num_bytes()).
  void Rollback(size_t n);

  // The output so far is a string of the language (generation may end here).
  bool IsComplete() const { return complete_.back() != 0; }
  // Some byte may follow.
  bool CanContinue() const { return next_bytes_.back().any(); }
  // The bytes Accept would take next (each leads to a non-empty state; the item limits may
  // still refuse one).
  const ByteSet& next_bytes() const { return next_bytes_.back(); }
  size_t num_bytes() const { return set_begin_.size() - 1; }
  // The fewest bytes that make the output complete (0 when IsComplete()). Costs a shortest-path
  // search over the chart: for tests and for forcing an output to a close, not for every step.
  int64_t MinBytesToComplete() const { return MinBytesToComplete(nullptr, 0); }
  // The same, for many calls over one chart prefix (the budget-restricted token mask tries every
  // token from one state): `memo` keeps the search's results for the first `frozen_sets` sets
  // (positions 0 .. frozen_sets - 1), which the caller keeps unchanged while it reuses `memo`, so
  // a call only searches the sets after them. An empty memo starts afresh.
  using MinBytesMemo = absl::flat_hash_map<uint64_t, int64_t>;
  int64_t MinBytesToComplete(MinBytesMemo* memo, size_t frozen_sets) const;
  // The id of the current state (see the header comment): equal ids, equal futures. Interns
  // the sets accepted since the last call (a sort of each set's items); ids stay valid across
  // Rollback. Not meant for every byte of a trie walk, once per token.
  uint32_t StateId();
  // How many distinct states StateId has interned, and the bytes their keys hold (they are kept
  // for the matcher's lifetime).
  size_t num_states() const { return states_.size(); }
  size_t state_bytes() const { return state_bytes_; }
  // OK, or the ResourceExhausted error of the last refused byte that hit a limit.
  const absl::Status& status() const { return status_; }
  const Grammar& grammar() const { return *grammar_; }

 private:
  explicit GrammarMatcher(GrammarPtr grammar);
  // Predicts and completes the last set (from its scanned items), fills its next_bytes and
  // complete flags. False when a limit was hit.
  bool CloseLastSet();
  // Starts building a new set at the end of items_.
  void BeginSet();
  // Appends item (slot, origin) to the set being built unless it is already there.
  void Add(uint32_t slot, uint32_t origin);

  // Interns sets [num_identified_, number of sets) into set_state_.
  void IdentifySets();

  GrammarPtr grammar_;
  std::vector<uint64_t> items_;      // (slot << 32) | origin, set after set
  std::vector<uint32_t> set_begin_;  // set k = items_[set_begin_[k], set_begin_[k + 1] or end)
  std::vector<ByteSet> next_bytes_;  // per set
  std::vector<uint8_t> complete_;    // per set
  // StateId: per set its interned state (valid for the first num_identified_ sets). A state's
  // key is its set's sorted, deduplicated (slot << 32 | origin's state, or kSelf for an origin
  // at the set itself), leaving out completed items other than the start rule's (they act only
  // while their set is closed); equal keys mean equal futures because origins compare by state
  // too: later sets scan the key's terminal items and complete into its rule items.
  std::vector<uint32_t> set_state_;
  size_t num_identified_ = 0;
  size_t state_bytes_ = 0;
  absl::flat_hash_map<std::vector<uint64_t>, uint32_t> states_;  // key -> id
  std::vector<uint64_t> key_;                                    // scratch of IdentifySets
  // Duplicate detection for the set being built: the set's items with a given slot form a
  // chain (slot_head_ -> chain_ -> ...), valid for the slot while slot_stamp_ equals stamp_.
  uint64_t stamp_ = 0;
  std::vector<uint64_t> slot_stamp_;  // per grammar slot
  std::vector<int64_t> slot_head_;    // per grammar slot: index into items_, or -1
  std::vector<int64_t> chain_;        // per item of the set being built
  size_t building_begin_ = 0;
  int64_t work_ = 0;  // item operations spent on the set being built
  absl::Status status_;
};

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_MATCHER_H_
