#include "engine/grammar/matcher.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tandem::engine::grammar {
namespace {

uint32_t SlotOf(uint64_t item) { return static_cast<uint32_t>(item >> 32); }
uint32_t OriginOf(uint64_t item) { return static_cast<uint32_t>(item); }
uint64_t MakeItem(uint32_t slot, uint32_t origin) {
  return (static_cast<uint64_t>(slot) << 32) | origin;
}

}  // namespace

GrammarMatcher::GrammarMatcher(GrammarPtr grammar)
    : grammar_(std::move(grammar)),
      slot_stamp_(grammar_->slots().size(), 0),
      slot_head_(grammar_->slots().size(), -1) {}

absl::StatusOr<GrammarMatcher> GrammarMatcher::Create(GrammarPtr grammar) {
  GrammarMatcher matcher(std::move(grammar));
  matcher.set_begin_.push_back(0);
  matcher.BeginSet();
  for (int32_t slot : matcher.grammar_->alternatives(matcher.grammar_->start_rule())) {
    matcher.Add(static_cast<uint32_t>(slot), 0);
  }
  if (!matcher.CloseLastSet()) return matcher.status_;
  return matcher;
}

void GrammarMatcher::BeginSet() {
  ++stamp_;
  work_ = 0;
  chain_.clear();
  building_begin_ = items_.size();
}

void GrammarMatcher::Add(uint32_t slot, uint32_t origin) {
  if (slot_stamp_[slot] != stamp_) {
    slot_stamp_[slot] = stamp_;
    slot_head_[slot] = -1;
  }
  for (int64_t i = slot_head_[slot]; i >= 0; i = chain_[i - building_begin_]) {
    ++work_;
    if (OriginOf(items_[i]) == origin) return;
  }
  chain_.push_back(slot_head_[slot]);
  slot_head_[slot] = static_cast<int64_t>(items_.size());
  items_.push_back(MakeItem(slot, origin));
}

bool GrammarMatcher::CloseLastSet() {
  const Grammar& g = *grammar_;
  const auto& slots = g.slots();
  const uint32_t k = static_cast<uint32_t>(set_begin_.size() - 1);
  const size_t begin = set_begin_.back();
  const size_t max_items = static_cast<size_t>(g.limits().max_items_per_position);
  int64_t& work = work_;  // includes Add's duplicate checks of this set
  ByteSet next;
  bool complete = false;
  for (size_t i = begin; i < items_.size(); ++i) {
    if (items_.size() - begin > max_items || work > g.limits().max_work_per_byte) {
      status_ = absl::ResourceExhaustedError(
          absl::StrCat("grammar recognizer exceeded its state limit at byte ", k, " (",
                       items_.size() - begin, " items, ", work, " operations)"));
      return false;
    }
    const uint64_t item = items_[i];
    const uint32_t pos = SlotOf(item);
    const uint32_t origin = OriginOf(item);
    const Grammar::Slot& slot = slots[pos];
    ++work;
    switch (slot.kind) {
      case Grammar::SlotKind::kTerminal:
        next |= g.terminal(slot.value);
        break;
      case Grammar::SlotKind::kRule:
        for (int32_t alternative : g.alternatives(slot.value)) {
          Add(static_cast<uint32_t>(alternative), k);
        }
        work += static_cast<int64_t>(g.alternatives(slot.value).size());
        // Aycock-Horspool: a nullable rule is also skipped over at once, so completions of
        // empty derivations (origin == k) need not look back into this set.
        if (g.nullable(slot.value)) Add(pos + 1, origin);
        break;
      case Grammar::SlotKind::kEnd: {
        if (slot.value == g.start_rule()) {
          complete = true;
          break;
        }
        if (origin == k) break;  // empty derivation: handled by the nullable skip above
        const size_t from = set_begin_[origin];
        const size_t to = set_begin_[origin + 1];
        for (size_t j = from; j < to; ++j) {
          const uint64_t waiting = items_[j];
          const Grammar::Slot& next_slot = slots[SlotOf(waiting)];
          if (next_slot.kind == Grammar::SlotKind::kRule && next_slot.value == slot.value) {
            Add(SlotOf(waiting) + 1, OriginOf(waiting));
          }
        }
        work += static_cast<int64_t>(to - from);
        break;
      }
    }
  }
  next_bytes_.push_back(next);
  complete_.push_back(complete ? 1 : 0);
  return true;
}

bool GrammarMatcher::Accept(uint8_t byte) {
  if (!next_bytes_.back().test(byte)) return false;
  const Grammar& g = *grammar_;
  const auto& slots = g.slots();
  const size_t from = set_begin_.back();
  const size_t to = items_.size();
  set_begin_.push_back(static_cast<uint32_t>(to));
  BeginSet();
  for (size_t i = from; i < to; ++i) {
    const uint64_t item = items_[i];
    const Grammar::Slot& slot = slots[SlotOf(item)];
    if (slot.kind == Grammar::SlotKind::kTerminal && g.terminal(slot.value).test(byte)) {
      Add(SlotOf(item) + 1, OriginOf(item));
    }
  }
  if (!CloseLastSet()) {
    items_.resize(to);
    set_begin_.pop_back();
    return false;
  }
  return true;
}

bool GrammarMatcher::AcceptString(std::string_view bytes) {
  size_t accepted = 0;
  for (char c : bytes) {
    if (!Accept(static_cast<uint8_t>(c))) {
      Rollback(accepted);
      return false;
    }
    ++accepted;
  }
  return true;
}

void GrammarMatcher::Rollback(size_t n) {
  if (n == 0) return;
  const size_t keep_sets = set_begin_.size() - n;
  items_.resize(set_begin_[keep_sets]);
  set_begin_.resize(keep_sets);
  next_bytes_.resize(keep_sets);
  complete_.resize(keep_sets);
  num_identified_ = std::min(num_identified_, keep_sets);
}

uint32_t GrammarMatcher::StateId() {
  IdentifySets();
  return set_state_.back();
}

void GrammarMatcher::IdentifySets() {
  constexpr uint32_t kSelf = 0xFFFFFFFFu;
  const size_t num_sets = set_begin_.size();
  set_state_.resize(num_sets);
  for (size_t k = num_identified_; k < num_sets; ++k) {
    const size_t end = k + 1 < num_sets ? set_begin_[k + 1] : items_.size();
    key_.clear();
    for (size_t i = set_begin_[k]; i < end; ++i) {
      // A completed item has done its work when the set was closed; only the start rule's
      // (the output is complete) says something about the future.
      const Grammar::Slot& slot = grammar_->slots()[SlotOf(items_[i])];
      if (slot.kind == Grammar::SlotKind::kEnd && slot.value != grammar_->start_rule()) continue;
      const uint32_t origin = OriginOf(items_[i]);
      key_.push_back(MakeItem(SlotOf(items_[i]), origin == k ? kSelf : set_state_[origin]));
    }
    std::sort(key_.begin(), key_.end());
    key_.erase(std::unique(key_.begin(), key_.end()), key_.end());
    auto it = states_.find(key_);
    if (it == states_.end()) {
      it = states_.emplace(key_, static_cast<uint32_t>(states_.size())).first;
      state_bytes_ += key_.size() * sizeof(uint64_t);
    }
    set_state_[k] = it->second;
  }
  num_identified_ = num_sets;
}

}  // namespace tandem::engine::grammar

namespace tandem::engine::grammar {

int64_t GrammarMatcher::MinBytesToComplete(MinBytesMemo* memo, size_t frozen_sets) const {
  // Nodes (rule, origin): "`rule`, begun at set `origin`, has just completed". A node's edges go
  // to the items of set `origin` waiting for `rule`, i.e. to node (their rule, their origin),
  // costing the shortest rest of their alternative. The answer is the shortest path from an item
  // of the last set to the start rule's completion: Dijkstra from the start nodes over reversed
  // edges (weights are nonnegative), linear-logarithmic in the nodes reached.
  const Grammar& g = *grammar_;
  const auto& slots = g.slots();
  constexpr int64_t kInfinite = int64_t{1} << 40;
  auto rule_of = [&](uint32_t slot) {  // the rule of a slot's alternative: its kEnd slot's value
    while (slots[slot].kind != Grammar::SlotKind::kEnd) ++slot;
    return slots[slot].value;
  };
  auto key = [](int32_t rule, uint32_t origin) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(rule)) << 32) | origin;
  };
  auto set_end = [&](uint32_t origin) {
    return origin + 1 < set_begin_.size() ? static_cast<size_t>(set_begin_[origin + 1])
                                          : items_.size();
  };
  absl::flat_hash_map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> reverse;  // to <- from
  absl::flat_hash_map<uint64_t, int64_t> distance;
  absl::flat_hash_map<uint32_t, absl::flat_hash_map<int32_t, std::vector<size_t>>> waiting;
  std::vector<uint64_t> stack, starts;
  // A node of a frozen set already searched: its distance is final (a node's edges lead only to
  // sets at or before its own), so it is a source of the search instead of being expanded.
  std::vector<std::pair<int64_t, uint64_t>> known;
  auto visit = [&](int32_t rule, uint32_t origin) {
    const uint64_t node = key(rule, origin);
    if (memo != nullptr && origin < frozen_sets) {
      if (const auto it = memo->find(node); it != memo->end()) {
        if (distance.try_emplace(node, it->second).second) known.emplace_back(it->second, node);
        return;
      }
    }
    if (distance.try_emplace(node, kInfinite).second) stack.push_back(node);
  };
  const size_t last = set_begin_.back();
  for (size_t i = last; i < items_.size(); ++i) {
    visit(rule_of(SlotOf(items_[i])), OriginOf(items_[i]));
  }
  while (!stack.empty()) {
    const uint64_t node = stack.back();
    stack.pop_back();
    const int32_t rule = static_cast<int32_t>(node >> 32);
    const uint32_t origin = static_cast<uint32_t>(node);
    if (rule == g.start_rule()) {
      starts.push_back(node);
      continue;
    }
    auto [index, fresh] = waiting.try_emplace(origin);
    if (fresh) {  // the items of set `origin` by the rule they wait for, built once per set
      for (size_t j = set_begin_[origin]; j < set_end(origin); ++j) {
        const Grammar::Slot& slot = slots[SlotOf(items_[j])];
        if (slot.kind == Grammar::SlotKind::kRule) index->second[slot.value].push_back(j);
      }
    }
    auto found = index->second.find(rule);
    if (found == index->second.end()) continue;
    for (size_t j : found->second) {
      const uint32_t pos = SlotOf(items_[j]);
      const uint64_t parent = key(rule_of(pos), OriginOf(items_[j]));
      visit(rule_of(pos), OriginOf(items_[j]));
      reverse[parent].emplace_back(node, g.min_bytes_from(pos + 1));
    }
  }
  using Entry = std::pair<int64_t, uint64_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (uint64_t node : starts) {
    distance[node] = 0;
    queue.emplace(0, node);
  }
  for (const auto& [d, node] : known) queue.emplace(d, node);
  while (!queue.empty()) {
    const auto [d, node] = queue.top();
    queue.pop();
    if (d > distance[node]) continue;
    auto it = reverse.find(node);
    if (it == reverse.end()) continue;
    for (const auto& [child, weight] : it->second) {
      int64_t& best = distance[child];
      if (d + weight < best) {
        best = d + weight;
        queue.emplace(best, child);
      }
    }
  }
  if (memo != nullptr) {
    for (const auto& [node, d] : distance) {
      if (static_cast<uint32_t>(node) < frozen_sets) memo->try_emplace(node, d);
    }
  }
  int64_t best = kInfinite;
  for (size_t i = last; i < items_.size(); ++i) {
    const uint32_t pos = SlotOf(items_[i]);
    best = std::min(best, g.min_bytes_from(pos) + distance[key(rule_of(pos), OriginOf(items_[i]))]);
  }
  return best;
}

}  // namespace tandem::engine::grammar
