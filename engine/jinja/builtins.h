// Jinja2's built-in filters, tests, globals and the str/dict methods chat templates call, with
// Python's semantics. `tojson` is Hugging Face's (json.dumps with ensure_ascii=False), not
// Jinja2's HTML-safe one. Only methods Jinja2's ImmutableSandboxedEnvironment allows exist (no
// list.append, dict.update, ...).
#ifndef TANDEM_ENGINE_JINJA_BUILTINS_H_
#define TANDEM_ENGINE_JINJA_BUILTINS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/jinja/value.h"

namespace tandem::jinja {

class Interpreter;

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& target,
                                  const CallArgs& args);
absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& target,
                               const CallArgs& args);

// `object.name` as Jinja2 resolves it: a method of str/dict (bound to `object`), a dict item or
// a namespace attribute; Undefined when there is none. Undefined `object` is an error.
absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name);
// `object[key]`: item first, then attribute; Undefined when there is none.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);

// range, namespace, dict, raise_exception, strftime_now.
Dict BuiltinGlobals();

// The items `for` iterates: list items, dict keys, string characters; Undefined is empty.
absl::StatusOr<List> Iterate(const Value& value);
// Python's len(); Undefined has length 0.
absl::StatusOr<int64_t> Length(const Value& value);

// Binary operators + - * / // % ** ~ with Python's semantics.
absl::StatusOr<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& a,
                               const Value& b);
// Comparisons == != < <= > >= in notin.
absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);
// value[start:stop:step] on lists and strings.
absl::StatusOr<Value> SliceOp(const Value& value, const Value& start, const Value& stop,
                              const Value& step);

// Python's int(d) for a finite or non-finite double, and -i, where the result must fit int64:
// Python's integers are unbounded, ours are not, so what int64 cannot hold is an overflow error.
absl::StatusOr<int64_t> TruncateToInt(double d);
absl::StatusOr<int64_t> Negate(int64_t i);

// The error for using an Undefined value where Jinja2 raises UndefinedError.
absl::Status UndefinedError(const Value& undefined);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_BUILTINS_H_
