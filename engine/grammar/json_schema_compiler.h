// JSON Schema (the OpenAI structured-output subset) compiled into the byte-level grammar.
//
// Supported keywords: type (object, array, string, number, integer, boolean, null, or a list of
// them), properties, required, additionalProperties (absent/true, false, or a schema), enum,
// const, items, minItems, maxItems, anyOf, oneOf (compiled as anyOf: keep its branches
// disjoint), allOf with one member, $ref to a JSON pointer within the document (`#`,
// `#/$defs/...`, `#/definitions/...`; recursion allowed), pattern (search semantics, as JSON
// Schema defines it), minLength, maxLength (in characters, up to GrammarLimits::max_repeat),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum (a schema with only these is a number).
// Integer bounds are exact (a digit-by-digit grammar of the range; a bounded side has at most 18
// digits, a bound beyond that is clamped to it; CompileJsonSchema bounds an unbounded side at 18
// digits too, so a typed client parsing into int64 can read every integer); number bounds are
// enforced through the sign only (a lower bound >= 0 forbids a minus sign, maximum < 0 or
// exclusiveMaximum <= 0 requires a non-zero negative number, bounds that leave no sign are an
// error), the rest of their range is not. Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword, or a
// combination the compiler cannot express exactly (pattern with a length bound, anyOf beside type),
// is an InvalidArgument error naming the keyword and its JSON pointer.
//
// Output shape: the value alone (no leading or trailing whitespace); inside it, where JSON allows
// whitespace: nothing, one space, or a line break followed by up to kMaxJsonIndent spaces or
// tabs (compact or pretty-printed JSON, but no runs of blank lines a small model could loop in).
// Properties appear in the order `properties` lists them, required ones always, optional ones or
// not; additional properties (when allowed) follow them, with keys that differ from every listed
// property and use no escapes. Strings use raw characters or the escapes \" \\ \/ \b \f \n \r \t
// and \uXXXX (not surrogates). Integers and numbers are JSON numbers without leading zeros;
// exponents have at most two digits (a number's integer and fraction digits are unbounded, so
// it only fits a double while its integer part has at most 308 digits).
#ifndef TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_COMPILER_H_
#define TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_COMPILER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace tandem::engine::grammar {

inline constexpr int kMaxJsonIndent = 16;

// How schemas embedded in a larger grammar (structural_tag.h: tool calls) are read.
struct JsonSchemaOptions {
  // An object schema that lists `properties` and says nothing of `additionalProperties` allows
  // no other properties (OpenAI's strict function calling, xgrammar's strict mode).
  bool closed_objects = false;
  // format, nullable and strict, which tool definitions carry, are ignored as annotations
  // instead of refused.
  bool lenient_annotations = false;
  // Integers have at most 18 digits on an unbounded side too, so every one fits a signed 64-bit
  // integer (a consumer parsing into int64 or double-free JSON never sees a float).
  bool int64_integers = false;
};

// `schema_json` is the schema's JSON text, read with JsonSchemaOptions::int64_integers (the
// json_schema constraint of every API: response_format, SGLang's json_schema).
absl::StatusOr<GrammarPtr> CompileJsonSchema(std::string_view schema_json,
                                             const GrammarLimits& limits = GrammarLimits());

// `schema_json` compiled into `builder`: the value as a sequence of the builder's symbols, for
// the caller to place in its own rules. Rule names (error messages) start with `rule_prefix`.
// Errors as CompileJsonSchema's; a size limit exceeded shows in builder.Build().
absl::StatusOr<Sequence> CompileJsonSchemaInto(GrammarBuilder& builder,
                                               std::string_view schema_json,
                                               std::string_view rule_prefix,
                                               const JsonSchemaOptions& options);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
absl::StatusOr<GrammarPtr> CompileAnyJsonObject(const GrammarLimits& limits = GrammarLimits());

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_COMPILER_H_
