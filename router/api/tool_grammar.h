// The constraint that enforces tool_choice "required" or a named function, and under "auto" strict
// functions and parallel_tool_calls false (internal to router/api): a structural tag
// (engine/grammar/structural_tag.h) with one structure per callable function, begin and end the
// family's call syntax around arguments that follow the function's `parameters` schema, so even a
// small model writes a call that parses and validates.
//
// Shapes: kQwen "<tool_call>\n{\"name\": \"<fn>\", \"arguments\": <args>}\n</tool_call>", one
// call for a named choice or without parallel_tool_calls, else one or more separated by "\n";
// kLlama3 "{\"name\": \"<fn>\", \"parameters\": <args>}", one call. The arguments are JSON as
// engine/grammar/json_schema_compiler.h writes it (compact or pretty-printed), read with the
// structural tag's options: an object that lists properties admits no others unless
// additionalProperties says so, and format / nullable / strict are ignored. An absent or empty
// `parameters` allows any JSON object.
//
// Thread-safety: pure function.
#ifndef TANDEM_ROUTER_API_TOOL_GRAMMAR_H_
#define TANDEM_ROUTER_API_TOOL_GRAMMAR_H_

#include "absl/status/statusor.h"
#include "engine/grammar/constraint.h"
#include "router/api/chat_tools.h"
#include "router/api/request.h"

namespace tandem::router::api_internal {

// Whether tool_choice "auto" needs the constraint below: a function of `tools` is strict, or
// `parallel_tool_calls` is false.
bool AutoToolsNeedGrammar(const ChatTools& tools, bool parallel_tool_calls);

// The constraint for `tools` under `tools.choice` (kRequired, kNamed or kAuto) in `syntax` (not
// kNone). kAuto (for a request with a strict function or without parallel_tool_calls: see
// AutoToolsNeedGrammar): free text in which a call, once its trigger is written, follows the
// syntax, a strict function's arguments its parameters and any other's any JSON object; without
// parallel_tool_calls (and always for kLlama3) the answer ends with the first call.
// `allow_thinking` (kQwen, not kAuto: a Qwen3 template with thinking enabled): the calls may be
// preceded by one "<think>...</think>" block and up to two line breaks, as SGLang's structural
// tags allow; with `thinking_open` too (the prompt ended inside a <think> block), the block's
// text and "</think>" must come first, its "<think>" optional. The tag is compiled here, once: a
// parameters schema the compiler cannot enforce is an InvalidArgument naming it
// ("tools[0].function.parameters: json_schema: unsupported keyword 'multipleOf' at ..."), any other
// compile error (the grammar too large) one prefixed "tool_choice: ". Set the result with
// SetCompiledGrammarConstraint (sampling_params.h).
absl::StatusOr<engine::grammar::Constraint> ToolCallConstraint(ToolCallSyntax syntax,
                                                               const ChatTools& tools,
                                                               bool parallel_tool_calls,
                                                               bool allow_thinking = false,
                                                               bool thinking_open = false);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_TOOL_GRAMMAR_H_
