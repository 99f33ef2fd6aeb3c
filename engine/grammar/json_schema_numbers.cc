#include "engine/grammar/json_schema_numbers.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::grammar {
namespace {

using json = nlohmann::ordered_json;

const char* const kBoundKeywords[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

// The largest integer magnitude a bounded integer grammar writes: 18 digits, so every bound
// fits an int64 exactly.
constexpr int64_t kMaxBoundedInteger = 999999999999999999;

ByteSet DigitsBetween(char from, char to) {
  ByteSet set;
  for (char c = from; c <= to; ++c) set.set(static_cast<uint8_t>(c));
  return set;
}

}  // namespace

absl::Status JsonSchemaError(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("json_schema: ", std::string(what), " at '#", std::string(path), "'"));
}

Symbol JsonNumberGrammar::Digit() { return builder_.Terminal(DigitsBetween('0', '9')); }

Symbol JsonNumberGrammar::NonZeroDigit() { return builder_.Terminal(DigitsBetween('1', '9')); }

// The magnitude of an integer without leading zeros.
Symbol JsonNumberGrammar::Natural() {
  if (natural_ < 0) {
    natural_ = builder_.Choice({{builder_.Byte('0')}, {NonZeroDigit(), builder_.Star({Digit()})}});
  }
  return natural_;
}

Symbol JsonNumberGrammar::AnyInteger() {
  if (integer_ < 0) integer_ = builder_.Group({builder_.Optional({builder_.Byte('-')}), Natural()});
  return integer_;
}

Symbol JsonNumberGrammar::Fraction() {  // optional
  if (fraction_ < 0) fraction_ = builder_.Optional({builder_.Byte('.'), builder_.Plus({Digit()})});
  return fraction_;
}

Symbol JsonNumberGrammar::Exponent() {  // optional
  if (exponent_ < 0) {
    // At most two exponent digits: every number stays within a double's range.
    exponent_ =
        builder_.Optional({builder_.Terminal(ByteSet().set('e').set('E')),
                           builder_.Optional({builder_.Terminal(ByteSet().set('+').set('-'))}),
                           Digit(), builder_.Optional({Digit()})});
  }
  return exponent_;
}

Symbol JsonNumberGrammar::AnyNumber() {
  if (number_ < 0) number_ = builder_.Group({AnyInteger(), Fraction(), Exponent()});
  return number_;
}

absl::StatusOr<JsonNumberGrammar::IntegerBounds> JsonNumberGrammar::ReadIntegerBounds(
    const json& schema, const std::string& path) {
  IntegerBounds bounds;
  for (const char* key : kBoundKeywords) {
    if (!schema.contains(key)) continue;
    const json& value = schema[key];
    if (!value.is_number())
      return JsonSchemaError(absl::StrCat(path, "/", key), "must be a number");
    const std::string_view k = key;
    const bool lower = k == "minimum" || k == "exclusiveMinimum";
    const bool exclusive = k == "exclusiveMinimum" || k == "exclusiveMaximum";
    // The bound as the nearest integer inside it, clamped to 19 digits.
    int64_t v = 0;
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{kMaxBoundedInteger}) {
      v = kMaxBoundedInteger + 1;
    } else if (value.is_number_integer()) {
      v = std::clamp<int64_t>(value.get<int64_t>(), -kMaxBoundedInteger - 1,
                              kMaxBoundedInteger + 1);
      if (exclusive) v += lower ? 1 : -1;
    } else {
      const double d = std::clamp(value.get<double>(), -1e18, 1e18);
      v = static_cast<int64_t>(lower ? (exclusive ? std::floor(d) + 1 : std::ceil(d))
                                     : (exclusive ? std::ceil(d) - 1 : std::floor(d)));
    }
    if (lower) {
      bounds.lo = std::max(bounds.lo.value_or(v), v);
    } else {
      bounds.hi = std::min(bounds.hi.value_or(v), v);
    }
  }
  if (bounds.lo && *bounds.lo > kMaxBoundedInteger) {
    return JsonSchemaError(path,
                           "an integer lower bound above 999999999999999999 is not supported");
  }
  if (bounds.hi && *bounds.hi < -kMaxBoundedInteger) {
    return JsonSchemaError(path,
                           "an integer upper bound below -999999999999999999 is not supported");
  }
  if (bounds.lo) bounds.lo = std::max(*bounds.lo, -kMaxBoundedInteger);
  if (bounds.hi) bounds.hi = std::min(*bounds.hi, kMaxBoundedInteger);
  if (bounds.lo && bounds.hi && *bounds.lo > *bounds.hi) {
    return JsonSchemaError(path, "the bounds leave no integer");
  }
  return bounds;
}

// The decimal strings from `lo` to `hi` (same length, lo <= hi), digit by digit: one alternative
// for the low edge, one for the full middle and one for the high edge, so the size is quadratic in
// the digits.
Sequence JsonNumberGrammar::SameLengthRange(const std::string& lo, const std::string& hi) {
  if (lo == hi) return builder_.Literal(lo);
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos) {
    return Sequence(lo.size(), Digit());
  }
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  Sequence out{builder_.Byte(static_cast<uint8_t>(lo[0]))};
  if (lo[0] == hi[0]) {
    Sequence rest = SameLengthRange(rest_lo, rest_hi);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  }
  std::vector<Sequence> alternatives;
  Sequence low = SameLengthRange(rest_lo, std::string(rest_lo.size(), '9'));
  out.insert(out.end(), low.begin(), low.end());
  alternatives.push_back(std::move(out));
  if (hi[0] - lo[0] > 1) {
    Sequence middle{builder_.Terminal(
        DigitsBetween(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)))};
    middle.insert(middle.end(), rest_lo.size(), Digit());
    alternatives.push_back(std::move(middle));
  }
  Sequence high{builder_.Byte(static_cast<uint8_t>(hi[0]))};
  Sequence high_rest = SameLengthRange(std::string(rest_hi.size(), '0'), rest_hi);
  high.insert(high.end(), high_rest.begin(), high_rest.end());
  alternatives.push_back(std::move(high));
  return {builder_.Choice(std::move(alternatives))};
}

// The canonical decimals from `lo` (>= 0) to `hi` (nullopt: unbounded), one SameLengthRange per
// number of digits; unbounded, every longer number too.
void JsonNumberGrammar::NaturalRange(int64_t lo, std::optional<int64_t> hi, Sequence prefix,
                                     std::vector<Sequence>* alternatives) {
  int64_t first = 0, last = 9;  // the smallest and largest numbers with `digits` digits
  for (int digits = 1; digits <= 18; ++digits) {
    const int64_t from = std::max(lo, first);
    const int64_t to = hi ? std::min(*hi, last) : last;
    if (from <= to) {
      Sequence alternative = prefix;
      Sequence range = SameLengthRange(absl::StrCat(from), absl::StrCat(to));
      alternative.insert(alternative.end(), range.begin(), range.end());
      alternatives->push_back(std::move(alternative));
    }
    first = last + 1;
    if (digits < 18) last = last * 10 + 9;
  }
  if (!hi) {
    prefix.insert(prefix.end(), {NonZeroDigit(), builder_.Repeat({Digit()}, 18, -1)});
    alternatives->push_back(std::move(prefix));
  }
}

absl::StatusOr<Sequence> JsonNumberGrammar::Integer(const json& schema, const std::string& path,
                                                    bool int64_integers) {
  ASSIGN_OR_RETURN(IntegerBounds bounds, ReadIntegerBounds(schema, path));
  if (int64_integers) {
    if (!bounds.lo) bounds.lo = -kMaxBoundedInteger;
    if (!bounds.hi) bounds.hi = kMaxBoundedInteger;
  }
  if (!bounds.lo && !bounds.hi) return Sequence{AnyInteger()};
  std::vector<Sequence> alternatives;
  if (!bounds.lo || *bounds.lo < 0) {  // "-" then 1 .. -lo
    std::optional<int64_t> magnitude_hi;
    if (bounds.lo) magnitude_hi = -*bounds.lo;
    const int64_t magnitude_lo = bounds.hi && *bounds.hi < 0 ? -*bounds.hi : 1;
    NaturalRange(magnitude_lo, magnitude_hi, {builder_.Byte('-')}, &alternatives);
  }
  if (!bounds.hi || *bounds.hi >= 0) {
    NaturalRange(bounds.lo ? std::max<int64_t>(0, *bounds.lo) : 0, bounds.hi, {}, &alternatives);
  }
  return Sequence{builder_.Choice(std::move(alternatives))};
}

absl::StatusOr<Sequence> JsonNumberGrammar::Number(const json& schema, const std::string& path) {
  bool nonnegative = false, negative = false, bounded = false;
  for (const char* key : kBoundKeywords) {
    if (!schema.contains(key)) continue;
    const json& value = schema[key];
    if (!value.is_number())
      return JsonSchemaError(absl::StrCat(path, "/", key), "must be a number");
    bounded = true;
    const double v = value.get<double>();
    const std::string_view k = key;
    if ((k == "minimum" || k == "exclusiveMinimum") && v >= 0) nonnegative = true;
    if ((k == "maximum" && v < 0) || (k == "exclusiveMaximum" && v <= 0)) negative = true;
  }
  if (!bounded) return Sequence{AnyNumber()};
  if (nonnegative && negative) return JsonSchemaError(path, "the bounds leave no number");
  if (nonnegative) return Sequence{Natural(), Fraction(), Exponent()};
  if (!negative) return Sequence{AnyNumber()};
  // A non-zero digit before or after the point.
  const Symbol magnitude =
      builder_.Choice({{NonZeroDigit(), builder_.Star({Digit()}), Fraction()},
                       {builder_.Byte('0'), builder_.Byte('.'), builder_.Star({builder_.Byte('0')}),
                        NonZeroDigit(), builder_.Star({Digit()})}});
  return Sequence{builder_.Byte('-'), magnitude, Exponent()};
}

}  // namespace tandem::engine::grammar
