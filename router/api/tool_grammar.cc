#include "router/api/tool_grammar.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/grammar/json_schema_compiler.h"

namespace tandem::router::api_internal {

absl::StatusOr<engine::grammar::Constraint> ToolCallConstraint(ToolCallSyntax syntax,
                                                               const ChatTools& tools,
                                                               bool parallel_tool_calls,
                                                               bool allow_thinking) {
  using engine::grammar::StructuralTagForm;
  const bool llama3 = syntax == ToolCallSyntax::kLlama3;
  nlohmann::ordered_json structures = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const nlohmann::ordered_json& function = tools.tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    nlohmann::ordered_json schema = {{"type", "object"}};
    if (const auto it = function.find("parameters"); it != function.end() && !it->empty()) {
      schema = *it;
      // Checked here so that the error names the tool, not the structure built from it.
      engine::grammar::GrammarBuilder scratch;
      RETURN_IF_ERROR(engine::grammar::CompileJsonSchemaInto(
                          scratch, schema.dump(), "", engine::grammar::kStructuralTagSchemaOptions)
                          .status(),
                      absl::StrCat("tools[", i, "].function.parameters: "));
    }
    // Tool names are [A-Za-z0-9_-]: nothing to escape.
    structures.push_back(
        {{"begin", llama3
                       ? absl::StrCat("{\"name\": \"", name, "\", \"parameters\": ")
                       : absl::StrCat("<tool_call>\n{\"name\": \"", name, "\", \"arguments\": ")},
         {"schema", std::move(schema)},
         {"end", llama3 ? "}" : "}\n</tool_call>"}});
  }
  const nlohmann::ordered_json tag = {{"structures", std::move(structures)},
                                      {"triggers", {llama3 ? "{\"name\": " : "<tool_call>"}}};
  engine::grammar::Constraint constraint;
  constraint.kind = engine::grammar::Constraint::Kind::kStructuralTag;
  constraint.text = tag.dump();
  const bool several = !llama3 && parallel_tool_calls && tools.choice == ToolChoice::kRequired;
  constraint.tag_form = several ? StructuralTagForm::kOneOrMore : StructuralTagForm::kOne;
  constraint.allow_thinking = allow_thinking && !llama3;
  return constraint;
}

}  // namespace tandem::router::api_internal
