#include "engine/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/jinja/expression_parser.h"

namespace tandem::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  absl::StatusOr<Body> ParseTemplate() {
    ASSIGN_OR_RETURN(Body body, ParseBody({}));
    if (!block_end_name_.empty()) {
      return Error(absl::StrCat("unexpected '", block_end_name_, "'"));
    }
    return body;
  }

 private:
  // Statements until one of `end_names` opens a block (left in block_end_name_, its `{%` and
  // name consumed).
  absl::StatusOr<Body> ParseBody(const std::set<std::string>& end_names) {
    if (++depth_ > kMaxParseDepth) return Error("blocks nested too deeply");
    Body body;
    block_end_name_.clear();
    while (true) {
      const Token& t = Peek();
      if (t.kind == Kind::kEnd) {
        for (const std::string& end : end_names) {
          if (end.rfind("end", 0) == 0) return Error(absl::StrCat("missing '", end, "'"));
        }
        break;
      }
      if (t.kind == Kind::kText) {
        auto node = MakeNode(Node::Kind::kText);
        node->text = Next().value;
        body.push_back(std::move(node));
      } else if (t.kind == Kind::kVariableBegin) {
        ++pos_;
        auto node = MakeNode(Node::Kind::kOutput);
        ASSIGN_OR_RETURN(node->expr, ParseTuple());
        if (Peek().kind != Kind::kVariableEnd)
          return Error(absl::StrCat("expected '}}'", Describe()));
        ++pos_;
        body.push_back(std::move(node));
      } else if (t.kind == Kind::kBlockBegin) {
        ++pos_;
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (end_names.count(name)) {
          block_end_name_ = name;
          break;
        }
        ASSIGN_OR_RETURN(NodePtr node, ParseStatement(name));
        body.push_back(std::move(node));
      } else {
        return Error(absl::StrCat("unexpected token", Describe()));
      }
    }
    --depth_;
    return body;
  }

  NodePtr MakeNode(Node::Kind kind) const {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = Peek().line;
    return node;
  }

  absl::StatusOr<NodePtr> ParseStatement(const std::string& name) {
    if (name == "if") return ParseIf();
    if (name == "for") return ParseFor();
    if (name == "set") return ParseSet();
    if (name == "macro") return ParseMacro();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0)
        return Error(absl::StrCat("'", std::string(name), "' outside a for loop"));
      auto node = MakeNode(name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
      RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      return Error(absl::StrCat("unexpected '{% ", std::string(name), " %}'"));
    }
    static const std::set<std::string> kKnownUnsupported = {
        "extends", "include",    "import", "from",       "block", "call",     "filter",
        "with",    "autoescape", "do",     "generation", "trans", "pluralize"};
    if (kKnownUnsupported.count(name)) {
      return Error(absl::StrCat("unsupported tag '{% ", std::string(name), " %}'"));
    }
    return Error(absl::StrCat("unknown tag '", std::string(name), "'"));
  }

  absl::StatusOr<NodePtr> ParseIf() {
    auto node = MakeNode(Node::Kind::kIf);
    ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple());
    RETURN_IF_ERROR(ExpectBlockEnd());
    while (true) {
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}));
      node->branches.emplace_back(std::move(condition), std::move(body));
      const std::string end = block_end_name_;
      if (end == "endif") break;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(Body else_body, ParseBody({"endif"}));
        node->branches.emplace_back(nullptr, std::move(else_body));
        break;
      }
      ASSIGN_OR_RETURN(condition, ParseTuple());
      RETURN_IF_ERROR(ExpectBlockEnd());
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    block_end_name_.clear();
    return node;
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = IsOp("(");
    if (parenthesized) ++pos_;
    do {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets.push_back(name);
    } while (IsOp(",") && (++pos_, true));
    if (parenthesized) RETURN_IF_ERROR(Expect(")"));
    return targets;
  }

  absl::StatusOr<NodePtr> ParseFor() {
    auto node = MakeNode(Node::Kind::kFor);
    ASSIGN_OR_RETURN(node->targets, ParseTargets());
    if (!IsName("in")) return Error(absl::StrCat("expected 'in'", Describe()));
    ++pos_;
    ASSIGN_OR_RETURN(node->expr, ParseTuple(/*allow_conditional=*/false));
    if (IsName("if")) {
      ++pos_;
      ASSIGN_OR_RETURN(node->filter, ParseExpression());
    }
    if (IsName("recursive")) return Error("unsupported 'recursive' for loop");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    ASSIGN_OR_RETURN(node->body, ParseBody({"else", "endfor"}));
    --loop_depth_;
    if (block_end_name_ == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    block_end_name_.clear();
    return node;
  }

  absl::StatusOr<NodePtr> ParseSet() {
    auto node = MakeNode(Node::Kind::kSet);
    if (Peek().kind == Kind::kName && IsOp(".", 1)) {
      node->targets.push_back(Next().value);
      ++pos_;
      ASSIGN_OR_RETURN(node->attribute, ExpectName());
    } else {
      ASSIGN_OR_RETURN(node->targets, ParseTargets());
    }
    if (Peek().kind == Kind::kBlockEnd) {
      if (!node->attribute.empty() || node->targets.size() != 1) {
        return Error("a block set takes one plain name");
      }
      ++pos_;
      node->kind = Node::Kind::kSetBlock;
      ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}));
      RETURN_IF_ERROR(ExpectBlockEnd());
      block_end_name_.clear();
      return node;
    }
    if (IsOp("|")) return Error("unsupported filtered block set");
    RETURN_IF_ERROR(Expect("="));
    ASSIGN_OR_RETURN(node->expr, ParseTuple());
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  absl::StatusOr<NodePtr> ParseMacro() {
    auto node = MakeNode(Node::Kind::kMacro);
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    node->targets.push_back(name);
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!node->params.empty()) RETURN_IF_ERROR(Expect(","));
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr default_value;
      if (IsOp("=")) {
        ++pos_;
        ASSIGN_OR_RETURN(default_value, ParseExpression());
      }
      node->params.emplace_back(param, std::move(default_value));
    }
    ++pos_;
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    ASSIGN_OR_RETURN(node->body, ParseBody({"endmacro"}));
    loop_depth_ = saved_loop_depth;
    RETURN_IF_ERROR(ExpectBlockEnd());
    block_end_name_.clear();
    return node;
  }

  int loop_depth_ = 0;
  std::string block_end_name_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).ParseTemplate();
}

}  // namespace tandem::jinja
