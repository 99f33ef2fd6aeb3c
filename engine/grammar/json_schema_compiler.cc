#include "engine/grammar/json_schema_compiler.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/ordered_json.h"
#include "common/status.h"
#include "engine/grammar/json_schema_numbers.h"
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
    return ParseOrderedJson(schema_json);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: not valid JSON: ", JsonErrorText(e.what())));
  }
}

class JsonSchemaCompiler {
 public:
  // `document` and `builder` must outlive the compiler.
  JsonSchemaCompiler(const json& document, GrammarBuilder& builder, std::string_view rule_prefix,
                     const JsonSchemaOptions& options)
      : document_(document),
        builder_(builder),
        prefix_(rule_prefix),
        options_(options),
        numbers_(builder) {}

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
    return JsonSchemaError(path, what);
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
  Symbol AnyValue() {
    if (value_ < 0) {
      value_ = NewRule("value");
      for (Sequence alternative : std::vector<Sequence>{{AnyObject()},
                                                        {AnyArray()},
                                                        {AnyString()},
                                                        {numbers_.AnyNumber()},
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
        ASSIGN_OR_RETURN(Sequence number, numbers_.Number(schema, path));
        alternatives.push_back(std::move(number));
      } else if (type == "integer") {
        ASSIGN_OR_RETURN(Sequence integer, numbers_.Integer(schema, path, options_.int64_integers));
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
    for (size_t i = 0; i < trie.size() && !builder_.failed(); ++i) {
      if (!trie[i].terminal) builder_.AddAlternative(rules[i], {});
      CodepointRanges taken;  // ascending: the map's order
      for (const auto& [cp, child] : trie[i].children) {
        Sequence step = {CodepointClass(builder_, {{cp, cp}}), rules[child]};
        builder_.AddAlternative(rules[i], std::move(step));
        taken.emplace_back(cp, cp);
      }
      // One subtraction of every child (one per child was quadratic in a node's fan-out).
      builder_.AddAlternative(
          rules[i],
          {CodepointClass(builder_, SubtractRanges(raw, NormalizeRanges(std::move(taken), false))),
           free});
    }
    return builder_.Group({builder_.Byte('"'), rules[0], builder_.Byte('"')});
  }

  absl::StatusOr<Sequence> CompileObject(const json& schema, const std::string& path, int depth) {
    static const json kEmpty = json::object();
    const json& properties = schema.contains("properties") ? schema["properties"] : kEmpty;
    if (!properties.is_object()) return Error(path + "/properties", "must be an object");
    // Names and values are read in one pass: an ordered_json's lookups are linear, so looking
    // each property up by name made a schema of many properties quadratic to compile.
    absl::flat_hash_set<std::string> listed;
    for (const auto& item : properties.items()) listed.insert(item.key());
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const json& list = schema["required"];
      if (!list.is_array()) return Error(path + "/required", "must be an array");
      for (const json& name : list) {
        if (!name.is_string()) return Error(path + "/required", "entries must be strings");
        if (!listed.contains(name.get<std::string>())) {
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
    for (const auto& item : properties.items()) {
      if (builder_.failed()) return Sequence{};  // over a limit: Build() reports it
      const std::string& name = item.key();
      ASSIGN_OR_RETURN(
          Sequence value,
          Compile(item.value(), absl::StrCat(path, "/properties/", Escape(name)), depth + 1));
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
  JsonNumberGrammar numbers_;
  Symbol ws_ = -1, raw_char_ = -1, string_char_ = -1, string_ = -1;
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
  ASSIGN_OR_RETURN(Sequence value,
                   CompileJsonSchemaInto(builder, schema_json, "", {.int64_integers = true}));
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
