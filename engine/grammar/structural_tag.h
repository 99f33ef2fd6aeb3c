// SGLang's structural tag (xgrammar's structures and triggers) compiled into the byte-level
// grammar: literal begin and end strings around JSON values that a schema constrains, within free
// text or, for tool_choice "required" and named tools, as the whole output.
//
// The tag is a JSON object {"type": "structural_tag" (optional), "structures": [{"begin": B,
// "schema": S, "end": E}, ...], "triggers": [T, ...]}. A structure's text is B, then a JSON value
// S accepts (json_schema_compiler.h with kStructuralTagSchemaOptions; no "schema": any JSON
// value), then E.
//
// Forms:
//   kTriggered (SGLang's structural_tag): free text in which no trigger occurs, except that
//     where the output completes a trigger, one of the structures whose begin starts with that
//     trigger follows (the rest of its begin, its value, its end), and then free text again. The
//     output may end anywhere in the free text (within a partial trigger too), not inside a
//     structure.
//   kTriggeredAtMostOne: as kTriggered, but the output ends with the first structure's end
//     (tool_choice "auto" without parallel_tool_calls: free text, then at most one call).
//   kOne: exactly one structure and nothing else.
//   kOneOrMore: one or more structures separated by "\n".
// `allow_thinking` (kOne and kOneOrMore): the structures may be preceded by one "<think>" block
// (text without "</think>", then "</think>" and up to two line breaks), Qwen3's reasoning as the
// reasoning parser splits it off. `thinking_open` (with allow_thinking): the prompt left the model
// inside that block (a template ending with "<think>"), so the block is required and its
// "<think>" optional: text without "</think>", "</think>", up to two line breaks, the structures.
//
// Validation, an InvalidArgument naming the field ("structural_tag: structures[1].end must be a
// string"): 1..kMaxStructures structures; 1..kMaxTriggers triggers of 1..kMaxTriggerBytes bytes,
// none a substring of another (so at most one trigger completes at any byte); begin and end up to
// kMaxTagBytes; every begin starts with a trigger; no other keys. The schemas' errors are
// CompileJsonSchema's prefixed with their structure; the grammar is bounded by GrammarLimits
// (ResourceExhausted when too large).
//
// Thread-safety: pure functions.
#ifndef TANDEM_ENGINE_GRAMMAR_STRUCTURAL_TAG_H_
#define TANDEM_ENGINE_GRAMMAR_STRUCTURAL_TAG_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema_compiler.h"

namespace tandem::engine::grammar {

inline constexpr size_t kMaxStructures = 256;
inline constexpr size_t kMaxTriggers = 16;
inline constexpr size_t kMaxTriggerBytes = 64;
inline constexpr size_t kMaxTagBytes = 1024;

enum class StructuralTagForm { kTriggered, kOne, kOneOrMore, kTriggeredAtMostOne };

// How the structures' schemas are read (xgrammar's strict mode; integers of at most 18 digits,
// so a tool call's integer arguments stay integers for every JSON parser). A caller that builds a
// tag from schemas of its own maps a schema's error back to its source by the error's prefix,
// "structural_tag: structures[i].schema: ".
inline constexpr JsonSchemaOptions kStructuralTagSchemaOptions{
    .closed_objects = true, .lenient_annotations = true, .int64_integers = true};

// `tag_json` is the tag's JSON text.
absl::StatusOr<GrammarPtr> CompileStructuralTag(std::string_view tag_json, StructuralTagForm form,
                                                bool allow_thinking, bool thinking_open = false,
                                                const GrammarLimits& limits = GrammarLimits());

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_STRUCTURAL_TAG_H_
