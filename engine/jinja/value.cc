#include "engine/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/text.h"

namespace tandem::jinja {
namespace {

std::string PythonStringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

absl::Status DumpJsonTo(const Value& v, const JsonDumpOptions& o, int level, std::string* out) {
  if (level > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const auto newline = [&](int depth) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * depth, ' ');
  };
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator
                               : o.indent >= 0           ? ","
                                                         : ", ";
  const std::string key_sep = o.key_separator.empty() ? ": " : o.key_separator;
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.AsBool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.AsInt());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.AsDouble();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(d);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.AsString(), out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const List& list = v.AsList();
      if (list.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        RETURN_IF_ERROR(DumpJsonTo(list[i], o, level + 1, out));
      }
      newline(level);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.AsDict()) items.push_back(&item);
      if (items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        AppendJsonString(items[i]->first, out);
        *out += key_sep;
        RETURN_IF_ERROR(DumpJsonTo(items[i]->second, o, level + 1, out));
      }
      newline(level);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

template <typename JsonT>
Value ValueFromJson(const JsonT& json) {
  switch (json.type()) {
    case JsonT::value_t::null:
      return Value::None();
    case JsonT::value_t::boolean:
      return Value(json.template get<bool>());
    case JsonT::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case JsonT::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case JsonT::value_t::number_float:
      return Value(json.template get<double>());
    case JsonT::value_t::string:
      return Value(json.template get<std::string>());
    case JsonT::value_t::array: {
      List list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(ValueFromJson(item));
      return Value(std::move(list));
    }
    case JsonT::value_t::object: {
      Dict dict;
      dict.reserve(json.size());
      for (const auto& [key, item] : json.items()) dict.emplace_back(key, ValueFromJson(item));
      return Value(std::move(dict));
    }
    default:
      return Value::None();
  }
}

}  // namespace

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::MakeNamespace(Dict attributes) {
  return Value(Data(std::make_shared<Dict>(std::move(attributes))));
}

Value Value::MakeFunction(std::string name, Function fn) {
  return Value(
      Data(std::make_shared<const FunctionHolder>(FunctionHolder{std::move(name), std::move(fn)})));
}

Value Value::FromJson(const nlohmann::ordered_json& json) { return ValueFromJson(json); }
Value Value::FromJson(const nlohmann::json& json) { return ValueFromJson(json); }

double Value::AsDouble() const {
  if (IsFloat()) return std::get<double>(data_);
  return static_cast<double>(AsInteger());
}

const std::string& Value::function_name() const {
  return std::get<std::shared_ptr<const FunctionHolder>>(data_)->name;
}

const Function& Value::function() const {
  return std::get<std::shared_ptr<const FunctionHolder>>(data_)->fn;
}

const Value* Value::Find(std::string_view key) const {
  const Dict* dict = IsDict() ? &AsDict() : IsNamespace() ? &NamespaceAttributes() : nullptr;
  if (dict == nullptr) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return AsBool();
    case Kind::kInt:
      return AsInt() != 0;
    case Kind::kFloat:
      return AsDouble() != 0.0;
    case Kind::kString:
      return !AsString().empty();
    case Kind::kList:
      return !AsList().empty();
    case Kind::kDict:
      return !AsDict().empty();
    default:
      return true;
  }
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return AsString();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return AsBool() ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(AsInt());
    case Kind::kFloat:
      return FloatRepr(AsDouble());
    case Kind::kString:
      return PythonStringRepr(AsString());
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      const List& list = AsList();
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += ", ";
        out += list[i].Repr();
      }
      if (tuple_ && list.size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = "{";
      const Dict& dict = IsDict() ? AsDict() : NamespaceAttributes();
      for (size_t i = 0; i < dict.size(); ++i) {
        if (i > 0) out += ", ";
        absl::StrAppend(&out, PythonStringRepr(dict[i].first), ": ", dict[i].second.Repr());
      }
      out += "}";
      return IsDict() ? out : absl::StrCat("<Namespace ", out, ">");
    }
    case Kind::kFunction:
      return absl::StrCat("<function ", function_name(), ">");
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (IsNumber() && other.IsNumber()) {
    if (IsFloat() || other.IsFloat()) return AsDouble() == other.AsDouble();
    return AsInteger() == other.AsInteger();
  }
  if (kind() != other.kind() || tuple_ != other.tuple_) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return AsString() == other.AsString();
    case Kind::kList: {
      const List& a = AsList();
      const List& b = other.AsList();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& a = AsDict();
      if (a.size() != other.AsDict().size()) return false;
      for (const auto& [key, value] : a) {
        const Value* theirs = other.Find(key);
        if (theirs == nullptr || !value.Equals(*theirs)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &NamespaceAttributes() == &other.NamespaceAttributes();
    case Kind::kFunction:
      return &function() == &other.function();
    default:
      return false;
  }
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for exponents in [-4, 16).
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    const auto point = static_cast<size_t>(exponent + 1);  // digits before the point
    if (exponent < 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out.append(digits);
    } else if (point >= digits.size()) {
      out.append(digits);
      out.append(point - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, point);
      out.push_back('.');
      out.append(digits, point, std::string::npos);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(DumpJsonTo(value, options, 0, &out));
  return out;
}

}  // namespace tandem::jinja
