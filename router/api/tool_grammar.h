// The grammar that enforces tool_choice "required" or a named function (internal to
// router/api): an EBNF (SGLang's dialect, engine/grammar/ebnf_compiler.h) of the family's call
// syntax whose arguments follow each function's `parameters` schema, so even a small model
// writes a call that parses and validates.
//
// Shapes: kQwen "<tool_call>\n{\"name\": \"<fn>\", \"arguments\": <args>}\n</tool_call>", one
// call for a named choice or without parallel_tool_calls, else one or more separated by "\n";
// kLlama3 "{\"name\": \"<fn>\", \"parameters\": <args>}", one call. Arguments are compact JSON
// (a single optional space after ':' and ','), properties in the schema's order, every listed
// property written (optional ones too, which the schema allows) and no others.
//
// Schema subset: type (object, array, string, number, integer, boolean, null, or a list),
// properties, required, additionalProperties, items, minItems, maxItems, enum, const, anyOf, oneOf
// (as anyOf: a value matching several branches is accepted), $ref to a JSON pointer within the
// parameters schema ("#", "#/$defs/...", "#/definitions/...", recursion allowed), minLength and
// maxLength (exact, in characters, up to 1000), pattern (router/api/pattern_ebnf.h: search
// semantics, not beside minLength/maxLength), minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (exact for integers, as a digit-by-digit grammar of the range; for numbers only
// the sign is enforced: a lower bound >= 0 forbids a minus sign, an upper bound below 0 requires
// one); annotations (description, title, default, examples, $schema, $comment, format, $defs and
// definitions themselves) ignored. An absent or empty schema allows any JSON value (an object
// for the arguments). Any other keyword (multipleOf, patternProperties, ...) is an InvalidArgument
// naming the tool and keyword. Integers have at most 18 digits, exponents at most 2.
//
// Thread-safety: pure function.
#ifndef TANDEM_ROUTER_API_TOOL_GRAMMAR_H_
#define TANDEM_ROUTER_API_TOOL_GRAMMAR_H_

#include <string>

#include "absl/status/statusor.h"
#include "router/api/chat_tools.h"
#include "router/api/request.h"

namespace tandem::router::api_internal {

// The EBNF for `tools` under `tools.choice` (kRequired or kNamed) in `syntax` (not kNone).
// `allow_thinking` (kQwen only: a Qwen3 template with thinking enabled): the calls may be
// preceded by one "<think>...</think>" block (text without "</think>", as the reasoning parser
// splits it) and up to two line breaks, as SGLang's structural tags allow.
absl::StatusOr<std::string> ToolCallGrammar(ToolCallSyntax syntax, const ChatTools& tools,
                                            bool parallel_tool_calls, bool allow_thinking = false);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_TOOL_GRAMMAR_H_
