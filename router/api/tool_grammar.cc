#include "router/api/tool_grammar.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "engine/grammar/structural_tag.h"

namespace tandem::router::api_internal {
namespace {

// The tag's compile error in the request's terms: a structure's schema error
// ("structural_tag: structures[k].schema: ...", structural_tag.h) names the tool's parameters,
// anything else (the grammar of all the structures too large, or matching nothing) is
// tool_choice's, naming the tools' parameters it was made from.
absl::Status ToolError(const absl::Status& status, const std::vector<size_t>& tool_of_structure) {
  for (size_t k = 0; k < tool_of_structure.size(); ++k) {
    absl::string_view message = status.message();
    if (absl::ConsumePrefix(&message,
                            absl::StrCat("structural_tag: structures[", k, "].schema: "))) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools[", tool_of_structure[k], "].function.parameters: ", message));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tool_choice: the grammar made from the tools' parameters: ", status.message()));
}

}  // namespace

bool AutoToolsNeedGrammar(const ChatTools& tools, bool parallel_tool_calls) {
  if (!parallel_tool_calls) return true;
  for (const nlohmann::ordered_json& tool : tools.tools) {
    const nlohmann::ordered_json& function = tool["function"];
    const auto strict = function.find("strict");
    if (strict != function.end() && strict->is_boolean() && strict->get<bool>()) return true;
  }
  return false;
}

absl::StatusOr<engine::grammar::Constraint> ToolCallConstraint(ToolCallSyntax syntax,
                                                               const ChatTools& tools,
                                                               bool parallel_tool_calls,
                                                               bool allow_thinking,
                                                               bool thinking_open) {
  using engine::grammar::StructuralTagForm;
  const bool llama3 = syntax == ToolCallSyntax::kLlama3;
  nlohmann::ordered_json structures = nlohmann::ordered_json::array();
  std::vector<size_t> tool_of_structure;  // [structure index] -> index in tools.tools
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const nlohmann::ordered_json& function = tools.tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    nlohmann::ordered_json schema = {{"type", "object"}};
    // Under "auto" only a strict function's arguments follow its parameters (OpenAI's strict
    // function calling); the others are any JSON object.
    const auto strict = function.find("strict");
    const bool enforced = tools.choice != ToolChoice::kAuto ||
                          (strict != function.end() && strict->is_boolean() && strict->get<bool>());
    if (const auto it = function.find("parameters");
        enforced && it != function.end() && !it->empty()) {
      schema = *it;
    }
    tool_of_structure.push_back(i);
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
  const bool several = !llama3 && parallel_tool_calls;
  if (tools.choice == ToolChoice::kAuto) {
    constraint.tag_form =
        several ? StructuralTagForm::kTriggered : StructuralTagForm::kTriggeredAtMostOne;
  } else {
    constraint.tag_form = several && tools.choice == ToolChoice::kRequired
                              ? StructuralTagForm::kOneOrMore
                              : StructuralTagForm::kOne;
  }
  // The triggered forms take thinking as free text already.
  constraint.allow_thinking = allow_thinking && !llama3 && tools.choice != ToolChoice::kAuto;
  constraint.thinking_open = constraint.allow_thinking && thinking_open;
  const absl::StatusOr<engine::grammar::GrammarPtr> compiled =
      engine::grammar::CompileConstraint(constraint);
  if (!compiled.ok()) return ToolError(compiled.status(), tool_of_structure);
  return constraint;
}

}  // namespace tandem::router::api_internal
