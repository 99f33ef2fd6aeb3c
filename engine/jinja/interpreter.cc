#include "engine/jinja/interpreter.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/builtins.h"

namespace tandem::jinja {
namespace {

absl::Status AtLine(const absl::Status& status, int line) {
  if (status.ok() || absl::string_view(status.message()).substr(0, 5) == "line ") return status;
  return absl::Status(status.code(), absl::StrCat("line ", line, ": ", status.message()));
}

// Loop-variable dict for iteration `i` of `items`.
Value LoopObject(const List& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto index = static_cast<int64_t>(i);
  Dict loop = {{"index", Value(index + 1)},
               {"index0", Value(index)},
               {"revindex", Value(n - index)},
               {"revindex0", Value(n - index - 1)},
               {"first", Value(i == 0)},
               {"last", Value(index == n - 1)},
               {"length", Value(n)},
               {"depth", Value(1)},
               {"depth0", Value(0)},
               {"previtem", i > 0 ? items[i - 1] : Value::MakeUndefined("loop.previtem")},
               {"nextitem", index + 1 < n ? items[i + 1] : Value::MakeUndefined("loop.nextitem")}};
  loop.emplace_back(
      "cycle", Value::MakeFunction(
                   "loop.cycle", [i](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
                     if (args.positional.empty()) {
                       return absl::InvalidArgumentError("loop.cycle() needs at least one item");
                     }
                     return args.positional[i % args.positional.size()];
                   }));
  return Value(std::move(loop));
}

}  // namespace

Interpreter::Interpreter(const RenderOptions& options, Dict globals)
    : options_(options), builtins_(BuiltinGlobals()) {
  frames_.push_back(std::move(globals));
}

absl::Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > options_.limits.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template output exceeds ", options_.limits.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Render(const Body& body) {
  std::string out;
  ASSIGN_OR_RETURN(Flow flow, Exec(body, &out));
  (void)flow;
  return out;
}

Value Interpreter::Lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > macro_floor_;) {
    for (auto it = frames_[i].rbegin(); it != frames_[i].rend(); ++it) {
      if (it->first == name) return it->second;
    }
  }
  for (const auto& [key, value] : frames_[0]) {
    if (key == name) return value;
  }
  for (const auto& [key, value] : builtins_) {
    if (key == name) return value;
  }
  return Value::MakeUndefined(name);
}

void Interpreter::Assign(const std::string& name, Value value) {
  Dict& frame = frames_.size() > macro_floor_ ? frames_.back() : frames_[0];
  for (auto& [key, existing] : frame) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  frame.emplace_back(name, std::move(value));
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Body& body, std::string* out) {
  for (const NodePtr& node : body) {
    ASSIGN_OR_RETURN(Flow flow, ExecNode(*node, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecNode(const Node& node, std::string* out) {
  switch (node.kind) {
    case Node::Kind::kText:
      out->append(node.text);
      RETURN_IF_ERROR(CheckSize(out->size()));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
      out->append(v.Str());
      RETURN_IF_ERROR(AtLine(CheckSize(out->size()), node.line));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (const auto& [condition, body] : node.branches) {
        if (condition) {
          ASSIGN_OR_RETURN(Value v, Eval(*condition));
          if (!v.Truthy()) continue;
        }
        return Exec(body, out);
      }
      return Flow::kNormal;
    case Node::Kind::kFor:
      return ExecFor(node, out);
    case Node::Kind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
      RETURN_IF_ERROR(AtLine(ExecSet(node, std::move(v)), node.line));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock: {
      std::string captured;
      ASSIGN_OR_RETURN(Flow flow, Exec(node.body, &captured));
      (void)flow;
      Assign(node.targets[0], Value(std::move(captured)));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      Assign(node.targets[0], MakeMacro(node));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::Status Interpreter::ExecSet(const Node& node, Value value) {
  if (!node.attribute.empty()) {
    const Value target = Lookup(node.targets[0]);
    if (!target.IsNamespace()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot assign attribute '", node.attribute,
                                                     "' on non-namespace object '", node.targets[0],
                                                     "'"));
    }
    Dict& attributes = target.NamespaceAttributes();
    for (auto& [key, existing] : attributes) {
      if (key == node.attribute) {
        existing = std::move(value);
        return absl::OkStatus();
      }
    }
    attributes.emplace_back(node.attribute, std::move(value));
    return absl::OkStatus();
  }
  if (node.targets.size() == 1) {
    Assign(node.targets[0], std::move(value));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(List items, Iterate(value));
  if (items.size() != node.targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot unpack ", items.size(), " values into ",
                                                   node.targets.size(), " names"));
  }
  for (size_t i = 0; i < items.size(); ++i) Assign(node.targets[i], items[i]);
  return absl::OkStatus();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Node& node, std::string* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
  absl::StatusOr<List> iterated = Iterate(iterable);
  if (!iterated.ok()) return AtLine(iterated.status(), node.line);
  List all = *std::move(iterated);
  const auto bind = [&](const Value& item) -> absl::Status {
    if (node.targets.size() == 1) {
      Assign(node.targets[0], item);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(List parts, Iterate(item));
    if (parts.size() != node.targets.size()) {
      return AtLine(
          absl::InvalidArgumentError(absl::StrCat("cannot unpack ", parts.size(), " values into ",
                                                  node.targets.size(), " loop variables")),
          node.line);
    }
    for (size_t k = 0; k < parts.size(); ++k) Assign(node.targets[k], parts[k]);
    return absl::OkStatus();
  };
  const auto count_iteration = [&]() -> absl::Status {
    if (++loop_iterations_ > options_.limits.max_loop_iterations) {
      return AtLine(
          absl::ResourceExhaustedError(absl::StrCat(
              "template loops exceed ", options_.limits.max_loop_iterations, " iterations")),
          node.line);
    }
    return absl::OkStatus();
  };
  List items;
  if (node.filter) {
    for (const Value& item : all) {
      RETURN_IF_ERROR(count_iteration());
      frames_.emplace_back();
      absl::Status status = bind(item);
      absl::StatusOr<Value> keep = status.ok() ? Eval(*node.filter) : status;
      frames_.pop_back();
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    RETURN_IF_ERROR(count_iteration());
    frames_.emplace_back();
    frames_.back().emplace_back("loop", LoopObject(items, i));
    absl::Status status = bind(items[i]);
    absl::StatusOr<Flow> flow = status.ok() ? Exec(node.body, out) : status;
    frames_.pop_back();
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (items.empty() && !node.else_body.empty()) return Exec(node.else_body, out);
  return Flow::kNormal;
}

Value Interpreter::MakeMacro(const Node& node) {
  const Node* macro = &node;
  return Value::MakeFunction(
      node.targets[0], [macro](Interpreter& interp, const CallArgs& args) -> absl::StatusOr<Value> {
        if (args.positional.size() > macro->params.size()) {
          return absl::InvalidArgumentError(absl::StrCat("macro '", macro->targets[0],
                                                         "' takes not more than ",
                                                         macro->params.size(), " argument(s)"));
        }
        for (const auto& [key, value] : args.keyword) {
          bool known = false;
          for (const auto& param : macro->params) known |= param.first == key;
          if (!known) {
            return absl::InvalidArgumentError(absl::StrCat(
                "macro '", macro->targets[0], "' takes no keyword argument '", key, "'"));
          }
        }
        const size_t saved_floor = interp.macro_floor_;
        interp.macro_floor_ = interp.frames_.size();
        interp.frames_.emplace_back();
        absl::Status status;
        for (size_t i = 0; i < macro->params.size() && status.ok(); ++i) {
          const auto& [param, default_value] = macro->params[i];
          const Value* given = args.Get(i, param);
          if (given != nullptr) {
            interp.frames_.back().emplace_back(param, *given);
          } else if (default_value) {
            absl::StatusOr<Value> v = interp.Eval(*default_value);
            if (v.ok()) {
              interp.frames_.back().emplace_back(param, *std::move(v));
            } else {
              status = v.status();
            }
          } else {
            interp.frames_.back().emplace_back(param, Value::MakeUndefined(param));
          }
        }
        std::string out;
        absl::StatusOr<Flow> flow = status.ok() ? interp.Exec(macro->body, &out) : status;
        interp.frames_.resize(interp.macro_floor_);
        interp.macro_floor_ = saved_floor;
        if (!flow.ok()) return flow.status();
        return Value(std::move(out));
      });
}

absl::StatusOr<Value> Interpreter::CallValue(const Value& callee, const CallArgs& args, int line) {
  if (callee.IsUndefined()) return AtLine(UndefinedError(callee), line);
  if (!callee.IsFunction()) {
    return AtLine(absl::InvalidArgumentError(
                      absl::StrCat("'", callee.TypeName(), "' object is not callable")),
                  line);
  }
  if (++call_depth_ > options_.limits.max_call_depth) {
    --call_depth_;
    return AtLine(absl::ResourceExhaustedError(
                      absl::StrCat("calls nested deeper than ", options_.limits.max_call_depth)),
                  line);
  }
  absl::StatusOr<Value> result = callee.function()(*this, args);
  --call_depth_;
  if (!result.ok()) return AtLine(result.status(), line);
  return result;
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& expr) {
  if (++eval_depth_ > 4 * options_.limits.max_call_depth + 4 * 128) {
    --eval_depth_;
    return AtLine(absl::ResourceExhaustedError("expression evaluation nested too deeply"),
                  expr.line);
  }
  absl::StatusOr<Value> v = EvalInner(expr);
  --eval_depth_;
  if (!v.ok()) return AtLine(v.status(), expr.line);
  return v;
}

absl::StatusOr<Value> Interpreter::EvalArgs(const Expr& expr, size_t first, CallArgs* args) {
  for (size_t i = first; i < expr.children.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*expr.children[i]));
    args->positional.push_back(std::move(v));
  }
  for (const auto& [key, value_expr] : expr.keyword) {
    ASSIGN_OR_RETURN(Value v, Eval(*value_expr));
    args->keyword.emplace_back(key, std::move(v));
  }
  return Value();
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& expr) {
  ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0]));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1]));
    ASSIGN_OR_RETURN(bool holds, CompareOp(expr.ops[i], left, right));
    if (!holds) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName:
      return Lookup(expr.name);
    case Expr::Kind::kList: {
      List list;
      for (const ExprPtr& child : expr.children) {
        ASSIGN_OR_RETURN(Value v, Eval(*child));
        list.push_back(std::move(v));
      }
      if (expr.name == "tuple") return Value::MakeTuple(std::move(list));
      return Value(std::move(list));
    }
    case Expr::Kind::kDict: {
      Dict dict;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        ASSIGN_OR_RETURN(Value key, Eval(*expr.children[i]));
        ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i + 1]));
        if (!key.IsString()) return absl::InvalidArgumentError("dict keys must be strings");
        bool replaced = false;
        for (auto& [k, existing] : dict) {
          if (k == key.AsString()) {
            existing = value;
            replaced = true;
          }
        }
        if (!replaced) dict.emplace_back(key.AsString(), std::move(value));
      }
      return Value(std::move(dict));
    }
    case Expr::Kind::kAttribute: {
      ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0]));
      return GetAttribute(object, expr.name);
    }
    case Expr::Kind::kItem: {
      ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*expr.children[1]));
      return GetItem(object, key);
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0]));
      Value parts[3] = {Value::None(), Value::None(), Value::None()};
      for (int k = 0; k < 3; ++k) {
        if (expr.children[k + 1]) {
          ASSIGN_OR_RETURN(parts[k], Eval(*expr.children[k + 1]));
        }
      }
      return SliceOp(object, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall: {
      ASSIGN_OR_RETURN(Value callee, Eval(*expr.children[0]));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(expr, 1, &args).status());
      return CallValue(callee, args, expr.line);
    }
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value target, Eval(*expr.children[0]));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(expr, 1, &args).status());
      return ApplyFilter(*this, expr.name, target, args);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value target, Eval(*expr.children[0]));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(expr, 1, &args).status());
      ASSIGN_OR_RETURN(bool holds, ApplyTest(*this, expr.name, target, args));
      return Value(holds != expr.negated);
    }
    case Expr::Kind::kNegate:
    case Expr::Kind::kPlus: {
      ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0]));
      if (v.IsUndefined()) return UndefinedError(v);
      if (!v.IsNumber()) {
        return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ",
                                                       expr.kind == Expr::Kind::kNegate ? "-" : "+",
                                                       ": '", v.TypeName(), "'"));
      }
      if (expr.kind == Expr::Kind::kPlus) return v.IsBool() ? Value(v.AsInteger()) : v;
      if (v.IsFloat()) return Value(-v.AsDouble());
      ASSIGN_OR_RETURN(int64_t negated, Negate(v.AsInteger()));
      return Value(negated);
    }
    case Expr::Kind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0]));
      return Value(!v.Truthy());
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0]));
      // Python returns the deciding operand itself.
      if (left.Truthy() == (expr.kind == Expr::Kind::kOr)) return left;
      return Eval(*expr.children[1]);
    }
    case Expr::Kind::kBinary: {
      ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0]));
      ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1]));
      return BinaryOp(*this, expr.name, left, right);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(expr);
    case Expr::Kind::kConditional: {
      ASSIGN_OR_RETURN(Value condition, Eval(*expr.children[1]));
      if (condition.Truthy()) return Eval(*expr.children[0]);
      if (expr.children[2]) return Eval(*expr.children[2]);
      return Value::MakeUndefined("the missing else branch");
    }
  }
  return absl::InternalError("unknown expression");
}

}  // namespace tandem::jinja
