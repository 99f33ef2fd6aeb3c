// Jinja2's built-in filters (those chat templates use) and Hugging Face's `tojson`.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/builtins.h"
#include "engine/jinja/interpreter.h"
#include "engine/jinja/text.h"

namespace tandem::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",     "capitalize", "count",  "d",      "default",    "dictsort", "first",
    "float",   "indent",     "int",    "items",  "join",       "last",     "length",
    "list",    "lower",      "map",    "max",    "min",        "reject",   "rejectattr",
    "replace", "reverse",    "safe",   "select", "selectattr", "sort",     "string",
    "sum",     "title",      "tojson", "trim",   "unique",     "upper",    "wordcount"};

bool BoolArg(const CallArgs& args, size_t i, std::string_view name, bool dflt) {
  const Value* v = args.Get(i, name);
  return v == nullptr ? dflt : v->Truthy();
}

// Jinja2's make_attrgetter: "a.b.0" walks items/attributes.
absl::StatusOr<Value> AttributePath(const Value& item, const Value& path) {
  if (path.IsInt()) return GetItem(item, path);
  Value current = item;
  const std::string sep = ".";
  for (const std::string& part : PySplit(path.Str(), &sep, -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    ASSIGN_OR_RETURN(current, GetItem(current, digits ? Value(static_cast<int64_t>(std::strtoll(
                                                            part.c_str(), nullptr, 10)))
                                                      : Value(part)));
  }
  return current;
}

// Sort key for sort/unique/min/max: strings compare case-insensitively unless asked.
Value SortKey(const Value& v, bool case_sensitive) {
  if (v.IsString() && !case_sensitive) return Value(PyLower(v.AsString()));
  return v;
}

absl::StatusOr<List> SortedItems(const List& items, bool reverse, bool case_sensitive,
                                 const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (attribute != nullptr && !attribute->IsNone()) {
      ASSIGN_OR_RETURN(key, AttributePath(item, *attribute));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), item);
  }
  absl::Status status;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<bool> less =
        CompareOp("<", reverse ? b.first : a.first, reverse ? a.first : b.first);
    if (!less.ok()) {
      status = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(status);
  List out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

absl::StatusOr<Value> Select(Interpreter& interp, const Value& seq, const CallArgs& args,
                             bool by_attribute, bool keep_when) {
  ASSIGN_OR_RETURN(List items, Iterate(seq));
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) return absl::InvalidArgumentError("missing attribute argument");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].IsString())
      return absl::InvalidArgumentError("test name must be a string");
    test = args.positional[next++].AsString();
    if (!IsKnownTest(test))
      return absl::InvalidArgumentError(absl::StrCat("unsupported test '", test, "'"));
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                              args.positional.end());
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      ASSIGN_OR_RETURN(subject, AttributePath(item, attribute));
    }
    bool holds = subject.Truthy();
    if (!test.empty()) {
      ASSIGN_OR_RETURN(holds, ApplyTest(interp, test, subject, test_args));
    }
    if (holds == keep_when) out.push_back(item);
  }
  return Value(std::move(out));
}

// Jinja2 3.1's indent filter.
std::string Indent(const std::string& s, const std::string& indention, bool first, bool blank) {
  const std::string text = s + "\n";
  std::vector<std::string> lines = PySplitLines(text);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else if (!lines.empty()) {
    rv = lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        rv += lines[i].empty() ? lines[i] : indention + lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return rv;
}

absl::StatusOr<Value> ToInt(const Value& v, const Value& dflt) {
  if (v.IsInt() || v.IsBool()) return Value(v.AsInteger());
  if (v.IsFloat()) {
    if (!std::isfinite(v.AsDouble())) return dflt;
    ASSIGN_OR_RETURN(int64_t i, TruncateToInt(v.AsDouble()));
    return Value(i);
  }
  if (v.IsString()) {
    const std::string t = PyStrip(v.AsString(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && end == t.c_str() + t.size() && errno == 0)
      return Value(static_cast<int64_t>(i));
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(d)) {
      ASSIGN_OR_RETURN(int64_t i, TruncateToInt(d));
      return Value(i);
    }
  }
  return dflt;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& v,
                                  const CallArgs& args) {
  if (name == "tojson") {
    // Hugging Face: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    if (BoolArg(args, 0, "ensure_ascii", false)) {
      return absl::InvalidArgumentError("tojson(ensure_ascii=True) is not supported");
    }
    JsonDumpOptions options;
    if (const Value* indent = args.Get(1, "indent"); indent != nullptr && !indent->IsNone()) {
      if (!indent->IsInt() || indent->AsInt() < 0 || indent->AsInt() > 64) {
        return absl::InvalidArgumentError("tojson: indent must be an integer in [0, 64]");
      }
      options.indent = static_cast<int>(indent->AsInt());
    }
    if (const Value* sep = args.Get(2, "separators"); sep != nullptr && !sep->IsNone()) {
      if (!sep->IsList() || sep->AsList().size() != 2 || !sep->AsList()[0].IsString() ||
          !sep->AsList()[1].IsString()) {
        return absl::InvalidArgumentError("tojson: separators must be two strings");
      }
      options.item_separator = sep->AsList()[0].AsString();
      options.key_separator = sep->AsList()[1].AsString();
    }
    options.sort_keys = BoolArg(args, 3, "sort_keys", false);
    ASSIGN_OR_RETURN(std::string json, DumpJson(v, options));
    RETURN_IF_ERROR(interp.CheckSize(json.size()));
    return Value(std::move(json));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = args.Get(0, "default_value");
    if (v.IsUndefined() || (BoolArg(args, 1, "boolean", false) && !v.Truthy())) {
      return dflt != nullptr ? *dflt : Value(std::string());
    }
    return v;
  }
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value(n);
  }
  if (name == "string" || name == "safe") return Value(v.Str());
  if (name == "trim") {
    const Value* chars = args.Get(0, "chars");
    const std::string* set = chars != nullptr && chars->IsString() ? &chars->AsString() : nullptr;
    return Value(PyStrip(v.Str(), set, true, true));
  }
  if (name == "upper") return Value(PyUpper(v.Str()));
  if (name == "lower") return Value(PyLower(v.Str()));
  if (name == "capitalize") return Value(PyCapitalize(v.Str()));
  if (name == "title") return Value(PyTitle(v.Str()));
  if (name == "replace") {
    const Value* from = args.Get(0, "old");
    const Value* to = args.Get(1, "new");
    const Value* count = args.Get(2, "count");
    if (from == nullptr || to == nullptr)
      return absl::InvalidArgumentError("replace needs old and new");
    std::string out = PyReplace(v.Str(), from->Str(), to->Str(),
                                count != nullptr && count->IsInt() ? count->AsInt() : -1);
    RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value(std::move(out));
  }
  if (name == "indent") {
    const Value* width = args.Get(0, "width");
    std::string indention(4, ' ');
    if (width != nullptr && width->IsString()) {
      indention = width->AsString();
    } else if (width != nullptr) {
      if (!width->IsInt() || width->AsInt() < 0 || width->AsInt() > 1024) {
        return absl::InvalidArgumentError("indent: width must be an integer in [0, 1024]");
      }
      indention.assign(static_cast<size_t>(width->AsInt()), ' ');
    }
    std::string out = Indent(v.Str(), indention, BoolArg(args, 1, "first", false),
                             BoolArg(args, 2, "blank", false));
    RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value(std::move(out));
  }
  if (name == "wordcount") {
    return Value(static_cast<int64_t>(PySplit(v.Str(), nullptr, -1).size()));
  }
  if (name == "int") {
    const Value* dflt = args.Get(0, "default");
    return ToInt(v, dflt != nullptr ? *dflt : Value(0));
  }
  if (name == "float") {
    const Value* dflt = args.Get(0, "default");
    if (v.IsNumber()) return Value(v.AsDouble());
    if (v.IsString()) {
      const std::string t = PyStrip(v.AsString(), nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size()) return Value(d);
    }
    return dflt != nullptr ? *dflt : Value(0.0);
  }
  if (name == "abs") {
    if (v.IsFloat()) return Value(std::fabs(v.AsDouble()));
    if (v.IsInt() || v.IsBool()) {
      if (v.AsInteger() >= 0) return Value(v.AsInteger());
      ASSIGN_OR_RETURN(int64_t i, Negate(v.AsInteger()));
      return Value(i);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "items") {
    if (v.IsUndefined()) return Value(List());
    if (!v.IsDict())
      return absl::InvalidArgumentError("items: can only get item pairs from a mapping");
    List out;
    for (const auto& [key, value] : v.AsDict())
      out.push_back(Value::MakeTuple(List{Value(key), value}));
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.IsDict()) return absl::InvalidArgumentError("dictsort: expected a mapping");
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = args.Get(1, "by");
    const int pos = by != nullptr && by->Str() == "value" ? 1 : 0;
    List pairs;
    for (const auto& [key, value] : v.AsDict())
      pairs.push_back(Value::MakeTuple(List{Value(key), value}));
    ASSIGN_OR_RETURN(List sorted, SortedItems(pairs, BoolArg(args, 2, "reverse", false),
                                              case_sensitive, nullptr));
    if (pos == 1) {
      Value index(1);
      ASSIGN_OR_RETURN(
          sorted, SortedItems(pairs, BoolArg(args, 2, "reverse", false), case_sensitive, &index));
    }
    return Value(std::move(sorted));
  }
  ASSIGN_OR_RETURN(List items, Iterate(v));
  if (name == "list") return Value(std::move(items));
  if (name == "first")
    return items.empty() ? Value::MakeUndefined("'first' of an empty sequence") : items.front();
  if (name == "last")
    return items.empty() ? Value::MakeUndefined("'last' of an empty sequence") : items.back();
  if (name == "reverse") {
    if (v.IsString()) {
      std::string out;
      for (auto it = items.rbegin(); it != items.rend(); ++it) out += it->AsString();
      return Value(std::move(out));
    }
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") {
    const Value* sep = args.Get(0, "d");
    const Value* attribute = args.Get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (attribute != nullptr && !attribute->IsNone()) {
        ASSIGN_OR_RETURN(item, AttributePath(item, *attribute));
      }
      if (i > 0 && sep != nullptr) out += sep->Str();
      out += item.Str();
      RETURN_IF_ERROR(interp.CheckSize(out.size()));
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value* attribute = args.Get(99, "attribute");
    if (attribute != nullptr) {
      const Value* dflt = args.Get(99, "default");
      for (const Value& item : items) {
        ASSIGN_OR_RETURN(Value mapped, AttributePath(item, *attribute));
        if (mapped.IsUndefined() && dflt != nullptr) mapped = *dflt;
        out.push_back(std::move(mapped));
      }
      return Value(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].IsString() ||
        !IsKnownFilter(args.positional[0].AsString())) {
      return absl::InvalidArgumentError("map: expected attribute= or a known filter name");
    }
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value mapped,
                       ApplyFilter(interp, args.positional[0].AsString(), item, rest));
      out.push_back(std::move(mapped));
    }
    return Value(std::move(out));
  }
  if (name == "select") return Select(interp, v, args, false, true);
  if (name == "reject") return Select(interp, v, args, false, false);
  if (name == "selectattr") return Select(interp, v, args, true, true);
  if (name == "rejectattr") return Select(interp, v, args, true, false);
  if (name == "sort") {
    ASSIGN_OR_RETURN(List sorted, SortedItems(items, BoolArg(args, 0, "reverse", false),
                                              BoolArg(args, 1, "case_sensitive", false),
                                              args.Get(2, "attribute")));
    return Value(std::move(sorted));
  }
  if (name == "unique" || name == "min" || name == "max") {
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = args.Get(1, "attribute");
    if (name == "unique") {
      List out;
      List seen;
      for (const Value& item : items) {
        Value key = item;
        if (attribute != nullptr && !attribute->IsNone()) {
          ASSIGN_OR_RETURN(key, AttributePath(item, *attribute));
        }
        key = SortKey(key, case_sensitive);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); }))
          continue;
        seen.push_back(key);
        out.push_back(item);
      }
      return Value(std::move(out));
    }
    if (items.empty())
      return Value::MakeUndefined(absl::StrCat("'", std::string(name), "' of an empty sequence"));
    ASSIGN_OR_RETURN(List sorted, SortedItems(items, false, case_sensitive, attribute));
    return name == "min" ? sorted.front() : sorted.back();
  }
  if (name == "sum") {
    const Value* attribute = args.Get(0, "attribute");
    const Value* start = args.Get(1, "start");
    Value total = start != nullptr ? *start : Value(0);
    for (const Value& item : items) {
      Value term = item;
      if (attribute != nullptr && !attribute->IsNone()) {
        ASSIGN_OR_RETURN(term, AttributePath(item, *attribute));
      }
      ASSIGN_OR_RETURN(total, BinaryOp(interp, "+", total, term));
    }
    return total;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", std::string(name), "'"));
}

}  // namespace tandem::jinja
