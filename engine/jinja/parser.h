// Parser: tokens → syntax tree, for the subset of Jinja2 chat templates use. Everything outside
// that subset (extends/include/import, call blocks, filter blocks, unknown filters or tests, ...)
// is a parse error naming the construct and its line, so a template is either rendered as
// Jinja2 would render it or refused when loaded.
#ifndef TANDEM_ENGINE_JINJA_PARSER_H_
#define TANDEM_ENGINE_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/jinja/ast.h"
#include "engine/jinja/lexer.h"

namespace tandem::jinja {

// Expressions and blocks nested deeper than this are refused (the parser recurses).
inline constexpr int kMaxParseDepth = 128;

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_PARSER_H_
