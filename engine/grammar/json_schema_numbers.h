// JSON numbers in the byte-level grammar, and JSON Schema's numeric bound keywords (minimum,
// maximum, exclusiveMinimum, exclusiveMaximum) on them: the part of json_schema_compiler.h that
// turns bounds into digits. Internal to engine/grammar.
//
// Shapes written (no whitespace around them):
//   integer  -?(0|[1-9][0-9]*)   (with int64_integers, as every json_schema constraint and
//            structural tag reads it: 0|-?[1-9][0-9]{0,17})
//   number   integer (\.[0-9]+)? ([eE][+-]?[0-9][0-9]?)?   (two exponent digits at most, so every
//            number stays within a double's range)
//
// Integer bounds are exact: the grammar is a digit-by-digit union of same-length decimal ranges
// (size quadratic in the digits). A bound is read as the nearest integer inside it (an exclusive
// bound moves one step in, a fractional one rounds inward). A bounded side has at most 18 digits:
// a bound whose magnitude is beyond 999999999999999999 is clamped to it (stricter than the schema,
// never looser), and a lower bound above it or an upper bound below its negative is an error.
//
// Number bounds are enforced through the sign only: a lower bound >= 0 forbids a minus sign;
// maximum < 0 or exclusiveMaximum <= 0 requires a non-zero negative number; bounds asking for both
// are an error. The rest of a number's range is not enforced (an exact grammar would have to
// weigh the exponent against the bound's digits).
//
// Errors are InvalidArgument in the compiler's format (JsonSchemaError) at the schema's JSON
// pointer, or at the keyword's for a bound that is not a number. Not thread-safe: one per
// GrammarBuilder, used by one compiler at a time.
#ifndef TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_NUMBERS_H_
#define TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_NUMBERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "nlohmann/json_fwd.hpp"

namespace tandem::engine::grammar {

// The JSON Schema compiler's error for the schema at JSON pointer `path` ("" is the document):
// InvalidArgument "json_schema: <what> at '#<path>'".
absl::Status JsonSchemaError(std::string_view path, std::string_view what);

class JsonNumberGrammar {
 public:
  // `builder` must outlive this object. Each shared piece is built on first use, once.
  explicit JsonNumberGrammar(GrammarBuilder& builder) : builder_(builder) {}
  JsonNumberGrammar(const JsonNumberGrammar&) = delete;
  JsonNumberGrammar& operator=(const JsonNumberGrammar&) = delete;

  // Any JSON number.
  Symbol AnyNumber();

  // `type: integer` with the bound keywords of `schema` (the schema object at `path`); with
  // `int64_integers` an unbounded side is bounded at 18 digits too (JsonSchemaOptions).
  absl::StatusOr<Sequence> Integer(const nlohmann::ordered_json& schema, const std::string& path,
                                   bool int64_integers);

  // `type: number` with the bound keywords of `schema`, through the sign only.
  absl::StatusOr<Sequence> Number(const nlohmann::ordered_json& schema, const std::string& path);

 private:
  // The integers the bound keywords allow, [lo, hi] (nullopt: unbounded on that side).
  struct IntegerBounds {
    std::optional<int64_t> lo, hi;
  };
  absl::StatusOr<IntegerBounds> ReadIntegerBounds(const nlohmann::ordered_json& schema,
                                                  const std::string& path);
  Sequence SameLengthRange(const std::string& lo, const std::string& hi);
  void NaturalRange(int64_t lo, std::optional<int64_t> hi, Sequence prefix,
                    std::vector<Sequence>* alternatives);

  Symbol Digit();
  Symbol NonZeroDigit();
  Symbol Natural();
  Symbol AnyInteger();
  Symbol Fraction();
  Symbol Exponent();

  GrammarBuilder& builder_;
  Symbol natural_ = -1, integer_ = -1, fraction_ = -1, exponent_ = -1, number_ = -1;
};

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_NUMBERS_H_
