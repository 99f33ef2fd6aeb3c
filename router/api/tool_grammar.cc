#include "router/api/tool_grammar.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

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

// Builds the rules of one function's arguments; each schema node becomes a rule.
class SchemaRules {
 public:
  SchemaRules(std::string prefix, std::string path, std::string* rules)
      : prefix_(std::move(prefix)), path_(std::move(path)), rules_(rules) {}

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
      static const std::vector<std::string> kKnown = {
          "type",     "properties", "required", "additionalProperties",
          "items",    "minItems",   "maxItems", "enum",
          "const",    "anyOf",      "oneOf",    "description",
          "title",    "default",    "examples", "$schema",
          "$comment", "format",     "strict",   "nullable"};
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": keyword '", Excerpt(key), "' cannot be enforced for a required tool call"));
      }
    }
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
    if (type == schema.end()) return std::string("any");
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
    if (type == "string") return std::string("str");
    if (type == "integer") return std::string("int");
    if (type == "number") return std::string("num");
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

  const std::string prefix_;
  const std::string path_;
  std::string* rules_;
  int next_ = 0;
};

}  // namespace

absl::StatusOr<std::string> ToolCallGrammar(ToolCallSyntax syntax, const ChatTools& tools,
                                            bool parallel_tool_calls) {
  std::string rules;
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const OrderedJson& function = tools.tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    std::string args = "anyobj";
    if (const auto it = function.find("parameters"); it != function.end() && !it->empty()) {
      SchemaRules schema(absl::StrCat("args", i),
                         absl::StrCat("tools[", i, "].function.parameters"), &rules);
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
  absl::StrAppend(&root, several ? "root ::= call ( \"\\n\" call )*\n" : "root ::= call\n");
  return root + kCommonRules + rules;
}

}  // namespace tandem::router::api_internal
