// Value: the data a Jinja template computes with, modelled on the Python objects Jinja2 sees
// when Hugging Face renders a chat template (None, bool, int, float, str, list, dict), plus
// Jinja's Undefined, namespace() objects and callables (macros, globals, bound methods).
//
// Values are cheap to copy: strings are held by value, lists and dicts are immutable and shared
// (chat templates run in Jinja's ImmutableSandboxedEnvironment, which forbids mutating them).
// The one mutable kind is Namespace, shared by reference like the Python object.
// Dicts keep insertion order, as Python dicts do; keys are strings (JSON objects).
//
// Thread-safety: a Value may be read from any number of threads; Namespace values are written
// only by the render that created them.
#ifndef TANDEM_ENGINE_JINJA_VALUE_H_
#define TANDEM_ENGINE_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::jinja {

class Value;
class Interpreter;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or the positional one at `index`, or nullptr.
  const Value* Get(size_t index, std::string_view name) const;
};

// A callable value: a macro, a global function or a bound method. `interp` is the render in
// progress (macros render through it).
using Function = std::function<absl::StatusOr<Value>(Interpreter& interp, const CallArgs& args)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages ("'x' is undefined")
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() : data_(Undefined{}) {}
  static Value MakeUndefined(std::string name) { return Value(Data(Undefined{std::move(name)})); }
  static Value None() { return Value(Data(nullptr)); }
  Value(bool b) : data_(b) {}                       // NOLINT: implicit like Python literals
  Value(int64_t i) : data_(i) {}                    // NOLINT
  Value(int i) : data_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d) : data_(d) {}                     // NOLINT
  Value(std::string s) : data_(std::move(s)) {}     // NOLINT
  Value(const char* s) : data_(std::string(s)) {}   // NOLINT
  Value(List list) : data_(std::make_shared<const List>(std::move(list))) {}  // NOLINT
  Value(Dict dict) : data_(std::make_shared<const Dict>(std::move(dict))) {}  // NOLINT
  // A Python tuple: a list that prints as (a, b) (tuple literals, dict items).
  static Value MakeTuple(List items) {
    Value v(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value MakeNamespace(Dict attributes);
  static Value MakeFunction(std::string name, Function fn);
  // JSON → Value (objects keep the document's order); numbers stay int or float as written.
  static Value FromJson(const nlohmann::ordered_json& json);
  static Value FromJson(const nlohmann::json& json);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool IsUndefined() const { return kind() == Kind::kUndefined; }
  bool IsNone() const { return kind() == Kind::kNone; }
  bool IsBool() const { return kind() == Kind::kBool; }
  bool IsInt() const { return kind() == Kind::kInt; }
  bool IsFloat() const { return kind() == Kind::kFloat; }
  // Python's numbers.Number: bool, int, float.
  bool IsNumber() const { return IsBool() || IsInt() || IsFloat(); }
  bool IsString() const { return kind() == Kind::kString; }
  bool IsList() const { return kind() == Kind::kList; }  // lists and tuples
  bool IsTuple() const { return tuple_; }
  bool IsDict() const { return kind() == Kind::kDict; }
  bool IsNamespace() const { return kind() == Kind::kNamespace; }
  bool IsFunction() const { return kind() == Kind::kFunction; }

  bool AsBool() const { return std::get<bool>(data_); }
  int64_t AsInt() const { return std::get<int64_t>(data_); }  // kInt only
  // bool/int/float as a double.
  double AsDouble() const;
  // bool/int as an int64 (Python's bool is an int).
  int64_t AsInteger() const { return IsBool() ? AsBool() : AsInt(); }
  const std::string& AsString() const { return std::get<std::string>(data_); }
  const List& AsList() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& AsDict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  Dict& NamespaceAttributes() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }
  const std::string& function_name() const;
  const Function& function() const;

  // dict[key] or nullptr (kDict and kNamespace).
  const Value* Find(std::string_view key) const;

  // Python's bool(value); Undefined is false.
  bool Truthy() const;
  // Python's str(value), as `{{ value }}` prints it (Undefined prints as "").
  std::string Str() const;
  // Python's repr(value) (strings quoted as Python quotes them).
  std::string Repr() const;
  // Python's `==` (1 == 1.0 == True; lists and dicts compare deeply; Undefined equals only
  // Undefined).
  bool Equals(const Value& other) const;
  // A short type name for error messages ("str", "list", "dict", ...).
  std::string TypeName() const;

 private:
  struct FunctionHolder {
    std::string name;
    Function fn;
  };
  using Data = std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
                            std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                            std::shared_ptr<Dict>, std::shared_ptr<const FunctionHolder>>;
  explicit Value(Data data) : data_(std::move(data)) {}
  Data data_;
  bool tuple_ = false;
};

// Python's repr() of a float ("1.0", "0.1", "1e+16", "inf").
std::string FloatRepr(double d);

// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys), as Hugging Face's `tojson` filter calls it. `indent` < 0: none.
// `item_separator`/`key_separator` empty: Python's defaults for the indent. Undefined,
// namespaces and functions are not serializable (an error, as in Python).
struct JsonDumpOptions {
  int indent = -1;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_VALUE_H_
