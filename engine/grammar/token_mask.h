// Token masks: which tokens of a vocabulary keep a GrammarMatcher's output inside its language.
//
// TokenVocabulary is built once per tokenizer: every token's bytes in a byte trie (tokens that
// share a prefix share its path). ComputeTokenMask walks the trie depth-first with the matcher,
// entering a child only if the matcher accepts its byte, so one mask costs one recognizer step
// per trie node on a path that is still a valid prefix (not one walk per token), and dead
// subtrees are never entered.
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

 private:
  friend void ComputeTokenMask(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                               std::span<uint32_t> mask);
  struct Node {
    uint32_t first_child = 0;  // children are nodes_[first_child, first_child + num_children)
    uint32_t num_children = 0;
    uint32_t first_token = 0;  // tokens ending here: tokens_[first_token, first_token + num_tokens)
    uint32_t num_tokens = 0;
    uint8_t byte = 0;
  };
  void Walk(uint32_t node, GrammarMatcher& matcher, std::span<uint32_t> mask) const;

  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<int32_t> tokens_;
};

using TokenVocabularyPtr = std::shared_ptr<const TokenVocabulary>;

inline size_t MaskWords(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }
inline bool MaskAllows(std::span<const uint32_t> mask, int32_t id) {
  return (mask[id / 32] >> (id % 32)) & 1u;
}

// Fills `mask` (MaskWords(vocab_size) words) with the tokens the matcher may accept next: those
// whose bytes it accepts in full, plus the EOS ids if the output is complete. The matcher is
// left as it was.
void ComputeTokenMask(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                      std::span<uint32_t> mask);

// Advances the matcher by token `id`'s bytes; an EOS id is accepted (state unchanged) iff the
// output is complete. False (state unchanged) if the token is not allowed.
bool AcceptToken(GrammarMatcher& matcher, const TokenVocabulary& vocabulary, int32_t id);

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_TOKEN_MASK_H_
