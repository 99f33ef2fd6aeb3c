// Internal to the parser (parser.cc, expression_parser.cc): a cursor over the token stream and
// the expression grammar, with Jinja2's operator precedence. Not a public header.
#ifndef TANDEM_ENGINE_JINJA_EXPRESSION_PARSER_H_
#define TANDEM_ENGINE_JINJA_EXPRESSION_PARSER_H_

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/jinja/ast.h"
#include "engine/jinja/lexer.h"

namespace tandem::jinja {

// Reads `tokens` (borrowed; they outlive the cursor) front to back.
class TokenCursor {
 public:
  explicit TokenCursor(const std::vector<Token>& tokens) : t_(tokens) {}

 protected:
  using Kind = Token::Kind;

  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOperator && Peek(ahead).value == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).value == name;
  }
  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Peek().line, ": ", message));
  }
  absl::Status Expect(std::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", std::string(op), "'", Describe()));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().kind != Kind::kBlockEnd) return Error(absl::StrCat("expected '%}'", Describe()));
    ++pos_;
    return absl::OkStatus();
  }
  std::string Describe() const {
    const Token& t = Peek();
    switch (t.kind) {
      case Kind::kEnd:
        return ", found the end of the template";
      case Kind::kBlockEnd:
        return ", found '%}'";
      case Kind::kVariableEnd:
        return ", found '}}'";
      default:
        return absl::StrCat(", found '", t.value, "'");
    }
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != Kind::kName) return Error(absl::StrCat("expected a name", Describe()));
    return Next().value;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;  // current nesting of blocks and expressions, bounded by kMaxParseDepth
};

// Expressions: ParseTuple/ParseExpression consume one and return its tree; errors name the line.
class ExpressionParser : public TokenCursor {
 public:
  using TokenCursor::TokenCursor;

 protected:
  ExprPtr MakeExpr(Expr::Kind kind, int line) const;
  // `a, b` without brackets is a tuple (rendered as a list).
  absl::StatusOr<ExprPtr> ParseTuple(bool allow_conditional = true);
  absl::StatusOr<ExprPtr> ParseExpression(bool allow_conditional = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> Binary(const std::string& op, ExprPtr left, ExprPtr right, int line);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  ExprPtr Literal(Value v, int line) const;
  // Arguments of a call, filter or test after its '('.
  absl::Status ParseCallArgs(Expr* e);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
};

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_EXPRESSION_PARSER_H_
