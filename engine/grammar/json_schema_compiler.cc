#include "engine/grammar/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/grammar/utf8_class.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::grammar {
namespace {

// Ordered: properties come out in the order the schema lists them.
using json = nlohmann::ordered_json;

const absl::flat_hash_set<std::string_view> kAnnotations = {
    "title", "description", "default",    "examples", "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
// What tool definitions carry and JsonSchemaOptions::lenient_annotations lets pass.
const absl::flat_hash_set<std::string_view> kLenientAnnotations = {"format", "nullable", "strict"};
const absl::flat_hash_set<std::string_view> kKeywords = {"type",
                                                         "properties",
                                                         "required",
                                                         "additionalProperties",
                                                         "enum",
                                                         "const",
                                                         "items",
                                                         "minItems",
                                                         "maxItems",
                                                         "anyOf",
                                                         "oneOf",
                                                         "allOf",
                                                         "$ref",
                                                         "$defs",
                                                         "definitions",
                                                         "pattern",
                                                         "minLength",
                                                         "maxLength",
                                                         "minimum",
                                                         "maximum",
                                                         "exclusiveMinimum",
                                                         "exclusiveMaximum"};
const char* const kBoundKeywords[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

// The largest integer magnitude a bounded integer grammar writes: 18 digits, so every bound
// fits an int64 exactly.
constexpr int64_t kMaxBoundedInteger = 999999999999999999;

std::string Escape(std::string_view token) {
  // JSON pointer escaping of one reference token, for error messages.
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// JSON nesting deeper than this is refused before parsing (a schema nested to the compiler's own
// depth limit stays far below it).
constexpr int kMaxSchemaJsonDepth = 256;

// Trie over code points of the listed property names: the keys an additional property may not
// use.
struct KeyTrie {
  std::map<uint32_t, int> children;
  bool terminal = false;
};

absl::StatusOr<json> ParseSchema(std::string_view schema_json) {
  // The JSON parser recurses per nesting level: bound it before parsing untrusted text.
  if (JsonNestingDepth(schema_json, kMaxSchemaJsonDepth) > kMaxSchemaJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "json_schema: the schema nests JSON deeper than ", kMaxSchemaJsonDepth, " levels"));
  }
  try {
    return json::parse(schema_json);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: not valid JSON: ", e.what()));
  }
}

class JsonSchemaCompiler {
 public:
  // `document` and `builder` must outlive the compiler.
  JsonSchemaCompiler(const json& document, GrammarBuilder& builder, std::string_view rule_prefix,
                     const JsonSchemaOptions& options)
      : document_(document), builder_(builder), prefix_(rule_prefix), options_(options) {}

  absl::StatusOr<Sequence> CompileDocument() { return Compile(document_, "", 0); }

  Symbol CompileAnyObject() { return AnyObject(); }

 private:
  bool IsAnnotation(std::string_view key) const {
    return kAnnotations.contains(key) ||
           (options_.lenient_annotations && kLenientAnnotations.contains(key));
  }
  int32_t NewRule(std::string_view name) {
    return builder_.NewRule(absl::StrCat(prefix_, std::string(name)));
  }

  static absl::Status Error(const std::string& path, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", std::string(what), " at '",
                                                   path.empty() ? "#" : "#" + path, "'"));
  }

  // --- Generic JSON pieces, each built once. ---
  // Nothing, one space, or a line break and an indentation of up to kMaxJsonIndent spaces or
  // tabs: room for compact and pretty-printed JSON, none for runs of blank lines.
  Symbol Ws() {
    if (ws_ < 0) {
      const Symbol indent =
          builder_.Repeat({builder_.Terminal(ByteSet().set(' ').set('\t'))}, 0, kMaxJsonIndent);
      ws_ = builder_.Choice({{}, {builder_.Byte(' ')}, {builder_.Byte('\n'), indent}});
    }
    return ws_;
  }
  Symbol RawStringChar() {
    if (raw_char_ < 0) {
      raw_char_ = CodepointClass(builder_, SubtractRanges(NormalizeRanges({}, true),
                                                          {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
    }
    return raw_char_;
  }
  Symbol StringChar() {
    if (string_char_ < 0) {
      ByteSet simple;
      for (char c : std::string_view("\"\\/bfnrt")) simple.set(static_cast<uint8_t>(c));
      ByteSet hex, hex_no_d, hex_low;
      for (char c : std::string_view("0123456789abcdefABCDEF")) hex.set(static_cast<uint8_t>(c));
      hex_no_d = hex;
      hex_no_d.reset('d');
      hex_no_d.reset('D');
      for (char c : std::string_view("01234567")) hex_low.set(static_cast<uint8_t>(c));
      const Symbol h = builder_.Terminal(hex);
      // \uXXXX without surrogates: first digit not d/D, or d/D followed by 0-7.
      Symbol unicode = builder_.Choice(
          {{builder_.Terminal(hex_no_d), h, h, h},
           {builder_.Terminal(ByteSet().set('d').set('D')), builder_.Terminal(hex_low), h, h}});
      Symbol escape = builder_.Choice({{builder_.Terminal(simple)}, {builder_.Byte('u'), unicode}});
      string_char_ = builder_.Choice({{RawStringChar()}, {builder_.Byte('\\'), escape}});
    }
    return string_char_;
  }
  Symbol AnyString() {
    if (string_ < 0) {
      string_ =
          builder_.Group({builder_.Byte('"'), builder_.Star({StringChar()}), builder_.Byte('"')});
    }
    return string_;
  }
  Symbol Digit() { return builder_.Terminal(DigitsBetween('0', '9')); }
  Symbol NonZeroDigit() { return builder_.Terminal(DigitsBetween('1', '9')); }
  static ByteSet DigitsBetween(char from, char to) {
    ByteSet set;
    for (char c = from; c <= to; ++c) set.set(static_cast<uint8_t>(c));
    return set;
  }
  // The magnitude of an integer without leading zeros.
  Symbol Natural() {
    if (natural_ < 0) {
      natural_ =
          builder_.Choice({{builder_.Byte('0')}, {NonZeroDigit(), builder_.Star({Digit()})}});
    }
    return natural_;
  }
  Symbol Integer() {
    if (integer_ < 0)
      integer_ = builder_.Group({builder_.Optional({builder_.Byte('-')}), Natural()});
    return integer_;
  }
  Symbol Fraction() {  // optional
    if (fraction_ < 0)
      fraction_ = builder_.Optional({builder_.Byte('.'), builder_.Plus({Digit()})});
    return fraction_;
  }
  Symbol Exponent() {  // optional
    if (exponent_ < 0) {
      // At most two exponent digits: every number stays within a double's range.
      exponent_ =
          builder_.Optional({builder_.Terminal(ByteSet().set('e').set('E')),
                             builder_.Optional({builder_.Terminal(ByteSet().set('+').set('-'))}),
                             Digit(), builder_.Optional({Digit()})});
    }
    return exponent_;
  }
  Symbol Number() {
    if (number_ < 0) number_ = builder_.Group({Integer(), Fraction(), Exponent()});
    return number_;
  }
  Symbol AnyValue() {
    if (value_ < 0) {
      value_ = NewRule("value");
      for (Sequence alternative : std::vector<Sequence>{{AnyObject()},
                                                        {AnyArray()},
                                                        {AnyString()},
                                                        {Number()},
                                                        builder_.Literal("true"),
                                                        builder_.Literal("false"),
                                                        builder_.Literal("null")}) {
        builder_.AddAlternative(value_, std::move(alternative));
      }
    }
    return value_;
  }
  Symbol AnyObject() {
    if (object_ < 0) {
      object_ = NewRule("object");
      const Symbol value = AnyValue();
      Sequence member{AnyString(), Ws(), builder_.Byte(':'), Ws(), value, Ws()};
      Sequence more{builder_.Byte(','), Ws()};
      more.insert(more.end(), member.begin(), member.end());
      Sequence members = member;
      members.push_back(builder_.Star(more));
      builder_.AddAlternative(
          object_, {builder_.Byte('{'), Ws(), builder_.Optional(members), builder_.Byte('}')});
    }
    return object_;
  }
  Symbol AnyArray() {
    if (array_ < 0) {
      array_ = NewRule("array");
      builder_.AddAlternative(array_, ArrayOf(AnyValue(), 0, -1));
    }
    return array_;
  }
  Sequence ArrayOf(Symbol item, int64_t min, int64_t max) {
    Sequence open{builder_.Byte('['), Ws()};
    if (max == 0) {
      open.push_back(builder_.Byte(']'));
      return open;
    }
    Sequence element{item, Ws()};
    Sequence rest{builder_.Byte(','), Ws(), item, Ws()};
    Sequence items = element;
    items.push_back(builder_.Repeat(rest, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1));
    if (min == 0) {
      open.push_back(builder_.Optional(items));
    } else {
      open.insert(open.end(), items.begin(), items.end());
    }
    open.push_back(builder_.Byte(']'));
    return open;
  }

  // --- Schemas. ---
  absl::StatusOr<Sequence> Compile(const json& schema, const std::string& path, int depth) {
    if (depth > builder_.limits().max_nesting_depth) return Error(path, "schema nested too deeply");
    if (builder_.failed()) return Sequence{};
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Sequence{AnyValue()};
      return Error(path, "the schema false matches nothing");
    }
    if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
    for (const auto& [key, unused] : schema.items()) {
      if (!kKeywords.contains(key) && !IsAnnotation(key)) {
        return Error(path, absl::StrCat("unsupported keyword '", key, "'"));
      }
    }
    auto has = [&](const char* key) { return schema.contains(key); };
    auto siblings_besides = [&](std::initializer_list<std::string_view> allowed) {
      for (const auto& [key, unused] : schema.items()) {
        if (IsAnnotation(key) || key == "$defs" || key == "definitions") continue;
        bool ok = false;
        for (std::string_view a : allowed) ok = ok || key == a;
        if (!ok) return key;
      }
      return std::string();
    };

    if (has("$ref")) {
      if (std::string other = siblings_besides({"$ref"}); !other.empty()) {
        return Error(path, absl::StrCat("'$ref' beside '", other, "' is not supported"));
      }
      return CompileRef(schema["$ref"], path, depth);
    }
    if (has("const")) {
      if (std::string other = siblings_besides({"const", "type"}); !other.empty()) {
        return Error(path, absl::StrCat("'const' beside '", other, "' is not supported"));
      }
      return builder_.Literal(schema["const"].dump());
    }
    if (has("enum")) {
      if (std::string other = siblings_besides({"enum", "type"}); !other.empty()) {
        return Error(path, absl::StrCat("'enum' beside '", other, "' is not supported"));
      }
      const json& values = schema["enum"];
      if (!values.is_array() || values.empty()) {
        return Error(path + "/enum", "'enum' must be a non-empty array");
      }
      std::vector<Sequence> alternatives;
      for (const json& value : values) alternatives.push_back(builder_.Literal(value.dump()));
      return Sequence{builder_.Choice(std::move(alternatives))};
    }
    for (const char* combinator : {"anyOf", "oneOf", "allOf"}) {
      if (!has(combinator)) continue;
      if (std::string other = siblings_besides({combinator}); !other.empty()) {
        return Error(path,
                     absl::StrCat("'", combinator, "' beside '", other, "' is not supported"));
      }
      const json& branches = schema[combinator];
      const std::string branches_path = absl::StrCat(path, "/", combinator);
      if (!branches.is_array() || branches.empty()) {
        return Error(branches_path, "must be a non-empty array");
      }
      if (std::string_view(combinator) == "allOf" && branches.size() != 1) {
        return Error(branches_path, "'allOf' with more than one schema is not supported");
      }
      std::vector<Sequence> alternatives;
      for (size_t i = 0; i < branches.size(); ++i) {
        ASSIGN_OR_RETURN(Sequence branch,
                         Compile(branches[i], absl::StrCat(branches_path, "/", i), depth + 1));
        alternatives.push_back(std::move(branch));
      }
      return Sequence{builder_.Choice(std::move(alternatives))};
    }

    std::vector<std::string> types;
    if (has("type")) {
      const json& type = schema["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array() && !type.empty()) {
        for (const json& t : type) {
          if (!t.is_string()) return Error(path + "/type", "'type' entries must be strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(path + "/type", "'type' must be a string or a non-empty array");
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else if (has("pattern") || has("minLength") || has("maxLength")) {
      types.push_back("string");
    } else if (has("minimum") || has("maximum") || has("exclusiveMinimum") ||
               has("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return Sequence{AnyValue()};
    }
    std::vector<Sequence> alternatives;
    for (const std::string& type : types) {
      if (type == "object") {
        ASSIGN_OR_RETURN(Sequence object, CompileObject(schema, path, depth));
        alternatives.push_back(std::move(object));
      } else if (type == "array") {
        ASSIGN_OR_RETURN(Sequence array, CompileArray(schema, path, depth));
        alternatives.push_back(std::move(array));
      } else if (type == "string") {
        ASSIGN_OR_RETURN(Sequence string, CompileString(schema, path));
        alternatives.push_back(std::move(string));
      } else if (type == "number") {
        ASSIGN_OR_RETURN(Sequence number, CompileNumber(schema, path));
        alternatives.push_back(std::move(number));
      } else if (type == "integer") {
        ASSIGN_OR_RETURN(Sequence integer, CompileInteger(schema, path));
        alternatives.push_back(std::move(integer));
      } else if (type == "boolean") {
        alternatives.push_back(
            {builder_.Choice({builder_.Literal("true"), builder_.Literal("false")})});
      } else if (type == "null") {
        alternatives.push_back(builder_.Literal("null"));
      } else {
        return Error(path + "/type", absl::StrCat("unknown type '", type, "'"));
      }
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    return Sequence{builder_.Choice(std::move(alternatives))};
  }

  absl::StatusOr<Sequence> CompileRef(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Error(path + "/$ref", "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return Sequence{it->second};
    if (target.empty() || target[0] != '#') {
      return Error(path + "/$ref", "only references within the document ('#...') are supported");
    }
    const json* resolved = nullptr;
    try {
      const json::json_pointer pointer(target.substr(1));
      if (document_.contains(pointer)) resolved = &document_.at(pointer);
    } catch (const json::exception&) {
      return Error(path + "/$ref", absl::StrCat("malformed reference '", target, "'"));
    }
    if (resolved == nullptr) {
      return Error(path + "/$ref", absl::StrCat("unresolved reference '", target, "'"));
    }
    const int32_t rule = NewRule(target);
    ref_rules_.emplace(target, rule);
    ASSIGN_OR_RETURN(Sequence body, Compile(*resolved, target.substr(1), depth + 1));
    builder_.AddAlternative(rule, std::move(body));
    return Sequence{rule};
  }

  absl::StatusOr<int64_t> NonNegative(const json& schema, const char* key, const std::string& path,
                                      int64_t fallback) {
    if (!schema.contains(key)) return fallback;
    const json& value = schema[key];
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
      return Error(absl::StrCat(path, "/", key), "must be a non-negative integer");
    }
    return value.get<int64_t>();
  }

  // --- Numeric bounds. ---
  // The integers the bound keywords allow, [lo, hi] (nullopt: unbounded on that side). A bound
  // whose magnitude exceeds kMaxBoundedInteger is clamped to it, which keeps that side to 18
  // digits (stricter than the schema, never looser).
  struct IntegerBounds {
    std::optional<int64_t> lo, hi;
  };
  absl::StatusOr<IntegerBounds> ReadIntegerBounds(const json& schema, const std::string& path) {
    IntegerBounds bounds;
    for (const char* key : kBoundKeywords) {
      if (!schema.contains(key)) continue;
      const json& value = schema[key];
      if (!value.is_number()) return Error(absl::StrCat(path, "/", key), "must be a number");
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
      return Error(path, "an integer lower bound above 999999999999999999 is not supported");
    }
    if (bounds.hi && *bounds.hi < -kMaxBoundedInteger) {
      return Error(path, "an integer upper bound below -999999999999999999 is not supported");
    }
    if (bounds.lo) bounds.lo = std::max(*bounds.lo, -kMaxBoundedInteger);
    if (bounds.hi) bounds.hi = std::min(*bounds.hi, kMaxBoundedInteger);
    if (bounds.lo && bounds.hi && *bounds.lo > *bounds.hi) {
      return Error(path, "the bounds leave no integer");
    }
    return bounds;
  }

  // The decimal strings from `lo` to `hi` (same length, lo <= hi), digit by digit: one
  // alternative for the low edge, one for the full middle and one for the high edge, so the size
  // is quadratic in the digits.
  Sequence SameLengthRange(const std::string& lo, const std::string& hi) {
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

  // The canonical decimals from `lo` (>= 0) to `hi` (nullopt: unbounded), one SameLengthRange
  // per number of digits; unbounded, every longer number too.
  void NaturalRange(int64_t lo, std::optional<int64_t> hi, Sequence prefix,
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

  // Integers: minimum/maximum/exclusiveMinimum/exclusiveMaximum exactly.
  absl::StatusOr<Sequence> CompileInteger(const json& schema, const std::string& path) {
    ASSIGN_OR_RETURN(IntegerBounds bounds, ReadIntegerBounds(schema, path));
    if (options_.int64_integers) {
      if (!bounds.lo) bounds.lo = -kMaxBoundedInteger;
      if (!bounds.hi) bounds.hi = kMaxBoundedInteger;
    }
    if (!bounds.lo && !bounds.hi) return Sequence{Integer()};
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

  // Numbers: the bounds through the sign only (a lower bound >= 0 forbids a minus sign; maximum
  // < 0 or exclusiveMaximum <= 0 requires a non-zero negative number).
  absl::StatusOr<Sequence> CompileNumber(const json& schema, const std::string& path) {
    bool nonnegative = false, negative = false, bounded = false;
    for (const char* key : kBoundKeywords) {
      if (!schema.contains(key)) continue;
      const json& value = schema[key];
      if (!value.is_number()) return Error(absl::StrCat(path, "/", key), "must be a number");
      bounded = true;
      const double v = value.get<double>();
      const std::string_view k = key;
      if ((k == "minimum" || k == "exclusiveMinimum") && v >= 0) nonnegative = true;
      if ((k == "maximum" && v < 0) || (k == "exclusiveMaximum" && v <= 0)) negative = true;
    }
    if (!bounded) return Sequence{Number()};
    if (nonnegative && negative) return Error(path, "the bounds leave no number");
    if (nonnegative) return Sequence{Natural(), Fraction(), Exponent()};
    if (!negative) return Sequence{Number()};
    // A non-zero digit before or after the point.
    const Symbol magnitude = builder_.Choice(
        {{NonZeroDigit(), builder_.Star({Digit()}), Fraction()},
         {builder_.Byte('0'), builder_.Byte('.'), builder_.Star({builder_.Byte('0')}),
          NonZeroDigit(), builder_.Star({Digit()})}});
    return Sequence{builder_.Byte('-'), magnitude, Exponent()};
  }

  absl::StatusOr<Sequence> CompileString(const json& schema, const std::string& path) {
    const bool bounded = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("pattern")) {
      if (bounded) return Error(path, "'pattern' with 'minLength'/'maxLength' is not supported");
      if (!schema["pattern"].is_string()) return Error(path + "/pattern", "must be a string");
      RegexOptions options;
      options.json_string_content = true;
      absl::StatusOr<Sequence> content =
          CompileRegexInto(builder_, schema["pattern"].get<std::string>(), options);
      if (!content.ok()) return Annotate(content.status(), absl::StrCat("#", path, "/pattern: "));
      return Sequence{builder_.Byte('"'), builder_.Group(*std::move(content)), builder_.Byte('"')};
    }
    if (!bounded) return Sequence{AnyString()};
    ASSIGN_OR_RETURN(int64_t min, NonNegative(schema, "minLength", path, 0));
    ASSIGN_OR_RETURN(int64_t max, NonNegative(schema, "maxLength", path, -1));
    if (max >= 0 && max < min) return Error(path, "'maxLength' is below 'minLength'");
    return Sequence{builder_.Byte('"'), builder_.Repeat({StringChar()}, min, max),
                    builder_.Byte('"')};
  }

  absl::StatusOr<Sequence> CompileArray(const json& schema, const std::string& path, int depth) {
    ASSIGN_OR_RETURN(int64_t min, NonNegative(schema, "minItems", path, 0));
    ASSIGN_OR_RETURN(int64_t max, NonNegative(schema, "maxItems", path, -1));
    if (max >= 0 && max < min) return Error(path, "'maxItems' is below 'minItems'");
    Symbol item = -1;
    if (schema.contains("items")) {
      ASSIGN_OR_RETURN(Sequence items, Compile(schema["items"], path + "/items", depth + 1));
      item = builder_.Group(std::move(items));
    } else {
      item = AnyValue();
    }
    return ArrayOf(item, min, max);
  }

  // A quoted key with no escapes that differs from every name in `names`.
  Symbol ExtraKey(const std::vector<std::string>& names) {
    std::vector<KeyTrie> trie(1);
    for (const std::string& name : names) {
      int node = 0;
      size_t pos = 0;
      uint32_t cp = 0;
      while (pos < name.size() && DecodeUtf8(name, &pos, &cp)) {
        auto [it, inserted] = trie[node].children.try_emplace(cp, static_cast<int>(trie.size()));
        if (inserted) trie.emplace_back();
        node = it->second;
      }
      trie[node].terminal = true;
    }
    const CodepointRanges raw =
        SubtractRanges(NormalizeRanges({}, true), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    const Symbol free = builder_.Star({RawStringChar()});
    std::vector<int32_t> rules(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rules[i] = NewRule("key");
    for (size_t i = 0; i < trie.size(); ++i) {
      if (!trie[i].terminal) builder_.AddAlternative(rules[i], {});
      CodepointRanges others = raw;
      for (const auto& [cp, child] : trie[i].children) {
        Sequence step = {CodepointClass(builder_, {{cp, cp}}), rules[child]};
        builder_.AddAlternative(rules[i], std::move(step));
        others = SubtractRanges(others, {{cp, cp}});
      }
      builder_.AddAlternative(rules[i], {CodepointClass(builder_, others), free});
    }
    return builder_.Group({builder_.Byte('"'), rules[0], builder_.Byte('"')});
  }

  absl::StatusOr<Sequence> CompileObject(const json& schema, const std::string& path, int depth) {
    static const json kEmpty = json::object();
    const json& properties = schema.contains("properties") ? schema["properties"] : kEmpty;
    if (!properties.is_object()) return Error(path + "/properties", "must be an object");
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const json& list = schema["required"];
      if (!list.is_array()) return Error(path + "/required", "must be an array");
      for (const json& name : list) {
        if (!name.is_string()) return Error(path + "/required", "entries must be strings");
        if (!properties.contains(name.get<std::string>())) {
          return Error(path + "/required",
                       absl::StrCat("required property '", name.get<std::string>(),
                                    "' is not listed in 'properties'"));
        }
        required.insert(name.get<std::string>());
      }
    }
    // Additional properties: absent/true = any value, false = none, a schema = its values.
    std::optional<Sequence> extra;
    const json additional = schema.contains("additionalProperties")
                                ? schema["additionalProperties"]
                                : json(!(options_.closed_objects && schema.contains("properties")));
    if (!(additional.is_boolean() && !additional.get<bool>())) {
      Symbol value = -1;
      if (additional.is_boolean()) {
        value = AnyValue();
      } else {
        ASSIGN_OR_RETURN(Sequence compiled,
                         Compile(additional, path + "/additionalProperties", depth + 1));
        value = builder_.Group(std::move(compiled));
      }
      std::vector<std::string> names;
      for (const auto& [name, unused] : properties.items()) names.push_back(name);
      extra = Sequence{ExtraKey(names), Ws(), builder_.Byte(':'), Ws(), value, Ws()};
    }

    // Members in the order the schema lists them.
    std::vector<std::pair<Sequence, bool>> members;  // (key ws : ws value ws, required)
    for (const auto& [name, unused] : properties.items()) {
      ASSIGN_OR_RETURN(
          Sequence value,
          Compile(properties[name], absl::StrCat(path, "/properties/", Escape(name)), depth + 1));
      Sequence member = builder_.Literal(json(name).dump());
      member.insert(member.end(),
                    {Ws(), builder_.Byte(':'), Ws(), builder_.Group(std::move(value)), Ws()});
      members.emplace_back(std::move(member), required.contains(name));
    }
    // after[i]: members i.. when something precedes them; first[i]: when nothing does.
    const Sequence comma{builder_.Byte(','), Ws()};
    Sequence tail_after, tail_first;
    if (extra) {
      Sequence more = comma;
      more.insert(more.end(), extra->begin(), extra->end());
      tail_after = {builder_.Star(more)};
      Sequence first = *extra;
      first.push_back(builder_.Star(more));
      tail_first = {builder_.Optional(first)};
    }
    Symbol after = builder_.Group(tail_after);
    Symbol first = builder_.Group(tail_first);
    for (size_t i = members.size(); i-- > 0;) {
      const auto& [member, is_required] = members[i];
      Sequence with_comma = comma;
      with_comma.insert(with_comma.end(), member.begin(), member.end());
      with_comma.push_back(after);
      Sequence alone = member;
      alone.push_back(after);
      if (is_required) {
        first = builder_.Group(std::move(alone));
        after = builder_.Group(std::move(with_comma));
      } else {
        first = builder_.Choice({std::move(alone), {first}});
        after = builder_.Choice({std::move(with_comma), {after}});
      }
    }
    return Sequence{builder_.Byte('{'), Ws(), first, builder_.Byte('}')};
  }

 private:
  const json& document_;
  GrammarBuilder& builder_;
  const std::string prefix_;
  const JsonSchemaOptions options_;
  absl::flat_hash_map<std::string, int32_t> ref_rules_;
  Symbol ws_ = -1, raw_char_ = -1, string_char_ = -1, string_ = -1, natural_ = -1, integer_ = -1,
         fraction_ = -1, exponent_ = -1, number_ = -1;
  int32_t value_ = -1, object_ = -1, array_ = -1;
};

}  // namespace

absl::StatusOr<Sequence> CompileJsonSchemaInto(GrammarBuilder& builder,
                                               std::string_view schema_json,
                                               std::string_view rule_prefix,
                                               const JsonSchemaOptions& options) {
  ASSIGN_OR_RETURN(const json document, ParseSchema(schema_json));
  return JsonSchemaCompiler(document, builder, rule_prefix, options).CompileDocument();
}

absl::StatusOr<GrammarPtr> CompileJsonSchema(std::string_view schema_json,
                                             const GrammarLimits& limits) {
  GrammarBuilder builder(limits);
  ASSIGN_OR_RETURN(Sequence value, CompileJsonSchemaInto(builder, schema_json, "", {}));
  const int32_t root = builder.NewRule("root");
  builder.AddAlternative(root, std::move(value));
  return builder.Build(root);
}

absl::StatusOr<GrammarPtr> CompileAnyJsonObject(const GrammarLimits& limits) {
  const json empty = json::object();
  GrammarBuilder builder(limits);
  const Symbol object = JsonSchemaCompiler(empty, builder, "", {}).CompileAnyObject();
  const int32_t root = builder.NewRule("root");
  builder.AddAlternative(root, {object});
  return builder.Build(root);
}

}  // namespace tandem::engine::grammar
