#include "engine/grammar/grammar.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::engine::grammar {
namespace {

int32_t TerminalId(Symbol symbol) { return -symbol - 1; }

}  // namespace

GrammarBuilder::GrammarBuilder(const GrammarLimits& limits) : limits_(limits) {}

int32_t GrammarBuilder::NewRule(std::string name) {
  rules_.emplace_back();
  names_.push_back(std::move(name));
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::CountSymbols(size_t n) {
  symbols_ += static_cast<int64_t>(n);
  if (symbols_ > limits_.max_symbols && error_.ok()) {
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("grammar too large: more than ", limits_.max_symbols, " symbols"));
  }
}

void GrammarBuilder::AddAlternative(int32_t rule, Sequence sequence) {
  CountSymbols(sequence.size() + 1);
  if (failed()) return;  // stop growing once over the limit
  rules_[rule].push_back(std::move(sequence));
}

Symbol GrammarBuilder::Terminal(const ByteSet& bytes) {
  std::string key = bytes.to_string();
  auto [it, inserted] = terminal_ids_.try_emplace(key, static_cast<int32_t>(terminals_.size()));
  if (inserted) terminals_.push_back(bytes);
  return -it->second - 1;
}

Symbol GrammarBuilder::Byte(uint8_t byte) {
  ByteSet set;
  set.set(byte);
  return Terminal(set);
}

Sequence GrammarBuilder::Literal(std::string_view text) {
  Sequence seq;
  seq.reserve(text.size());
  for (char c : text) seq.push_back(Byte(static_cast<uint8_t>(c)));
  return seq;
}

Symbol GrammarBuilder::Star(const Sequence& seq) {
  // R ::= ε | R seq
  int32_t rule = NewRule("star");
  AddAlternative(rule, {});
  Sequence recursive{rule};
  recursive.insert(recursive.end(), seq.begin(), seq.end());
  AddAlternative(rule, std::move(recursive));
  return rule;
}

Symbol GrammarBuilder::Plus(const Sequence& seq) {
  // R ::= seq | R seq
  int32_t rule = NewRule("plus");
  AddAlternative(rule, seq);
  Sequence recursive{rule};
  recursive.insert(recursive.end(), seq.begin(), seq.end());
  AddAlternative(rule, std::move(recursive));
  return rule;
}

Symbol GrammarBuilder::Optional(const Sequence& seq) {
  int32_t rule = NewRule("optional");
  AddAlternative(rule, {});
  AddAlternative(rule, seq);
  return rule;
}

Symbol GrammarBuilder::Choice(std::vector<Sequence> alternatives) {
  int32_t rule = NewRule("choice");
  for (Sequence& alternative : alternatives) AddAlternative(rule, std::move(alternative));
  return rule;
}

Symbol GrammarBuilder::Group(Sequence seq) {
  int32_t rule = NewRule("group");
  AddAlternative(rule, std::move(seq));
  return rule;
}

Symbol GrammarBuilder::Repeat(const Sequence& seq, int64_t min, int64_t max) {
  if (min < 0 || (max >= 0 && max < min)) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("invalid repetition bounds {", min, ",", max, "}")));
    return Group({});
  }
  if (min > limits_.max_repeat || max > limits_.max_repeat) {
    Fail(absl::ResourceExhaustedError(absl::StrCat("repetition bound ", std::max(min, max),
                                                   " exceeds the limit of ", limits_.max_repeat)));
    return Group({});
  }
  Sequence result;
  for (int64_t i = 0; i < min && !failed(); ++i) {
    result.insert(result.end(), seq.begin(), seq.end());
    CountSymbols(seq.size());
  }
  if (max < 0) {
    result.push_back(Star(seq));
  } else if (max > min) {
    // T_1 ::= ε | seq ; T_j ::= ε | seq T_(j-1): at most max - min more copies.
    Symbol tail = Optional(seq);
    for (int64_t j = min + 1; j < max && !failed(); ++j) {
      Sequence more = seq;
      more.push_back(tail);
      tail = Optional(more);
    }
    result.push_back(tail);
  }
  return Group(std::move(result));
}

void GrammarBuilder::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

absl::StatusOr<GrammarPtr> GrammarBuilder::Build(int32_t root) {
  if (!error_.ok()) return error_;
  const int32_t num_rules = static_cast<int32_t>(rules_.size());
  if (root < 0 || root >= num_rules) return absl::InvalidArgumentError("grammar has no root rule");
  for (const auto& alternatives : rules_) {
    for (const Sequence& seq : alternatives) {
      for (Symbol s : seq) {
        if (s >= num_rules) return absl::InternalError("grammar references an unknown rule");
      }
    }
  }

  // Productive rules (derive at least one string), to a fixpoint.
  std::vector<bool> productive(num_rules, false);
  auto symbol_productive = [&](Symbol s) {
    return s >= 0 ? productive[s] : terminals_[TerminalId(s)].any();
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < num_rules; ++r) {
      if (productive[r]) continue;
      for (const Sequence& seq : rules_[r]) {
        bool all = true;
        for (Symbol s : seq) all = all && symbol_productive(s);
        if (all) {
          productive[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  if (!productive[root]) return absl::InvalidArgumentError("the grammar matches no string");

  auto grammar = std::make_shared<Grammar>();
  grammar->limits_ = limits_;
  grammar->terminals_ = terminals_;
  grammar->rule_names_ = names_;
  grammar->rule_names_.push_back("$start");
  grammar->alternatives_.resize(num_rules + 1);
  grammar->start_rule_ = num_rules;
  rules_.push_back({Sequence{root}});

  // Keep only alternatives made of productive symbols; flatten them into slots.
  std::vector<std::vector<Sequence>> kept(num_rules + 1);
  for (int32_t r = 0; r <= num_rules; ++r) {
    for (Sequence& seq : rules_[r]) {
      bool all = true;
      for (Symbol s : seq) all = all && (s >= num_rules || symbol_productive(s));
      if (!all) continue;
      grammar->alternatives_[r].push_back(static_cast<int32_t>(grammar->slots_.size()));
      for (Symbol s : seq) {
        if (s >= 0) {
          grammar->slots_.push_back({Grammar::SlotKind::kRule, s});
        } else {
          grammar->slots_.push_back({Grammar::SlotKind::kTerminal, TerminalId(s)});
        }
      }
      grammar->slots_.push_back({Grammar::SlotKind::kEnd, r});
      kept[r].push_back(std::move(seq));
    }
  }

  // Nullable rules (derive the empty string), to a fixpoint.
  std::vector<bool> nullable(num_rules + 1, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r <= num_rules; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& seq : kept[r]) {
        bool all = true;
        for (Symbol s : seq) all = all && s >= 0 && nullable[s];
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  grammar->nullable_ = std::move(nullable);

  // Shortest string of each rule (every kept rule is productive), then per slot the shortest
  // rest of its alternative.
  constexpr int64_t kInfinite = int64_t{1} << 40;
  std::vector<int64_t> min_bytes(num_rules + 1, kInfinite);
  auto sequence_bytes = [&](const Sequence& seq, size_t from) {
    int64_t total = 0;
    for (size_t i = from; i < seq.size(); ++i) {
      total += seq[i] >= 0 ? min_bytes[seq[i]] : 1;
      if (total >= kInfinite) return kInfinite;
    }
    return total;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r <= num_rules; ++r) {
      for (const Sequence& seq : kept[r]) {
        const int64_t bytes = sequence_bytes(seq, 0);
        if (bytes < min_bytes[r]) {
          min_bytes[r] = bytes;
          changed = true;
        }
      }
    }
  }
  grammar->min_bytes_from_.reserve(grammar->slots_.size());
  for (int32_t r = 0; r <= num_rules; ++r) {
    for (const Sequence& seq : kept[r]) {
      for (size_t i = 0; i <= seq.size(); ++i) {
        grammar->min_bytes_from_.push_back(sequence_bytes(seq, i));
      }
    }
  }
  return GrammarPtr(std::move(grammar));
}

}  // namespace tandem::engine::grammar
