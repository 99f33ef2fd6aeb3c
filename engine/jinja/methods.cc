#include "engine/jinja/methods.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/interpreter.h"
#include "engine/jinja/text.h"

namespace tandem::jinja {
namespace {

constexpr std::string_view kStringMethods[] = {
    "strip",   "lstrip",     "rstrip", "split",   "startswith", "endswith",
    "replace", "upper",      "lower",  "title",   "capitalize", "find",
    "count",   "splitlines", "join",   "isdigit", "isspace"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};

absl::StatusOr<const std::string*> OptionalString(const CallArgs& args, size_t i,
                                                  std::string_view name) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->IsNone()) return nullptr;
  if (!v->IsString()) {
    return absl::InvalidArgumentError(
        absl::StrCat("argument '", std::string(name), "' must be a string, not ", v->TypeName()));
  }
  return &v->AsString();
}

absl::StatusOr<Value> StringMethod(Interpreter& interp, const std::string& s,
                                   const std::string& name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(const std::string* chars, OptionalString(args, 0, "chars"));
    return Value(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    ASSIGN_OR_RETURN(const std::string* sep, OptionalString(args, 0, "sep"));
    if (sep != nullptr && sep->empty()) return absl::InvalidArgumentError("empty separator");
    const Value* max = args.Get(1, "maxsplit");
    const int64_t maxsplit =
        max != nullptr && (max->IsInt() || max->IsBool()) ? max->AsInteger() : -1;
    List parts;
    for (std::string& part : PySplit(s, sep, maxsplit)) parts.emplace_back(std::move(part));
    return Value(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* prefix = args.Get(0, "prefix");
    if (prefix == nullptr) return absl::InvalidArgumentError(name + "() takes an argument");
    List options = prefix->IsList() ? prefix->AsList() : List{*prefix};
    for (const Value& option : options) {
      if (!option.IsString()) {
        return absl::InvalidArgumentError(name + "() takes a string or a tuple of strings");
      }
      const std::string& p = option.AsString();
      if (name == "startswith" ? s.starts_with(p) : s.ends_with(p)) return Value(true);
    }
    return Value(false);
  }
  if (name == "replace") {
    const Value* from = args.Get(0, "old");
    const Value* to = args.Get(1, "new");
    const Value* count = args.Get(2, "count");
    if (from == nullptr || to == nullptr || !from->IsString() || !to->IsString()) {
      return absl::InvalidArgumentError("replace() takes two strings");
    }
    std::string out = PyReplace(s, from->AsString(), to->AsString(),
                                count != nullptr && count->IsInt() ? count->AsInt() : -1);
    RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value(std::move(out));
  }
  if (name == "upper") return Value(PyUpper(s));
  if (name == "lower") return Value(PyLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") return Value(PyCapitalize(s));
  if (name == "find" || name == "count") {
    ASSIGN_OR_RETURN(const std::string* needle, OptionalString(args, 0, "sub"));
    if (needle == nullptr) return absl::InvalidArgumentError(name + "() takes a string");
    if (name == "find") {
      const size_t at = s.find(*needle);
      if (at == std::string::npos) return Value(-1);
      return Value(static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, at))));
    }
    if (needle->empty()) return Value(static_cast<int64_t>(CodePointCount(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(*needle); at != std::string::npos;
         at = s.find(*needle, at + needle->size()))
      ++n;
    return Value(n);
  }
  if (name == "splitlines") {
    List lines;
    for (std::string& line : PySplitLines(s)) lines.emplace_back(std::move(line));
    return Value(std::move(lines));
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr || !items->IsList())
      return absl::InvalidArgumentError("join() takes a list");
    std::string out;
    for (size_t i = 0; i < items->AsList().size(); ++i) {
      const Value& item = items->AsList()[i];
      if (!item.IsString()) return absl::InvalidArgumentError("join() takes a list of strings");
      if (i > 0) out += s;
      out += item.AsString();
      RETURN_IF_ERROR(interp.CheckSize(out.size()));
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isspace") {
    const std::vector<size_t> offsets = CodePointOffsets(s);
    if (offsets.size() < 2) return Value(false);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      const char32_t c = DecodeAt(s, offsets[i]);
      if (name == "isdigit" ? !(c >= '0' && c <= '9') : !IsPythonSpace(c)) return Value(false);
    }
    return Value(true);
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported method str.", std::string(name)));
}

absl::StatusOr<Value> DictMethod(const Value& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr) return absl::InvalidArgumentError("get() takes a key");
    if (key->IsString()) {
      if (const Value* v = d.Find(key->AsString())) return *v;
    }
    const Value* fallback = args.Get(1, "default");
    return fallback != nullptr ? *fallback : Value::None();
  }
  List out;
  for (const auto& [key, value] : d.AsDict()) {
    if (name == "items") {
      out.push_back(Value::MakeTuple(List{Value(key), value}));
    } else if (name == "keys") {
      out.emplace_back(key);
    } else {
      out.push_back(value);
    }
  }
  return Value(std::move(out));
}

}  // namespace

bool IsMethod(const Value& object, const std::string& name) {
  if (object.IsString()) {
    for (std::string_view m : kStringMethods) {
      if (m == name) return true;
    }
  } else if (object.IsDict()) {
    for (std::string_view m : kDictMethods) {
      if (m == name) return true;
    }
  }
  return false;
}

Value BindMethod(const Value& object, const std::string& name) {
  return Value::MakeFunction(
      absl::StrCat(object.TypeName(), ".", std::string(name)),
      [object, name](Interpreter& interp, const CallArgs& args) -> absl::StatusOr<Value> {
        if (object.IsString()) return StringMethod(interp, object.AsString(), name, args);
        return DictMethod(object, name, args);
      });
}

}  // namespace tandem::jinja
