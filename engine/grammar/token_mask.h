// Token masks: which tokens of a vocabulary keep a GrammarMatcher's output inside its language.
//
// TokenVocabulary is built once per tokenizer: every token's bytes in a byte trie (tokens that
// share a prefix share its path). ComputeTokenMask walks the trie depth-first with the matcher,
// entering a child only if the matcher accepts its byte, so one mask costs one recognizer step
// per trie node on a path that is still a valid prefix (not one walk per token), and dead
// subtrees are never entered.
//
// With a StateTransitions memo (owned by the caller, e.g. TokenMaskCache), the walk also learns
// the recognizer as an automaton over GrammarMatcher::StateId: (state, byte) -> next state, with
// each state's next bytes. A trie node whose transition is known is stepped by one table lookup
// and the matcher is brought along (its path bytes accepted) only where a transition is new.
// Inside free text (a JSON string) the state repeats byte after byte, so a walk over most of a
// 151k vocabulary becomes mostly lookups. The masks are the same bits either way.
//
// Mask layout (as xgrammar's): 32-bit words, token id `t` allowed iff bit (t % 32) of word
// t / 32 is set; MaskWords(vocab_size) words.
//
// Thread-safety: a TokenVocabulary is immutable and shared (std::shared_ptr<const ...>) by all
// sequences of a model; ComputeTokenMask mutates only the matcher it is given (and restores it).
#ifndef TANDEM_ENGINE_GRAMMAR_TOKEN_MASK_H_
#define TANDEM_ENGINE_GRAMMAR_TOKEN_MASK_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"

namespace tandem::engine::grammar {

class TokenVocabulary {
 public:
  // `token_bytes[id]` is the bytes token `id` stands for; an empty entry (special tokens,
  // unused ids) is never allowed. The `eos_token_ids` are allowed exactly when the output is
  // complete.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_token_ids);

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  bool is_eos(int32_t id) const;
  size_t num_trie_nodes() const { return nodes_.size(); }
  // Every token id, ordered by its bytes (lexicographically, unsigned): walking tokens in this
  // order re-accepts only the bytes after each token's common prefix with the one before.
  const std::vector<int32_t>& ids_by_bytes() const { return ids_by_bytes_; }

 private:
  friend class TrieWalk;
  struct Node {
    uint32_t first_child = 0;  // children are nodes_[first_child, first_child + num_children)
    uint32_t num_children = 0;
    uint32_t first_token = 0;  // tokens ending here: tokens_[first_token, first_token + num_tokens)
    uint32_t num_tokens = 0;
    uint8_t byte = 0;
  };

  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<int32_t> tokens_;
  std::vector<int32_t> ids_by_bytes_;
};

using TokenVocabularyPtr = std::shared_ptr<const TokenVocabulary>;

inline size_t MaskWords(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }
inline bool MaskAllows(std::span<const uint32_t> mask, int32_t id) {
  return (mask[id / 32] >> (id % 32)) & 1u;
}

// The learned automaton of one matcher's states (see the header comment): valid only with the
// matcher whose StateId numbered its states (and copies made after it together with this memo).
// Bounded: past kMaxEntries transitions it starts over, and a walk stops learning (falls back
// to plain matcher steps) once the matcher has interned kMaxStates states or kMaxStateBytes of
// state keys, or the walk itself kMaxNewStatesPerWalk states, so a grammar whose every byte
// makes a new state (counted repetition) costs a plain walk plus a bounded overhead.
class StateTransitions {
 public:
  static constexpr size_t kMaxEntries = size_t{1} << 17;
  static constexpr size_t kMaxStates = size_t{1} << 16;
  static constexpr size_t kMaxStateBytes = size_t{4} << 20;
  static constexpr size_t kMaxNewStatesPerWalk = 4096;
  static constexpr uint32_t kRefused = 0xFFFFFFFFu;

  // `max_new_states_per_walk` below the default: for tests of the fallback.
  explicit StateTransitions(size_t max_new_states_per_walk = kMaxNewStatesPerWalk)
      : max_new_states_per_walk_(max_new_states_per_walk) {}

  size_t size() const { return next_.size(); }

 private:
  friend class TrieWalk;
  static uint64_t Key(uint32_t state, uint8_t byte) {
    return (static_cast<uint64_t>(state) << 8) | byte;
  }
  absl::flat_hash_map<uint64_t, uint32_t> next_;  // Key(state, byte) -> state or kRefused
  std::vector<ByteSet> next_bytes_;               // per state id (valid where known_)
  std::vector<uint8_t> known_;                    // per state id
  size_t max_new_states_per_walk_;
};

// Fills `mask` (MaskWords(vocab_size) words) with the tokens the matcher may accept next: those
// whose bytes it accepts in full, plus the EOS ids if the output is complete. The matcher is
// left as it was. With `transitions`, learns and uses the automaton (same result, faster where
// states repeat).
void ComputeTokenMask(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                      std::span<uint32_t> mask, StateTransitions* transitions = nullptr);

// Advances the matcher by token `id`'s bytes; an EOS id is accepted (state unchanged) iff the
// output is complete. False (state unchanged) if the token is not allowed.
bool AcceptToken(GrammarMatcher& matcher, const TokenVocabulary& vocabulary, int32_t id);

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_TOKEN_MASK_H_
