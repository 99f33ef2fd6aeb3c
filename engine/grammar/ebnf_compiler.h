// EBNF grammars in SGLang's dialect (xgrammar's GBNF-like EBNF) compiled into the byte-level
// grammar.
//
//   root ::= "{" ws pair ("," ws pair)* "}"   # comments run to the end of the line
//   pair ::= [a-z]+ ws ":" ws ( "true" | "false" )
//   ws   ::= [ \t\n]*
//
// Supported: rules `name ::= body` (names of letters, digits, `_`, `-`, `.`; a rule ends where
// the next `name ::=` begins), double- or single-quoted strings with the escapes
// \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH, character classes `[a-z]` and negated `[^...]`
// over code points, grouping, `|`, the quantifiers `* + ? {m} {m,} {m,n}`, and references to
// rules defined anywhere in the text. The start rule is `root`. Undefined or duplicate rules,
// a missing root, lookahead `(= ...)` and any other syntax are InvalidArgument errors with
// the line and column.
#ifndef TANDEM_ENGINE_GRAMMAR_EBNF_COMPILER_H_
#define TANDEM_ENGINE_GRAMMAR_EBNF_COMPILER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace tandem::engine::grammar {

absl::StatusOr<GrammarPtr> CompileEbnf(std::string_view text,
                                       const GrammarLimits& limits = GrammarLimits());

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_EBNF_COMPILER_H_
