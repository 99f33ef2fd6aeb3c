// Template: a Jinja2 template parsed once and rendered many times, with the semantics of
// Jinja2's ImmutableSandboxedEnvironment configured as Hugging Face transformers configures it
// for chat templates (trim_blocks, lstrip_blocks, loop controls, HF's tojson, raise_exception,
// strftime_now).
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-/+), raw; if/elif/else, for (unpacking,
// `if` filter, else, loop.*, break/continue), set (names, tuples, namespace attributes, block
// set), macro; the expression grammar (literals, tuples/lists/dicts, attribute/item/slice,
// calls with keyword arguments, filters, tests, arithmetic, ~, comparisons, in, and/or/not,
// conditional expressions). The filters, tests, methods and globals are listed in
// builtins.h/filters.cc/methods.cc. Anything else (extends, include, import, call blocks,
// recursive loops, unknown filters/tests) fails at Parse with the construct and its line.
//
// Thread-safety: a Template is immutable after Parse; Render may run concurrently from any
// number of threads.
#ifndef TANDEM_ENGINE_JINJA_TEMPLATE_H_
#define TANDEM_ENGINE_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/jinja/ast.h"
#include "engine/jinja/interpreter.h"
#include "engine/jinja/value.h"

namespace tandem::jinja {

class Template {
 public:
  // Syntax errors and unsupported constructs → InvalidArgument "line N: ...".
  static absl::StatusOr<std::unique_ptr<Template>> Parse(std::string_view source);

  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with `variables` (the template's globals). Errors: a failing expression (e.g. an
  // attribute of an undefined value), raise_exception(), or a limit of `options` exceeded
  // (ResourceExhausted); messages start with the line.
  absl::StatusOr<std::string> Render(const Dict& variables, const RenderOptions& options) const;

 private:
  explicit Template(Body body) : body_(std::move(body)) {}
  Body body_;
};

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_TEMPLATE_H_
