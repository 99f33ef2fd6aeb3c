// A JSON Schema `pattern` as an EBNF expression (SGLang's dialect, engine/grammar/ebnf_compiler.h)
// over the JSON text of a string's content (internal to router/api; the tool-call grammar uses
// it). Every string the expression accepts decodes to a value the pattern matches with JSON
// Schema's search semantics (without a leading `^` / trailing `$`, anything may precede /
// follow the match).
//
// Syntax: the subset engine/grammar/regex_compiler.h supports (literals, `.`, classes with ranges
// and negation, \d \w \s \D \W \S, \n \r \t \f \v \xHH \x{H..}, escaped punctuation, groups,
// non-capturing and named groups, `|`, the quantifiers `? * + {m} {m,} {m,n}` and their lazy
// forms), with `^` only at the start and `$` only at the end; anything else is an
// InvalidArgument naming the construct and offset. A leading `^` or trailing `$` anchors the
// whole pattern (for `^a|b$` that is stricter than PCRE, which anchors each branch: the
// accepted strings still all match). In the output, `"` and `\` are written as \" and \\ and
// control characters as \n \r \t \b \f or \u00XX.
//
// Thread-safety: pure function.
#ifndef TANDEM_ROUTER_API_PATTERN_EBNF_H_
#define TANDEM_ROUTER_API_PATTERN_EBNF_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::router::api_internal {

// The EBNF expression (parenthesised, no rule definitions; it may refer to the rule `chr`, one
// JSON string character) for the content of a JSON string whose value `pattern` matches.
absl::StatusOr<std::string> PatternEbnf(std::string_view pattern);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_PATTERN_EBNF_H_
