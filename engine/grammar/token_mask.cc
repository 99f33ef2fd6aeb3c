#include "engine/grammar/token_mask.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace tandem::engine::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<int32_t> eos_token_ids)
    : token_bytes_(std::move(token_bytes)), eos_token_ids_(std::move(eos_token_ids)) {
  ids_by_bytes_.resize(token_bytes_.size());
  std::iota(ids_by_bytes_.begin(), ids_by_bytes_.end(), 0);
  std::sort(ids_by_bytes_.begin(), ids_by_bytes_.end(), [this](int32_t a, int32_t b) {
    // std::string compares chars as unsigned (char_traits<char>::lt); ties keep id order.
    const int order = token_bytes_[a].compare(token_bytes_[b]);
    return order != 0 ? order < 0 : a < b;
  });
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

// One mask computation (token_mask.h): the trie walked depth-first, by the memo's transitions
// where they are known and by matcher steps elsewhere.
class TrieWalk {
 public:
  TrieWalk(GrammarMatcher& matcher, const TokenVocabulary& vocabulary, std::span<uint32_t> mask,
           StateTransitions* transitions)
      : matcher_(matcher), vocabulary_(vocabulary), mask_(mask), memo_(transitions) {}

  void Run() {
    if (memo_ == nullptr) {
      Plain(0);
      return;
    }
    if (memo_->next_.size() > StateTransitions::kMaxEntries) {
      *memo_ = StateTransitions(memo_->max_new_states_per_walk_);
    }
    states_before_ = matcher_.num_states();
    const uint32_t root = matcher_.StateId();
    Learn(root);
    Memo(0, root, 0);
    matcher_.Rollback(concrete_);
  }

 private:
  using Node = TokenVocabulary::Node;

  void Allow(const Node& node) {
    for (uint32_t t = node.first_token; t < node.first_token + node.num_tokens; ++t) {
      const int32_t id = vocabulary_.tokens_[t];
      mask_[id / 32] |= 1u << (id % 32);
    }
  }

  // Below `index` by matcher steps alone; the matcher stands at the node.
  void Plain(uint32_t index) {
    const Node& node = vocabulary_.nodes_[index];
    const ByteSet next = matcher_.next_bytes();  // a copy: Accept below grows the matcher
    for (uint32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      const Node& child = vocabulary_.nodes_[c];
      if (!next.test(child.byte) || !matcher_.Accept(child.byte)) continue;
      Allow(child);
      if (child.num_children > 0) Plain(c);
      matcher_.Rollback(1);
    }
  }

  // Below `index`, at `depth` bytes into the trie, in `state`. The matcher has accepted the
  // first concrete_ <= depth bytes of the path (path_) and follows only where needed.
  void Memo(uint32_t index, uint32_t state, size_t depth) {
    const Node& node = vocabulary_.nodes_[index];
    const ByteSet next = memo_->next_bytes_[state];  // a copy: Learn may grow the vector
    if (path_.size() <= depth) path_.resize(depth + 1);
    for (uint32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      const Node& child = vocabulary_.nodes_[c];
      if (!next.test(child.byte)) continue;
      path_[depth] = child.byte;
      const uint64_t key = StateTransitions::Key(state, child.byte);
      uint32_t to;
      if (auto it = memo_->next_.find(key); it != memo_->next_.end()) {
        to = it->second;
      } else {
        // Bring the matcher to this node. Its bytes were accepted from an equal state, so only
        // a recognizer limit can refuse one: the subtree is then refused, as a plain walk would.
        for (; concrete_ < depth; ++concrete_) {
          if (!matcher_.Accept(path_[concrete_])) return;
        }
        if (!Learning()) {  // out of budget: plain steps below this node
          if (matcher_.Accept(child.byte)) {
            Allow(child);
            if (child.num_children > 0) Plain(c);
            matcher_.Rollback(1);
          }
          continue;
        }
        if (!matcher_.Accept(child.byte)) {
          memo_->next_.emplace(key, StateTransitions::kRefused);
          continue;
        }
        ++concrete_;
        to = matcher_.StateId();
        Learn(to);
        memo_->next_.emplace(key, to);
      }
      if (to == StateTransitions::kRefused) continue;
      Allow(child);
      if (child.num_children > 0) Memo(c, to, depth + 1);
      if (concrete_ > depth) {
        matcher_.Rollback(concrete_ - depth);
        concrete_ = depth;
      }
    }
  }

  bool Learning() const {
    return matcher_.num_states() < StateTransitions::kMaxStates &&
           matcher_.state_bytes() < StateTransitions::kMaxStateBytes &&
           matcher_.num_states() - states_before_ < memo_->max_new_states_per_walk_;
  }

  // Records the next bytes of `state`, the matcher's current state.
  void Learn(uint32_t state) {
    if (memo_->known_.size() <= state) {
      memo_->known_.resize(state + 1, 0);
      memo_->next_bytes_.resize(state + 1);
    }
    if (!memo_->known_[state]) {
      memo_->known_[state] = 1;
      memo_->next_bytes_[state] = matcher_.next_bytes();
    }
  }

  GrammarMatcher& matcher_;
  const TokenVocabulary& vocabulary_;
  std::span<uint32_t> mask_;
  StateTransitions* memo_;
  std::vector<uint8_t> path_;  // the bytes from the root to the node being walked
  size_t concrete_ = 0;        // path bytes the matcher has accepted
  size_t states_before_ = 0;
};

void ComputeTokenMask(GrammarMatcher& matcher, const TokenVocabulary& vocabulary,
                      std::span<uint32_t> mask, StateTransitions* transitions) {
  std::fill(mask.begin(), mask.end(), 0u);
  TrieWalk(matcher, vocabulary, mask, transitions).Run();
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
