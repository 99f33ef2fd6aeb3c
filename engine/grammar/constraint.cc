#include "engine/grammar/constraint.h"

#include "engine/grammar/ebnf_compiler.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/grammar/structural_tag.h"

namespace tandem::engine::grammar {

absl::StatusOr<GrammarPtr> CompileConstraint(const Constraint& constraint) {
  switch (constraint.kind) {
    case Constraint::Kind::kNone:
      return absl::InvalidArgumentError("no grammar constraint");
    case Constraint::Kind::kJsonSchema:
      return CompileJsonSchema(constraint.text);
    case Constraint::Kind::kJsonObject:
      return CompileAnyJsonObject();
    case Constraint::Kind::kRegex:
      return CompileRegex(constraint.text);
    case Constraint::Kind::kEbnf:
      return CompileEbnf(constraint.text);
    case Constraint::Kind::kStructuralTag:
      return CompileStructuralTag(constraint.text, constraint.tag_form, constraint.allow_thinking,
                                  constraint.thinking_open);
  }
  return absl::InvalidArgumentError("unknown grammar constraint");
}

}  // namespace tandem::engine::grammar
