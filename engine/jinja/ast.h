// The syntax tree of a parsed template: expressions (Expr) and statements (Node). Built once by
// the parser, then read-only: any number of renders may walk it concurrently.
#ifndef TANDEM_ENGINE_JINJA_AST_H_
#define TANDEM_ENGINE_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/jinja/value.h"

namespace tandem::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // [children...]; a tuple when name == "tuple"
    kDict,       // {children[0]: children[1], ...}
    kAttribute,  // children[0].name
    kItem,       // children[0][children[1]]
    kSlice,      // children[0][children[1]:children[2]:children[3]] (null parts omitted)
    kCall,       // children[0](children[1..], keyword...)
    kFilter,     // children[0] | name(children[1..], keyword...)
    kTest,       // children[0] is [not] name(children[1..]); `negated`
    kNegate,     // -children[0]
    kPlus,       // +children[0]
    kNot,        // not children[0]
    kBinary,     // children[0] op children[1]: + - * / // % ** ~
    kAnd,        // children[0] and children[1]
    kOr,         // children[0] or children[1]
    kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ... (== != < <= > >= in notin)
    kConditional,  // children[0] if children[1] else children[2] (children[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;  // name, attribute, filter, test or binary operator
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keyword;  // call/filter keyword arguments
  std::vector<std::string> ops;                          // kCompare
  bool negated = false;                                  // kTest
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body)...; a null condition is the else branch
    kFor,       // for targets in expr [if filter] body [else else_body]
    kSet,       // set targets = expr, or set target.attribute = expr
    kSetBlock,  // set target %} body {% endset
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;                                       // kFor: the `if` clause
  std::vector<std::string> targets;                     // kFor/kSet/kSetBlock; kMacro: name
  std::string attribute;                                // kSet on a namespace: `ns.attribute`
  std::vector<std::pair<ExprPtr, Body>> branches;       // kIf
  Body body;                                            // kFor/kSetBlock/kMacro
  Body else_body;                                       // kFor
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
};

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_AST_H_
