#include "router/api/tool_grammar.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/api/pattern_ebnf.h"

namespace tandem::router::api_internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 32;

// Rules every grammar shares: JSON strings, numbers and any value.
constexpr char kCommonRules[] = R"(ws ::= " "?
str ::= "\"" chr* "\""
chr ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
int ::= "-"? ( "0" | [1-9] [0-9]{0,17} )
num ::= int ( "." [0-9]{1,16} )? ( [eE] [+-]? [0-9]{1,2} )?
any ::= str | num | "true" | "false" | "null" | anyarr | anyobj
anyarr ::= "[" ws ( any ( "," ws any )* )? "]"
anyobj ::= "{" ws ( str ":" ws any ( "," ws str ":" ws any )* )? "}"
)";

// A reasoning block before the calls: its text never contains "</think>" (every '<' run is
// followed by a byte that breaks the tag), so the reasoning parser ends it where the grammar does.
constexpr char kThinkRules[] = R"(think ::= "<think>" thinktext "</think>" "\n"{0,2}
thinktext ::= ( [^<] | "<"+ thinkbreak )*
thinkbreak ::= [^/<] | "/" ( [^t<] | "t" ( [^h<] | "h" ( [^i<] | "i" ( [^n<] | "n" ( [^k<] | "k" [^<>] ) ) ) ) )
)";

// `text` as an EBNF string literal: bytes outside printable ASCII, '"' and '\' as \xHH;
// UTF-8 above ASCII as is.
std::string Literal(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80 || (byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\')) {
      out += c;
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    }
  }
  out += '"';
  return out;
}

constexpr int64_t kMaxBound = 1000;                  // minLength/maxLength
constexpr int64_t kMaxInteger = 999999999999999999;  // 18 digits, as the int rule

// The decimal strings from `lo` to `hi` (same length, lo <= hi) as EBNF: digit by digit, with
// one alternative for the shared prefix's low edge, one for the full middle and one for the
// high edge, so the size is quadratic in the digits.
std::string SameLengthRange(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "\"\"";
  if (lo == hi) return Literal(lo);
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos) {
    return absl::StrCat("[0-9]{", lo.size(), "}");
  }
  const std::string rest_lo = lo.substr(1);
  const std::string rest_hi = hi.substr(1);
  if (lo[0] == hi[0]) {
    return absl::StrCat(Literal(lo.substr(0, 1)), " ", SameLengthRange(rest_lo, rest_hi));
  }
  std::vector<std::string> alternatives;
  alternatives.push_back(absl::StrCat(Literal(lo.substr(0, 1)), " ",
                                      SameLengthRange(rest_lo, std::string(rest_lo.size(), '9'))));
  if (hi[0] - lo[0] > 1) {
    alternatives.push_back(
        absl::StrCat("[", std::string(1, static_cast<char>(lo[0] + 1)), "-",
                     std::string(1, static_cast<char>(hi[0] - 1)), "]",
                     rest_lo.empty() ? "" : absl::StrCat(" [0-9]{", rest_lo.size(), "}")));
  }
  alternatives.push_back(absl::StrCat(Literal(hi.substr(0, 1)), " ",
                                      SameLengthRange(std::string(rest_hi.size(), '0'), rest_hi)));
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

// The canonical decimal integers from `lo` to `hi` (0 <= lo <= hi): one SameLengthRange per
// number of digits.
std::vector<std::string> NonNegativeRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  int64_t first = 0;  // smallest number with `digits` digits
  int64_t last = 9;   // largest
  for (int digits = 1; digits <= 18; ++digits) {
    const int64_t from = std::max(lo, first);
    const int64_t to = std::min(hi, last);
    if (from <= to) {
      alternatives.push_back(SameLengthRange(absl::StrCat(from), absl::StrCat(to)));
    }
    first = last + 1;
    if (digits < 18) last = last * 10 + 9;
  }
  return alternatives;
}

// The JSON integers from `lo` to `hi` (|lo|, |hi| <= kMaxInteger, lo <= hi).
std::string IntegerRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  if (lo < 0) {  // -1 .. lo, written as "-" then 1 .. -lo
    for (const std::string& a : NonNegativeRange(std::max<int64_t>(1, -hi), -lo)) {
      alternatives.push_back(absl::StrCat("\"-\" ", a));
    }
  }
  if (hi >= 0) {
    for (std::string& a : NonNegativeRange(std::max<int64_t>(0, lo), hi)) {
      alternatives.push_back(std::move(a));
    }
  }
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

// Builds the rules of one function's arguments; each schema node becomes a rule.
class SchemaRules {
 public:
  // `root` (the parameters schema) is what `$ref`s point into; it must outlive this object.
  SchemaRules(std::string prefix, std::string path, const OrderedJson* root, std::string* rules)
      : prefix_(std::move(prefix)), path_(std::move(path)), root_(root), rules_(rules) {}

  // The rule name for `schema` (a new rule), or an error naming the keyword.
  absl::StatusOr<std::string> Rule(const OrderedJson& schema, int depth) {
    if (depth > kMaxSchemaDepth) {
      return absl::InvalidArgumentError(path_ + " nests deeper than 32 levels");
    }
    ASSIGN_OR_RETURN(const std::string body, Body(schema, depth));
    const std::string name = absl::StrCat(prefix_, "-", next_++);
    absl::StrAppend(rules_, name, " ::= ", body, "\n");
    return name;
  }

 private:
  absl::StatusOr<std::string> Body(const OrderedJson& schema, int depth) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::string("any");
      return absl::InvalidArgumentError(path_ + ": the schema false allows no value");
    }
    if (!schema.is_object()) {
      return absl::InvalidArgumentError(path_ + ": a schema must be an object");
    }
    for (const auto& [key, value] : schema.items()) {
      static const std::vector<std::string> kKnown = {"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "items",
                                                      "minItems",
                                                      "maxItems",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "oneOf",
                                                      "description",
                                                      "title",
                                                      "default",
                                                      "examples",
                                                      "$schema",
                                                      "$comment",
                                                      "format",
                                                      "strict",
                                                      "nullable",
                                                      "$ref",
                                                      "$defs",
                                                      "definitions",
                                                      "minLength",
                                                      "maxLength",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "pattern"};
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": keyword '", Excerpt(key), "' cannot be enforced for a required tool call"));
      }
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) return Ref(*it, depth);
    if (const auto it = schema.find("const"); it != schema.end()) return Literal(it->dump());
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) {
        return absl::InvalidArgumentError(path_ + ": enum must be a non-empty array");
      }
      std::vector<std::string> alternatives;
      for (const OrderedJson& value : *it) alternatives.push_back(Literal(value.dump()));
      return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_array() || it->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": ", key, " must be a non-empty array"));
      }
      std::vector<std::string> alternatives;
      for (const OrderedJson& branch : *it) {
        ASSIGN_OR_RETURN(std::string rule, Rule(branch, depth + 1));
        alternatives.push_back(std::move(rule));
      }
      return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
    }
    const auto type = schema.find("type");
    if (type == schema.end()) {  // the type the keywords imply, as JSON Schema validates them
      if (schema.contains("minLength") || schema.contains("maxLength") ||
          schema.contains("pattern")) {
        return StringBody(schema);
      }
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (schema.contains(key)) return NumberBody(schema);
      }
      return std::string("any");
    }
    std::vector<std::string> types;
    if (type->is_string()) {
      types.push_back(type->get<std::string>());
    } else if (type->is_array()) {
      for (const OrderedJson& t : *type) {
        if (!t.is_string()) return absl::InvalidArgumentError(path_ + ": type must name types");
        types.push_back(t.get<std::string>());
      }
    } else {
      return absl::InvalidArgumentError(path_ + ": type must be a string or a list");
    }
    std::vector<std::string> alternatives;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string body, TypeBody(t, schema, depth));
      alternatives.push_back(std::move(body));
    }
    if (alternatives.empty()) return absl::InvalidArgumentError(path_ + ": type lists no type");
    return alternatives.size() == 1 ? alternatives[0]
                                    : absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
  }

  absl::StatusOr<std::string> TypeBody(const std::string& type, const OrderedJson& schema,
                                       int depth) {
    if (type == "string") return StringBody(schema);
    if (type == "integer") return IntegerBody(schema);
    if (type == "number") return NumberBody(schema);
    if (type == "boolean") return std::string("( \"true\" | \"false\" )");
    if (type == "null") return std::string("\"null\"");
    if (type == "array") {
      std::string item = "any";
      if (const auto it = schema.find("items"); it != schema.end()) {
        ASSIGN_OR_RETURN(item, Rule(*it, depth + 1));
      }
      int64_t min_items = 0;
      int64_t max_items = -1;
      if (const auto it = schema.find("minItems"); it != schema.end() && it->is_number_integer()) {
        min_items = it->get<int64_t>();
      }
      if (const auto it = schema.find("maxItems"); it != schema.end() && it->is_number_integer()) {
        max_items = it->get<int64_t>();
      }
      if (min_items < 0 || min_items > 64 || max_items > 64 ||
          (max_items >= 0 && max_items < min_items)) {
        return absl::InvalidArgumentError(path_ + ": minItems/maxItems must be within 0..64");
      }
      const std::string more = absl::StrCat("\",\" ws ", item);
      const std::string upper = max_items < 0 ? "" : absl::StrCat(max_items - 1);
      if (max_items == 0) return std::string("\"[\" ws \"]\"");
      if (min_items == 0) {
        return absl::StrCat("\"[\" ws ( ", item, " ( ", more, " ){0,", upper, "} )? \"]\"");
      }
      return absl::StrCat("\"[\" ws ", item, " ( ", more, " ){", min_items - 1, ",", upper,
                          "} \"]\"");
    }
    if (type == "object") {
      const auto properties = schema.find("properties");
      if (properties == schema.end() || !properties->is_object() || properties->empty()) {
        const auto extra = schema.find("additionalProperties");
        const bool closed = extra != schema.end() && extra->is_boolean() && !extra->get<bool>();
        return std::string(closed || properties != schema.end() ? "\"{\" ws \"}\"" : "anyobj");
      }
      std::string body = "\"{\" ws";
      bool first = true;
      for (const auto& [key, value] : properties->items()) {
        ASSIGN_OR_RETURN(const std::string rule, Rule(value, depth + 1));
        absl::StrAppend(&body, first ? " " : " \",\" ws ", Literal(OrderedJson(key).dump()),
                        " \":\" ws ", rule);
        first = false;
      }
      return body + " \"}\"";
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": type '", Excerpt(type), "' is not a JSON Schema type"));
  }

  // A rule per `$ref` target (a JSON pointer into the parameters schema: "#", "#/$defs/x",
  // "#/definitions/x", ...), named before its body is built so that recursive schemas refer to
  // themselves.
  absl::StatusOr<std::string> Ref(const OrderedJson& ref, int depth) {
    if (!ref.is_string()) return absl::InvalidArgumentError(path_ + ": $ref must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#') {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": $ref '", Excerpt(target),
                                                     "' must point into the same schema (#/...)"));
    }
    const OrderedJson* resolved = nullptr;
    try {  // json_pointer throws on a malformed pointer
      const OrderedJson::json_pointer pointer(target.substr(1));
      if (root_->contains(pointer)) resolved = &root_->at(pointer);
    } catch (const nlohmann::json::exception&) {
    }
    if (resolved == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": $ref '", Excerpt(target), "' points to nothing"));
    }
    const std::string name = absl::StrCat(prefix_, "-", next_++);
    refs_.emplace(target, name);
    ASSIGN_OR_RETURN(const std::string body, Body(*resolved, depth + 1));
    absl::StrAppend(rules_, name, " ::= ", body, "\n");
    return name;
  }

  // A non-negative integer keyword (absent: `absent`), at most kMaxBound.
  absl::StatusOr<int64_t> Count(const OrderedJson& schema, const char* key, int64_t absent) {
    const auto it = schema.find(key);
    if (it == schema.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxBound) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": ", key, " must be an integer within 0..", kMaxBound));
    }
    return it->get<int64_t>();
  }

  // Strings: minLength/maxLength count characters (a JSON escape is one character, as JSON
  // Schema counts code points); `pattern` (router/api/pattern_ebnf.h), not beside them.
  absl::StatusOr<std::string> StringBody(const OrderedJson& schema) {
    if (const auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) return absl::InvalidArgumentError(path_ + ": pattern must be a string");
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        return absl::InvalidArgumentError(
            path_ + ": pattern beside minLength/maxLength cannot be enforced together");
      }
      ASSIGN_OR_RETURN(const std::string content, PatternEbnf(it->get<std::string>()),
                       absl::StrCat(path_, ": "));
      return absl::StrCat("\"\\\"\" ", content, " \"\\\"\"");
    }
    ASSIGN_OR_RETURN(const int64_t min, Count(schema, "minLength", 0));
    ASSIGN_OR_RETURN(const int64_t max, Count(schema, "maxLength", -1));
    if (max >= 0 && max < min) {
      return absl::InvalidArgumentError(path_ + ": maxLength is below minLength");
    }
    if (min == 0 && max < 0) return std::string("str");
    return absl::StrCat("\"\\\"\" chr{", min, ",", max < 0 ? "" : absl::StrCat(max), "} \"\\\"\"");
  }

  // The integer bounds of minimum/maximum/exclusiveMinimum/exclusiveMaximum, clamped to the
  // 18-digit integers the grammar writes.
  absl::StatusOr<std::pair<int64_t, int64_t>> IntegerBounds(const OrderedJson& schema) {
    int64_t lo = -kMaxInteger;
    int64_t hi = kMaxInteger;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, " must be a number"));
      }
      const double v = std::clamp(it->get<double>(), -1e18, 1e18);
      const std::string_view k = key;
      if (k == "minimum") lo = std::max(lo, static_cast<int64_t>(std::ceil(v)));
      if (k == "exclusiveMinimum") lo = std::max(lo, static_cast<int64_t>(std::floor(v)) + 1);
      if (k == "maximum") hi = std::min(hi, static_cast<int64_t>(std::floor(v)));
      if (k == "exclusiveMaximum") hi = std::min(hi, static_cast<int64_t>(std::ceil(v)) - 1);
    }
    lo = std::max(lo, -kMaxInteger);
    hi = std::min(hi, kMaxInteger);
    if (lo > hi) {
      return absl::InvalidArgumentError(path_ + ": the bounds leave no integer");
    }
    return std::make_pair(lo, hi);
  }

  // Integers: the bounds exactly (a digit-by-digit grammar of the range).
  absl::StatusOr<std::string> IntegerBody(const OrderedJson& schema) {
    ASSIGN_OR_RETURN(const auto bounds, IntegerBounds(schema));
    if (bounds.first == -kMaxInteger && bounds.second == kMaxInteger) return std::string("int");
    return IntegerRange(bounds.first, bounds.second);
  }

  // Numbers: bounds only through the sign (minimum >= 0: no minus sign; maximum < 0 or
  // exclusiveMaximum <= 0: a minus sign), the rest of the range is not enforced.
  absl::StatusOr<std::string> NumberBody(const OrderedJson& schema) {
    bool nonnegative = false;
    bool negative = false;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, " must be a number"));
      }
      const double v = it->get<double>();
      const std::string_view k = key;
      if ((k == "minimum" || k == "exclusiveMinimum") && v >= 0) nonnegative = true;
      if ((k == "maximum" && v < 0) || (k == "exclusiveMaximum" && v <= 0)) negative = true;
    }
    if (nonnegative && negative) {
      return absl::InvalidArgumentError(path_ + ": the bounds leave no number");
    }
    const std::string frac = "( \".\" [0-9]{1,16} )? ( [eE] [+-]? [0-9]{1,2} )?";
    if (nonnegative) return absl::StrCat("( \"0\" | [1-9] [0-9]{0,17} ) ", frac);
    // A negative number: a non-zero digit before or after the point.
    if (negative) {
      return absl::StrCat("\"-\" ( [1-9] [0-9]{0,17} ( \".\" [0-9]{1,16} )? | \"0.\" [0-9]{0,15} ",
                          "[1-9] [0-9]{0,15} ) ( [eE] [+-]? [0-9]{1,2} )?");
    }
    return std::string("num");
  }

  const std::string prefix_;
  const std::string path_;
  const OrderedJson* root_;
  std::string* rules_;
  int next_ = 0;
  absl::flat_hash_map<std::string, std::string> refs_;  // $ref target -> its rule
};

}  // namespace

absl::StatusOr<std::string> ToolCallGrammar(ToolCallSyntax syntax, const ChatTools& tools,
                                            bool parallel_tool_calls, bool allow_thinking) {
  std::string rules;
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const OrderedJson& function = tools.tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    std::string args = "anyobj";
    if (const auto it = function.find("parameters"); it != function.end() && !it->empty()) {
      SchemaRules schema(absl::StrCat("args", i),
                         absl::StrCat("tools[", i, "].function.parameters"), &*it, &rules);
      ASSIGN_OR_RETURN(args, schema.Rule(*it, 0));
    }
    const std::string head =
        syntax == ToolCallSyntax::kLlama3
            ? absl::StrCat("{\"name\": \"", name, "\", \"parameters\": ")
            : absl::StrCat("<tool_call>\n{\"name\": \"", name, "\", \"arguments\": ");
    const std::string tail = syntax == ToolCallSyntax::kLlama3 ? "}" : "}\n</tool_call>";
    calls.push_back(absl::StrCat(Literal(head), " ", args, " ", Literal(tail)));
  }
  std::string root = absl::StrCat("call ::= ", absl::StrJoin(calls, " | "), "\n");
  const bool several = syntax == ToolCallSyntax::kQwen && parallel_tool_calls &&
                       tools.choice == ToolChoice::kRequired;
  const std::string calls_rule = several ? "call ( \"\\n\" call )*" : "call";
  if (allow_thinking && syntax == ToolCallSyntax::kQwen) {
    absl::StrAppend(&root, "root ::= think? ", calls_rule, "\n", kThinkRules);
  } else {
    absl::StrAppend(&root, "root ::= ", calls_rule, "\n");
  }
  return root + kCommonRules + rules;
}

}  // namespace tandem::router::api_internal
