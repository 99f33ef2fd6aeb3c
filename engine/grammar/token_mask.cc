#include "engine/grammar/token_mask.h"

#include <algorithm>
#include <map>
#include <utility>

namespace tandem::engine::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<int32_t> eos_token_ids)
    : token_bytes_(std::move(token_bytes)), eos_token_ids_(std::move(eos_token_ids)) {
  // A pointer trie first, then flattened breadth-first so each node's children are contiguous.
  struct Building {
    std::map<uint8_t, int> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Building> building(1);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string& bytes = token_bytes_[id];
    if (bytes.empty() || is_eos(id)) continue;
    int node = 0;
    for (char c : bytes) {
      auto [it, inserted] = building[node].children.try_emplace(static_cast<uint8_t>(c),
                                                                static_cast<int>(building.size()));
      if (inserted) building.emplace_back();
      node = it->second;
    }
    building[node].tokens.push_back(id);
  }
  std::vector<int> order{0};         // flat index -> building index
  std::vector<uint8_t> bytes_of{0};  // flat index -> byte leading to it
  nodes_.resize(building.size());
  for (size_t flat = 0; flat < order.size(); ++flat) {
    const Building& b = building[order[flat]];
    Node& node = nodes_[flat];
    node.byte = bytes_of[flat];
    node.first_child = static_cast<uint32_t>(order.size());
    node.num_children = static_cast<uint32_t>(b.children.size());
    node.first_token = static_cast<uint32_t>(tokens_.size());
    node.num_tokens = static_cast<uint32_t>(b.tokens.size());
    tokens_.insert(tokens_.end(), b.tokens.begin(), b.tokens.end());
    for (const auto& [byte, child] : b.children) {
      order.push_back(child);
      bytes_of.push_back(byte);
    }
  }
}

bool TokenVocabulary::is_eos(int32_t id) const {
  return std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) != eos_token_ids_.end();
}

void TokenVocabulary::Walk(uint32_t index, GrammarMatcher& matcher,
                           std::span<uint32_t> mask) const {
  const Node& node = nodes_[index];
  const ByteSet next = matcher.next_bytes();  // a copy: Accept below grows the matcher
  for (uint32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
    const Node& child = nodes_[c];
    if (!next.test(child.byte) || !matcher.Accept(child.byte)) continue;
    for (uint32_t t = child.first_token; t < child.first_token + child.num_tokens; ++t) {
      const int32_t id = tokens_[t];
      mask[id / 32] |= 1u << (id % 32);
    }
    if (child.num_children > 0) Walk(c, matcher, mask);
    matcher.Rollback(1);
  }
}

void ComputeTokenMask(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                      std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0u);
  vocabulary.Walk(0, matcher, mask);
  if (matcher.IsComplete()) {
    for (int32_t id : vocabulary.eos_token_ids()) mask[id / 32] |= 1u << (id % 32);
  }
}

bool AcceptToken(GrammarMatcher& matcher, const TokenVocabulary& vocabulary, int32_t id) {
  if (id < 0 || id >= vocabulary.vocab_size()) return false;
  if (vocabulary.is_eos(id)) return matcher.IsComplete();
  const std::string& bytes = vocabulary.token_bytes(id);
  return !bytes.empty() && matcher.AcceptString(bytes);
}

}  // namespace tandem::engine::grammar
