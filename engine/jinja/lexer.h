// Lexer: Jinja2 template source → a flat token stream, applying the whitespace rules of
// Jinja2's own lexer with the settings Hugging Face renders chat templates with
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): `-` strips whitespace
// beside a tag, `+` keeps it, comments and `{% raw %}` are resolved here.
//
// Stateless; Tokenize may be called from any thread.
#ifndef TANDEM_ENGINE_JINJA_LEXER_H_
#define TANDEM_ENGINE_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::jinja {

struct Token {
  enum class Kind {
    kText,           // literal template text (value: the text)
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,           // identifier or keyword (value: the name)
    kString,         // string literal (value: decoded contents)
    kInteger,        // value: the digits
    kFloat,          // value: the literal
    kOperator,       // value: the operator, e.g. "==" or "("
    kEnd,            // end of the template
  };
  Kind kind;
  std::string value;
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors (unclosed tags, comments or strings, characters no expression may contain) name the
// line.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_LEXER_H_
