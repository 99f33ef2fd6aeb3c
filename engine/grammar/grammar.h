// Grammar: a context-free grammar over bytes, the one representation that JSON Schema, regular
// expressions, EBNF and structural tags compile into (json_schema_compiler.h, regex_compiler.h,
// ebnf_compiler.h, structural_tag.h).
// GrammarMatcher (matcher.h) recognizes it byte by byte.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence
// of symbols, each either a terminal (a set of bytes, matching one byte) or a reference to a
// rule. Characters beyond ASCII are sequences of byte terminals (utf8_class.h).
//
// GrammarBuilder assembles a grammar and Build() checks it: unknown rules, a root that derives
// no string, and the size limits of GrammarLimits are errors (InvalidArgument /
// ResourceExhausted), so a hostile schema or pattern fails to compile rather than exhausting
// memory. Build() also drops alternatives that can never complete (they reference a rule that
// derives no string), so every state the recognizer reaches can still be completed.
//
// Thread-safety: a built Grammar is immutable and shared (std::shared_ptr<const Grammar>) by
// every matcher of every request that uses it; GrammarBuilder is single-threaded.
#ifndef TANDEM_ENGINE_GRAMMAR_GRAMMAR_H_
#define TANDEM_ENGINE_GRAMMAR_GRAMMAR_H_

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine::grammar {

using ByteSet = std::bitset<256>;

// Bounds on what a user-supplied grammar may cost. Exceeding one at compile time is an error;
// exceeding a recognizer bound while matching makes the matcher refuse the byte (matcher.h).
struct GrammarLimits {
  int64_t max_symbols = 200000;            // symbols over all alternatives, after expansion
  int32_t max_nesting_depth = 64;          // nesting of schema objects, groups, $ref chains
  int32_t max_repeat = 1000;               // largest bound of {m,n}, minItems, maxLength
  int32_t max_items_per_position = 20000;  // Earley items in one recognizer state
  int64_t max_work_per_byte = 2000000;     // item operations for one accepted byte
};

// Symbol encoding in an alternative: >= 0 is a rule id; < 0 is terminal -(id + 1).
using Symbol = int32_t;
using Sequence = std::vector<Symbol>;

class Grammar {
 public:
  // Slot kinds of the flattened alternatives (see slots()).
  enum class SlotKind : uint8_t { kRule, kTerminal, kEnd };
  struct Slot {
    SlotKind kind;
    int32_t
        value;  // rule id (kRule), terminal id (kTerminal), rule the alternative belongs to (kEnd)
  };

  // Every alternative of every rule, flattened: its symbols followed by one kEnd slot. An
  // Earley item's "dot" is an index into this array.
  const std::vector<Slot>& slots() const { return slots_; }
  // First slot of each alternative of `rule`.
  const std::vector<int32_t>& alternatives(int32_t rule) const { return alternatives_[rule]; }
  const ByteSet& terminal(int32_t id) const { return terminals_[id]; }
  bool nullable(int32_t rule) const { return nullable_[rule]; }
  // Fewest bytes that complete the alternative from `slot` to its end (its kEnd slot: 0).
  int64_t min_bytes_from(int32_t slot) const { return min_bytes_from_[slot]; }
  // The start rule: exactly one alternative, [root], so completion is one item to look for.
  int32_t start_rule() const { return start_rule_; }
  int32_t num_rules() const { return static_cast<int32_t>(alternatives_.size()); }
  const GrammarLimits& limits() const { return limits_; }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }

 private:
  friend class GrammarBuilder;
  std::vector<Slot> slots_;
  std::vector<std::vector<int32_t>> alternatives_;
  std::vector<ByteSet> terminals_;
  std::vector<bool> nullable_;
  std::vector<int64_t> min_bytes_from_;  // per slot
  std::vector<std::string> rule_names_;
  int32_t start_rule_ = -1;
  GrammarLimits limits_;
};

using GrammarPtr = std::shared_ptr<const Grammar>;

// Assembles a grammar. Helpers that build composite expressions (Star, Choice, ...) create
// anonymous rules and return a symbol referencing them. Exceeding max_symbols records an error
// that Build() returns (the helpers keep working on a bounded amount of data meanwhile).
class GrammarBuilder {
 public:
  explicit GrammarBuilder(const GrammarLimits& limits = GrammarLimits());

  // A new rule with no alternatives yet; `name` appears in error messages.
  int32_t NewRule(std::string name);
  void AddAlternative(int32_t rule, Sequence sequence);

  Symbol Terminal(const ByteSet& bytes);
  Symbol Byte(uint8_t byte);
  // One terminal per byte of `text`.
  Sequence Literal(std::string_view text);

  // Anonymous rules: `seq`*, `seq`+, `seq`?, one of `alternatives`, `seq` repeated between
  // `min` and `max` times (max < 0: unbounded). Repetition is left-recursive so the recognizer
  // keeps a constant number of items per repetition. Repeat bounds above max_repeat are an error.
  Symbol Star(const Sequence& seq);
  Symbol Plus(const Sequence& seq);
  Symbol Optional(const Sequence& seq);
  Symbol Choice(std::vector<Sequence> alternatives);
  Symbol Repeat(const Sequence& seq, int64_t min, int64_t max);
  // A rule with the one alternative `seq` (grouping, so a sequence can be used as a symbol).
  Symbol Group(Sequence seq);

  // Records an error (the first one wins) for Build() to return.
  void Fail(absl::Status status);
  bool failed() const { return !error_.ok(); }
  const GrammarLimits& limits() const { return limits_; }

  // The finished grammar with `root` as its start. The builder is spent afterwards.
  absl::StatusOr<GrammarPtr> Build(int32_t root);

 private:
  void CountSymbols(size_t n);

  GrammarLimits limits_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> terminals_;
  absl::flat_hash_map<std::string, int32_t> terminal_ids_;  // ByteSet bytes -> id
  int64_t symbols_ = 0;
  absl::Status error_;
};

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_GRAMMAR_H_
