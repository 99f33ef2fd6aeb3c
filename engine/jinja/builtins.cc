// Attribute and item access, iteration, operators, tests and globals (filters.cc has the
// filters, methods.cc the str/dict methods).
#include "engine/jinja/builtins.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/interpreter.h"
#include "engine/jinja/methods.h"
#include "engine/jinja/text.h"

namespace tandem::jinja {
namespace {

// Jinja2's sandbox refuses range() results longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::Status OperandError(std::string_view op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '",
                                a.TypeName(), "' and '", b.TypeName(), "'"));
}

// Python's floor division and modulo on integers (b != 0). The one quotient int64 cannot hold,
// INT64_MIN // -1, is an overflow; the hardware would trap on it.
absl::StatusOr<int64_t> FloorDiv(int64_t a, int64_t b) {
  if (b == -1) {
    if (a == std::numeric_limits<int64_t>::min()) return absl::OutOfRangeError("integer overflow");
    return -a;
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 traps on x86; every integer divides by -1.
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

absl::StatusOr<Value> Repeat(Interpreter& interp, const Value& seq, int64_t times) {
  if (times <= 0) return seq.IsString() ? Value(std::string()) : Value(List());
  if (seq.IsString()) {
    const std::string& s = seq.AsString();
    if (!s.empty()) {
      RETURN_IF_ERROR(interp.CheckSize(static_cast<size_t>(times) > SIZE_MAX / s.size()
                                           ? SIZE_MAX
                                           : s.size() * static_cast<size_t>(times)));
    }
    std::string out;
    for (int64_t i = 0; i < times && !s.empty(); ++i) out += s;
    return Value(std::move(out));
  }
  const List& list = seq.AsList();
  if (!list.empty()) {
    RETURN_IF_ERROR(interp.CheckSize(static_cast<size_t>(times) > SIZE_MAX / (list.size() * 16)
                                         ? SIZE_MAX
                                         : list.size() * static_cast<size_t>(times) * 16));
  }
  List out;
  for (int64_t i = 0; i < times && !list.empty(); ++i)
    out.insert(out.end(), list.begin(), list.end());
  return Value(std::move(out));
}

absl::StatusOr<bool> Less(const Value& a, const Value& b, std::string_view op) {
  if (a.IsUndefined()) return UndefinedError(a);
  if (b.IsUndefined()) return UndefinedError(b);
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.AsDouble() < b.AsDouble();
    return a.AsInteger() < b.AsInteger();
  }
  if (a.IsString() && b.IsString()) return a.AsString() < b.AsString();
  if (a.IsList() && b.IsList()) {
    const List& x = a.AsList();
    const List& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  return TypeError(absl::StrCat("'", std::string(op), "' not supported between instances of '",
                                a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.IsString()) {
        return TypeError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.AsString().find(item.AsString()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.AsList()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.IsString() && container.Find(item.AsString()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return TypeError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<int64_t> IntArg(const Value& v, std::string_view what) {
  if (!v.IsInt() && !v.IsBool()) {
    return TypeError(
        absl::StrCat(std::string(what), ": expected an integer, got '", v.TypeName(), "'"));
  }
  return v.AsInteger();
}

}  // namespace

absl::StatusOr<int64_t> TruncateToInt(double d) {
  // [-2^63, 2^63) are the doubles that truncate into int64; NaN fails both comparisons.
  constexpr double kLimit = 9223372036854775808.0;
  if (!(d >= -kLimit && d < kLimit)) return absl::OutOfRangeError("integer overflow");
  return static_cast<int64_t>(d);
}

absl::StatusOr<int64_t> Negate(int64_t i) {
  if (i == std::numeric_limits<int64_t>::min()) return absl::OutOfRangeError("integer overflow");
  return -i;
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& name = undefined.undefined_name();
  if (name.empty()) return absl::InvalidArgumentError("undefined value used");
  if (name[0] == '\'') return absl::InvalidArgumentError(name);
  return absl::InvalidArgumentError(absl::StrCat("'", std::string(name), "' is undefined"));
}

absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name) {
  if (object.IsUndefined()) return UndefinedError(object);
  if (IsMethod(object, name)) return BindMethod(object, name);
  if (object.IsDict() || object.IsNamespace()) {
    if (const Value* v = object.Find(name)) return *v;
  }
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no attribute '", std::string(name), "'"));
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.IsUndefined()) return UndefinedError(object);
  if (object.IsDict() && key.IsString()) {
    if (const Value* v = object.Find(key.AsString())) return *v;
  }
  if ((object.IsList() || object.IsString()) && (key.IsInt() || key.IsBool())) {
    int64_t i = key.AsInteger();
    if (object.IsList()) {
      const auto n = static_cast<int64_t>(object.AsList().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return object.AsList()[static_cast<size_t>(i)];
    } else {
      const std::vector<size_t> offsets = CodePointOffsets(object.AsString());
      const auto n = static_cast<int64_t>(offsets.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const auto k = static_cast<size_t>(i);
        return Value(object.AsString().substr(offsets[k], offsets[k + 1] - offsets[k]));
      }
    }
  }
  if (key.IsString()) return GetAttribute(object, key.AsString());
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no element ", key.Repr()));
}

absl::StatusOr<List> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return List();
    case Value::Kind::kList:
      return value.AsList();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [key, v] : value.AsDict()) keys.emplace_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::string& s = value.AsString();
      const std::vector<size_t> offsets = CodePointOffsets(s);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointCount(value.AsString()));
    case Value::Kind::kList:
      return static_cast<int64_t>(value.AsList().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(value.AsDict().size());
    default:
      return TypeError(absl::StrCat("object of type '", value.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& a,
                               const Value& b) {
  if (op == "~") {
    RETURN_IF_ERROR(interp.CheckSize(a.Str().size() + b.Str().size()));
    return Value(a.Str() + b.Str());
  }
  if (a.IsUndefined()) return UndefinedError(a);
  if (b.IsUndefined()) return UndefinedError(b);
  const bool numbers = a.IsNumber() && b.IsNumber();
  const bool ints = numbers && !a.IsFloat() && !b.IsFloat();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_add_overflow(a.AsInteger(), b.AsInteger(), &r)) {
        return absl::OutOfRangeError("integer overflow");
      }
      return Value(r);
    }
    if (numbers) return Value(a.AsDouble() + b.AsDouble());
    if (a.IsString() && b.IsString()) {
      RETURN_IF_ERROR(interp.CheckSize(a.AsString().size() + b.AsString().size()));
      return Value(a.AsString() + b.AsString());
    }
    if (a.IsList() && b.IsList()) {
      List out = a.AsList();
      out.insert(out.end(), b.AsList().begin(), b.AsList().end());
      return Value(std::move(out));
    }
    return OperandError(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_sub_overflow(a.AsInteger(), b.AsInteger(), &r)) {
        return absl::OutOfRangeError("integer overflow");
      }
      return Value(r);
    }
    if (numbers) return Value(a.AsDouble() - b.AsDouble());
    return OperandError(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_mul_overflow(a.AsInteger(), b.AsInteger(), &r)) {
        return absl::OutOfRangeError("integer overflow");
      }
      return Value(r);
    }
    if (numbers) return Value(a.AsDouble() * b.AsDouble());
    if ((a.IsString() || a.IsList()) && (b.IsInt() || b.IsBool()))
      return Repeat(interp, a, b.AsInteger());
    if ((b.IsString() || b.IsList()) && (a.IsInt() || a.IsBool()))
      return Repeat(interp, b, a.AsInteger());
    return OperandError(op, a, b);
  }
  if (!numbers) return OperandError(op, a, b);
  if (op == "**") {
    if (ints && b.AsInteger() >= 0) {
      const int64_t base = a.AsInteger(), exponent = b.AsInteger();
      if (exponent == 0 || base == 1) return Value(int64_t{1});
      if (base == 0) return Value(int64_t{0});
      if (base == -1) return Value(int64_t{exponent % 2 == 0 ? 1 : -1});
      int64_t r = 1;  // |base| >= 2 overflows within 64 steps
      for (int64_t i = 0; i < exponent; ++i) {
        if (__builtin_mul_overflow(r, base, &r)) return absl::OutOfRangeError("integer overflow");
      }
      return Value(r);
    }
    return Value(std::pow(a.AsDouble(), b.AsDouble()));
  }
  if ((ints && b.AsInteger() == 0) || (!ints && b.AsDouble() == 0.0)) {
    return absl::InvalidArgumentError("division by zero");
  }
  if (op == "/") return Value(a.AsDouble() / b.AsDouble());
  if (op == "//") {
    if (ints) {
      ASSIGN_OR_RETURN(int64_t q, FloorDiv(a.AsInteger(), b.AsInteger()));
      return Value(q);
    }
    return Value(std::floor(a.AsDouble() / b.AsDouble()));
  }
  if (op == "%") {
    if (ints) return Value(FloorMod(a.AsInteger(), b.AsInteger()));
    double r = std::fmod(a.AsDouble(), b.AsDouble());
    if (r != 0 && ((r < 0) != (b.AsDouble() < 0))) r += b.AsDouble();
    return Value(r);
  }
  return absl::InternalError(absl::StrCat("unknown operator ", std::string(op)));
}

absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in") return Contains(b, a);
  if (op == "notin") {
    ASSIGN_OR_RETURN(bool in, Contains(b, a));
    return !in;
  }
  if (op == "<") return Less(a, b, op);
  if (op == ">") return Less(b, a, op);
  if (op == "<=") {
    ASSIGN_OR_RETURN(bool greater, Less(b, a, op));
    return !greater;
  }
  if (op == ">=") {
    ASSIGN_OR_RETURN(bool less, Less(a, b, op));
    return !less;
  }
  return absl::InternalError(absl::StrCat("unknown comparison ", std::string(op)));
}

absl::StatusOr<Value> SliceOp(const Value& value, const Value& start, const Value& stop,
                              const Value& step) {
  if (value.IsUndefined()) return UndefinedError(value);
  if (!value.IsList() && !value.IsString()) {
    return TypeError(absl::StrCat("'", value.TypeName(), "' object is not subscriptable"));
  }
  std::vector<size_t> offsets;
  int64_t n = 0;
  if (value.IsString()) {
    offsets = CodePointOffsets(value.AsString());
    n = static_cast<int64_t>(offsets.size()) - 1;
  } else {
    n = static_cast<int64_t>(value.AsList().size());
  }
  int64_t st = 1;
  if (!step.IsNone()) {
    ASSIGN_OR_RETURN(st, IntArg(step, "slice step"));
  }
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  // Python's slice.indices().
  const auto clamp = [&](const Value& v, int64_t dflt) -> absl::StatusOr<int64_t> {
    if (v.IsNone()) return dflt;
    ASSIGN_OR_RETURN(int64_t i, IntArg(v, "slice index"));
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  ASSIGN_OR_RETURN(int64_t lo, clamp(start, st < 0 ? n - 1 : 0));
  ASSIGN_OR_RETURN(int64_t hi, clamp(stop, st < 0 ? -1 : n));
  std::vector<int64_t> picks;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi;) {
    picks.push_back(i);
    if (__builtin_add_overflow(i, st, &i)) break;  // past hi, which int64 holds
  }
  if (value.IsString()) {
    std::string out;
    for (int64_t i : picks) {
      const auto k = static_cast<size_t>(i);
      out.append(value.AsString(), offsets[k], offsets[k + 1] - offsets[k]);
    }
    return Value(std::move(out));
  }
  List out;
  for (int64_t i : picks) out.push_back(value.AsList()[static_cast<size_t>(i)]);
  return Value(std::move(out));
}

bool IsKnownTest(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "defined",  "undefined",   "none",   "boolean",  "true",        "false",
      "integer",  "float",       "number", "string",   "mapping",     "iterable",
      "sequence", "callable",    "sameas", "lower",    "upper",       "odd",
      "even",     "divisibleby", "eq",     "equalto",  "ne",          "lt",
      "le",       "gt",          "ge",     "lessthan", "greaterthan", "in"};
  for (std::string_view t : kTests) {
    if (t == name) return true;
  }
  return false;
}

absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& v,
                               const CallArgs& args) {
  (void)interp;
  const Value* arg = args.Get(0, "value");
  const auto need_arg = [&]() -> absl::Status {
    if (arg == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("test '", std::string(name), "' needs an argument"));
    }
    return absl::OkStatus();
  };
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "integer") return v.IsInt();
  if (name == "float") return v.IsFloat();
  if (name == "number") return v.IsNumber();
  if (name == "string") return v.IsString();
  if (name == "mapping") return v.IsDict();
  if (name == "iterable") return v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict();
  if (name == "sequence") return v.IsString() || v.IsList() || v.IsDict();
  if (name == "callable") return v.IsFunction();
  if (name == "lower") return v.Str() == PyLower(v.Str());
  if (name == "upper") return v.Str() == PyUpper(v.Str());
  if (name == "odd" || name == "even") {
    ASSIGN_OR_RETURN(int64_t i, IntArg(v, name));
    return (FloorMod(i, 2) == 1) == (name == "odd");
  }
  RETURN_IF_ERROR(need_arg());
  if (name == "sameas") {
    // Python identity: the singletons None/True/False, otherwise equality of the same kind.
    return v.kind() == arg->kind() && v.Equals(*arg);
  }
  if (name == "divisibleby") {
    ASSIGN_OR_RETURN(int64_t i, IntArg(v, name));
    ASSIGN_OR_RETURN(int64_t d, IntArg(*arg, name));
    if (d == 0) return absl::InvalidArgumentError("division by zero");
    return FloorMod(i, d) == 0;
  }
  if (name == "eq" || name == "equalto") return v.Equals(*arg);
  if (name == "ne") return !v.Equals(*arg);
  if (name == "lt" || name == "lessthan") return CompareOp("<", v, *arg);
  if (name == "le") return CompareOp("<=", v, *arg);
  if (name == "gt" || name == "greaterthan") return CompareOp(">", v, *arg);
  if (name == "ge") return CompareOp(">=", v, *arg);
  if (name == "in") return CompareOp("in", v, *arg);
  return absl::InvalidArgumentError(absl::StrCat("unsupported test '", std::string(name), "'"));
}

Dict BuiltinGlobals() {
  Dict globals;
  globals.emplace_back(
      "range",
      Value::MakeFunction("range", [](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
        if (args.positional.empty() || args.positional.size() > 3 || !args.keyword.empty()) {
          return absl::InvalidArgumentError("range() takes 1 to 3 positional arguments");
        }
        int64_t start = 0, stop = 0, step = 1;
        if (args.positional.size() == 1) {
          ASSIGN_OR_RETURN(stop, IntArg(args.positional[0], "range"));
        } else {
          ASSIGN_OR_RETURN(start, IntArg(args.positional[0], "range"));
          ASSIGN_OR_RETURN(stop, IntArg(args.positional[1], "range"));
          if (args.positional.size() == 3) {
            ASSIGN_OR_RETURN(step, IntArg(args.positional[2], "range"));
          }
        }
        if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
        const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                       static_cast<double>(step));
        if (count > static_cast<double>(kMaxRange)) {
          return absl::ResourceExhaustedError(
              absl::StrCat("range too big: the sandbox allows at most ", kMaxRange, " items"));
        }
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          out.emplace_back(i);
          if (__builtin_add_overflow(i, step, &i)) break;  // past stop, which int64 holds
        }
        return Value(std::move(out));
      }));
  const auto kwargs_dict = [](const CallArgs& args) -> absl::StatusOr<Dict> {
    Dict d;
    for (const Value& p : args.positional) {
      if (!p.IsDict()) return absl::InvalidArgumentError("expected keyword arguments or a dict");
      for (const auto& item : p.AsDict()) d.push_back(item);
    }
    for (const auto& [key, value] : args.keyword) {
      bool replaced = false;
      for (auto& [k, existing] : d) {
        if (k == key) {
          existing = value;
          replaced = true;
        }
      }
      if (!replaced) d.emplace_back(key, value);
    }
    return d;
  };
  globals.emplace_back(
      "namespace",
      Value::MakeFunction(
          "namespace", [kwargs_dict](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
            ASSIGN_OR_RETURN(Dict d, kwargs_dict(args));
            return Value::MakeNamespace(std::move(d));
          }));
  globals.emplace_back(
      "dict",
      Value::MakeFunction(
          "dict", [kwargs_dict](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
            ASSIGN_OR_RETURN(Dict d, kwargs_dict(args));
            return Value(std::move(d));
          }));
  globals.emplace_back(
      "raise_exception",
      Value::MakeFunction(
          "raise_exception", [](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
            const Value* message = args.Get(0, "message");
            return absl::InvalidArgumentError(absl::StrCat(
                "the template raised an error: ", message != nullptr ? message->Str() : ""));
          }));
  globals.emplace_back(
      "strftime_now",
      Value::MakeFunction(
          "strftime_now", [](Interpreter& interp, const CallArgs& args) -> absl::StatusOr<Value> {
            const Value* format = args.Get(0, "format");
            if (format == nullptr || !format->IsString()) {
              return absl::InvalidArgumentError("strftime_now() takes a format string");
            }
            std::tm now{};
            if (interp.options().clock) {
              now = interp.options().clock();
            } else {
              const std::time_t t = std::time(nullptr);
              localtime_r(&t, &now);
            }
            if (format->AsString().size() > 256) {
              return absl::InvalidArgumentError("strftime_now(): format too long");
            }
            char buf[4096];
            const size_t n = std::strftime(buf, sizeof(buf), format->AsString().c_str(), &now);
            return Value(std::string(buf, n));
          }));
  return globals;
}

}  // namespace tandem::jinja
