// Regular expressions (the common PCRE subset) compiled into the byte-level grammar.
//
// Supported: literals (UTF-8), `.` (any character but \n), classes `[a-z]`, `[^...]` with
// ranges and the escapes below, `\d \w \s \D \W \S`, `\n \r \t \f \v \xHH \x{H..}`, escaped
// punctuation, alternation, groups `( )`, `(?: )`, named groups `(?<n> )` / `(?P<n> )`, and the
// quantifiers `? * + {m} {m,} {m,n}` (lazy forms `*?` etc. match the same language). Classes
// are over code points, as PCRE2 with PCRE2_UTF. The whole output must match: `^` at the start
// and `$` at the end are accepted and change nothing. Everything else (backreferences,
// lookaround, `\b`, possessive quantifiers, inline flags, POSIX classes, `^`/`$` elsewhere) is
// an InvalidArgument error naming the construct and its offset.
#ifndef TANDEM_ENGINE_GRAMMAR_REGEX_COMPILER_H_
#define TANDEM_ENGINE_GRAMMAR_REGEX_COMPILER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/utf8_class.h"

namespace tandem::engine::grammar {

struct RegexOptions {
  // The pattern describes the value of a JSON string (a JSON Schema `pattern`): the grammar
  // matches its JSON-escaped form (`"` as \", controls as \n, \t, ... or \u00XX), and the
  // pattern has search semantics: without a leading `^` / trailing `$`, any characters may
  // precede / follow the match.
  bool json_string_content = false;
};

// The pattern as a sequence of `builder`'s symbols; errors name the construct.
absl::StatusOr<Sequence> CompileRegexInto(GrammarBuilder& builder, std::string_view pattern,
                                          const RegexOptions& options);

// A grammar whose language is the strings `pattern` fully matches.
absl::StatusOr<GrammarPtr> CompileRegex(std::string_view pattern,
                                        const GrammarLimits& limits = GrammarLimits());

// One character of JSON string content whose decoded value is in `normalized`: the character
// itself where JSON allows it raw, else its escape.
Symbol JsonStringCharClass(GrammarBuilder& builder, const CodepointRanges& normalized);

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_REGEX_COMPILER_H_
