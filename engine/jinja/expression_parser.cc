#include "engine/jinja/expression_parser.h"

#include <charconv>
#include <cstdlib>

#include "common/status.h"
#include "engine/jinja/builtins.h"
#include "engine/jinja/parser.h"

namespace tandem::jinja {

ExprPtr ExpressionParser::MakeExpr(Expr::Kind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

// `a, b` without brackets is a tuple (rendered as a list).
absl::StatusOr<ExprPtr> ExpressionParser::ParseTuple(bool allow_conditional) {
  const int line = Peek().line;
  ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(allow_conditional));
  if (!IsOp(",")) return first;
  auto list = MakeExpr(Expr::Kind::kList, line);
  list->name = "tuple";
  list->children.push_back(std::move(first));
  while (IsOp(",")) {
    ++pos_;
    if (Peek().kind == Kind::kBlockEnd || Peek().kind == Kind::kVariableEnd) break;
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(allow_conditional));
    list->children.push_back(std::move(item));
  }
  return list;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseExpression(bool allow_conditional) {
  if (++depth_ > kMaxParseDepth) return Error("expression nested too deeply");
  const int line = Peek().line;
  ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (allow_conditional && IsName("if")) {
    ++pos_;
    auto cond = MakeExpr(Expr::Kind::kConditional, line);
    ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      ++pos_;
      ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->children.push_back(std::move(expr));
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  --depth_;
  return expr;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseOr() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    auto e = MakeExpr(Expr::Kind::kOr, Next().line);
    ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseAnd() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    auto e = MakeExpr(Expr::Kind::kAnd, Next().line);
    ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseNot() {
  if (IsName("not")) {
    if (++depth_ > kMaxParseDepth) return Error("expression nested too deeply");
    auto e = MakeExpr(Expr::Kind::kNot, Next().line);
    ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    e->children.push_back(std::move(operand));
    --depth_;
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseCompare() {
  const int line = Peek().line;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  auto e = MakeExpr(Expr::Kind::kCompare, line);
  while (true) {
    std::string op;
    if (Peek().kind == Kind::kOperator &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
      op = Next().value;
    } else if (IsName("in")) {
      ++pos_;
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      pos_ += 2;
      op = "notin";
    } else {
      break;
    }
    ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    e->ops.push_back(op);
    e->children.push_back(std::move(operand));
  }
  if (e->ops.empty()) return first;
  e->children.insert(e->children.begin(), std::move(first));
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::Binary(const std::string& op, ExprPtr left, ExprPtr right,
                                                 int line) {
  auto e = MakeExpr(Expr::Kind::kBinary, line);
  e->name = op;
  e->children.push_back(std::move(left));
  e->children.push_back(std::move(right));
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath1() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const Token& op = Next();
    ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    ASSIGN_OR_RETURN(left, Binary(op.value, std::move(left), std::move(right), op.line));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseConcat() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const Token& op = Next();
    ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    ASSIGN_OR_RETURN(left, Binary("~", std::move(left), std::move(right), op.line));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath2() {
  ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& op = Next();
    ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    ASSIGN_OR_RETURN(left, Binary(op.value, std::move(left), std::move(right), op.line));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePow() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const Token& op = Next();
    ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    ASSIGN_OR_RETURN(left, Binary("**", std::move(left), std::move(right), op.line));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseUnary(bool with_filter) {
  if (++depth_ > kMaxParseDepth) return Error("expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& op = Next();
    node = MakeExpr(op.value == "-" ? Expr::Kind::kNegate : Expr::Kind::kPlus, op.line);
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->children.push_back(std::move(operand));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  --depth_;
  return node;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePrimary() {
  const Token& t = Peek();
  switch (t.kind) {
    case Kind::kName: {
      ++pos_;
      if (t.value == "true" || t.value == "True") return Literal(Value(true), t.line);
      if (t.value == "false" || t.value == "False") return Literal(Value(false), t.line);
      if (t.value == "none" || t.value == "None") return Literal(Value::None(), t.line);
      auto e = MakeExpr(Expr::Kind::kName, t.line);
      e->name = t.value;
      return e;
    }
    case Kind::kString: {
      ++pos_;
      std::string s = t.value;
      while (Peek().kind == Kind::kString) s += Next().value;  // adjacent literals join
      return Literal(Value(std::move(s)), t.line);
    }
    case Kind::kInteger: {
      ++pos_;
      int64_t v = 0;
      const auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
      if (r.ec != std::errc()) return Literal(Value(std::strtod(t.value.c_str(), nullptr)), t.line);
      return Literal(Value(v), t.line);
    }
    case Kind::kFloat:
      ++pos_;
      return Literal(Value(std::strtod(t.value.c_str(), nullptr)), t.line);
    case Kind::kOperator:
      if (t.value == "(") {
        ++pos_;
        if (IsOp(")")) {
          ++pos_;
          auto empty = MakeExpr(Expr::Kind::kList, t.line);
          empty->name = "tuple";
          return empty;
        }
        ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple());
        RETURN_IF_ERROR(Expect(")"));
        return inner;
      }
      if (t.value == "[") {
        ++pos_;
        auto list = MakeExpr(Expr::Kind::kList, t.line);
        while (!IsOp("]")) {
          if (!list->children.empty()) RETURN_IF_ERROR(Expect(","));
          if (IsOp("]")) break;
          ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
          list->children.push_back(std::move(item));
        }
        ++pos_;
        return list;
      }
      if (t.value == "{") {
        ++pos_;
        auto dict = MakeExpr(Expr::Kind::kDict, t.line);
        while (!IsOp("}")) {
          if (!dict->children.empty()) RETURN_IF_ERROR(Expect(","));
          if (IsOp("}")) break;
          ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
          RETURN_IF_ERROR(Expect(":"));
          ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
          dict->children.push_back(std::move(key));
          dict->children.push_back(std::move(value));
        }
        ++pos_;
        return dict;
      }
      break;
    default:
      break;
  }
  return Error(absl::StrCat("unexpected token", Describe()));
}

ExprPtr ExpressionParser::Literal(Value v, int line) const {
  auto e = MakeExpr(Expr::Kind::kLiteral, line);
  e->literal = std::move(v);
  return e;
}

// Arguments of a call, filter or test after its '('.
absl::Status ExpressionParser::ParseCallArgs(Expr* e) {
  while (!IsOp(")")) {
    if (e->children.size() > 1 || !e->keyword.empty()) RETURN_IF_ERROR(Expect(","));
    if (IsOp(")")) break;
    if (IsOp("*") || IsOp("**")) return Error("unsupported *args/**kwargs in a call");
    if (Peek().kind == Kind::kName && IsOp("=", 1)) {
      std::string key = Next().value;
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      e->keyword.emplace_back(std::move(key), std::move(value));
    } else {
      if (!e->keyword.empty()) return Error("positional argument after keyword argument");
      ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
      e->children.push_back(std::move(arg));
    }
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      const int line = Next().line;
      auto e = MakeExpr(Expr::Kind::kAttribute, line);
      if (Peek().kind == Kind::kInteger) {
        e->kind = Expr::Kind::kItem;
        e->children.push_back(std::move(node));
        const std::string& digits = Next().value;
        int64_t index = 0;
        const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), index);
        // Past int64 (Python would have a big int): no item has such an index.
        e->children.push_back(Literal(
            r.ec == std::errc() ? Value(index) : Value(std::strtod(digits.c_str(), nullptr)),
            line));
      } else {
        ASSIGN_OR_RETURN(e->name, ExpectName());
        e->children.push_back(std::move(node));
      }
      node = std::move(e);
    } else if (IsOp("[")) {
      const int line = Next().line;
      ExprPtr parts[3];
      int colons = 0;
      while (!IsOp("]")) {
        if (IsOp(":")) {
          if (++colons > 2) return Error("too many ':' in a subscript");
          ++pos_;
          continue;
        }
        if (parts[colons]) return Error(absl::StrCat("expected ']'", Describe()));
        ASSIGN_OR_RETURN(parts[colons], ParseExpression());
      }
      ++pos_;
      auto e = MakeExpr(colons == 0 ? Expr::Kind::kItem : Expr::Kind::kSlice, line);
      e->children.push_back(std::move(node));
      if (colons == 0) {
        if (!parts[0]) return Error("empty subscript");
        e->children.push_back(std::move(parts[0]));
      } else {
        for (auto& part : parts) e->children.push_back(std::move(part));
      }
      node = std::move(e);
    } else if (IsOp("(")) {
      const int line = Next().line;
      auto e = MakeExpr(Expr::Kind::kCall, line);
      e->children.push_back(std::move(node));
      RETURN_IF_ERROR(ParseCallArgs(e.get()));
      node = std::move(e);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      const int line = Next().line;
      auto e = MakeExpr(Expr::Kind::kFilter, line);
      ASSIGN_OR_RETURN(e->name, ExpectName());
      if (!IsKnownFilter(e->name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unsupported filter '", e->name, "'"));
      }
      e->children.push_back(std::move(node));
      if (IsOp("(")) {
        ++pos_;
        RETURN_IF_ERROR(ParseCallArgs(e.get()));
      }
      ASSIGN_OR_RETURN(node, ParsePostfix(std::move(e)));
    } else if (IsName("is")) {
      const int line = Next().line;
      auto e = MakeExpr(Expr::Kind::kTest, line);
      if (IsName("not")) {
        ++pos_;
        e->negated = true;
      }
      ASSIGN_OR_RETURN(e->name, ExpectName());
      if (!IsKnownTest(e->name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unsupported test '", e->name, "'"));
      }
      e->children.push_back(std::move(node));
      if (IsOp("(")) {
        ++pos_;
        RETURN_IF_ERROR(ParseCallArgs(e.get()));
      } else if (Peek().kind == Kind::kString || Peek().kind == Kind::kInteger ||
                 Peek().kind == Kind::kFloat ||
                 (Peek().kind == Kind::kName && !IsName("and") && !IsName("or") && !IsName("if") &&
                  !IsName("else") && !IsName("is") && !IsName("in") && !IsName("not"))) {
        // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
        ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        e->children.push_back(std::move(arg));
      }
      node = std::move(e);
    } else {
      return node;
    }
  }
}

}  // namespace tandem::jinja
