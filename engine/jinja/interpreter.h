// Interpreter: renders a parsed template (ast.h) with Jinja2's semantics: scoping (for-loop
// bodies and macros get their own frames; `if` does not), Undefined, the `loop` object,
// break/continue, namespace() assignment, macros.
//
// One Interpreter is one render: not thread-safe, used by one thread and then dropped. It borrows
// the syntax tree and the options, which must outlive it. Every limit in RenderLimits is
// enforced so that hostile templates or inputs end in an error, never a crash or a hang.
#ifndef TANDEM_ENGINE_JINJA_INTERPRETER_H_
#define TANDEM_ENGINE_JINJA_INTERPRETER_H_

#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/jinja/ast.h"
#include "engine/jinja/value.h"

namespace tandem::jinja {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;      // also bounds every string a render builds
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
  int max_call_depth = 64;                  // nested macro calls (and evaluation nesting / 4)
};

struct RenderOptions {
  RenderLimits limits;
  // The local wall-clock time `strftime_now` formats; null means the system clock.
  std::function<std::tm()> clock;
};

class Interpreter {
 public:
  // `globals` are the template's variables (e.g. messages); built-in globals (range,
  // namespace, dict, raise_exception, strftime_now) come after them.
  Interpreter(const RenderOptions& options, Dict globals);
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` at the top level.
  absl::StatusOr<std::string> Render(const Body& body);

  // Used by filters and globals.
  absl::StatusOr<Value> Eval(const Expr& expr);
  absl::Status CheckSize(size_t bytes) const;
  const RenderOptions& options() const { return options_; }
  // Calls a value (macro, global, bound method).
  absl::StatusOr<Value> CallValue(const Value& callee, const CallArgs& args, int line);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  absl::StatusOr<Flow> Exec(const Body& body, std::string* out);
  absl::StatusOr<Flow> ExecNode(const Node& node, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Node& node, std::string* out);
  absl::Status ExecSet(const Node& node, Value value);
  absl::StatusOr<Value> EvalInner(const Expr& expr);
  absl::StatusOr<Value> EvalArgs(const Expr& expr, size_t first, CallArgs* args);
  absl::StatusOr<Value> EvalCompare(const Expr& expr);
  Value MakeMacro(const Node& node);
  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);

  const RenderOptions& options_;
  Dict builtins_;
  // Frames, innermost last. frames_[0] holds the template's variables and top-level sets; a
  // macro body sees its own frames (from macro_floor_ on) and frames_[0].
  std::vector<Dict> frames_;
  size_t macro_floor_ = 1;
  int64_t loop_iterations_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_INTERPRETER_H_
