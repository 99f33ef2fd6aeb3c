#include "engine/jinja/template.h"

#include "common/status.h"
#include "engine/jinja/lexer.h"
#include "engine/jinja/parser.h"

namespace tandem::jinja {

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, LexerOptions{}));
  ASSIGN_OR_RETURN(Body body, jinja::Parse(tokens));
  return std::unique_ptr<Template>(new Template(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Dict& variables,
                                             const RenderOptions& options) const {
  Interpreter interp(options, variables);
  return interp.Render(body_);
}

}  // namespace tandem::jinja
