#include "router/api/chat_tools.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "router/api/request_common.h"

namespace tandem::router::api_internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr size_t kMaxToolNameBytes = 64;

bool IsToolName(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const OrderedJson* FindOrdered(const OrderedJson& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status CheckTool(const OrderedJson& tool, const std::string& path) {
  if (!tool.is_object()) return absl::InvalidArgumentError(path + " must be an object");
  const OrderedJson* type = FindOrdered(tool, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
    return absl::InvalidArgumentError(path + ".type must be \"function\"");
  }
  const OrderedJson* function = FindOrdered(tool, "function");
  if (function == nullptr || !function->is_object()) {
    return absl::InvalidArgumentError(path + ".function must be an object");
  }
  const OrderedJson* name = FindOrdered(*function, "name");
  if (name == nullptr || !name->is_string() || !IsToolName(name->get<std::string>())) {
    return absl::InvalidArgumentError(
        path + ".function.name must be a string of 1 to 64 letters, digits, '_' or '-'");
  }
  if (const OrderedJson* d = FindOrdered(*function, "description"); d && !d->is_string()) {
    return absl::InvalidArgumentError(path + ".function.description must be a string");
  }
  if (const OrderedJson* p = FindOrdered(*function, "parameters"); p && !p->is_object()) {
    return absl::InvalidArgumentError(path + ".function.parameters must be a JSON Schema object");
  }
  if (const OrderedJson* s = FindOrdered(*function, "strict"); s && !s->is_boolean()) {
    return absl::InvalidArgumentError(path + ".function.strict must be a boolean");
  }
  return absl::OkStatus();
}

}  // namespace

const OrderedJson* FindTool(const OrderedJson& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const OrderedJson& tool : tools) {
    const OrderedJson& function = tool.at("function");
    if (function.at("name").get<std::string>() == name) return &function;
  }
  return nullptr;
}

absl::StatusOr<ChatTools> ReadChatTools(const Json& body) {
  ChatTools out;
  if (const Json* v = Find(body, "tools"); v != nullptr) {
    OrderedJson tools = OrderedValue(*v);
    if (!tools.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools must be an array of functions, got ", JsonTypeName(*v)));
    }
    if (tools.size() > kMaxTools) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tools has ", tools.size(), " entries; at most ", kMaxTools, " are allowed"));
    }
    absl::flat_hash_set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string path = absl::StrCat("tools[", i, "]");
      RETURN_IF_ERROR(CheckTool(tools[i], path));
      const std::string name = tools[i]["function"]["name"].get<std::string>();
      if (!names.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".function.name '", name, "' names a function twice"));
      }
    }
    if (!tools.empty()) {
      out.tools = std::move(tools);
      out.choice = ToolChoice::kAuto;
    }
  }
  const Json* choice = Find(body, "tool_choice");
  if (choice == nullptr) return out;
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "none") {
      out.choice = ToolChoice::kNone;
    } else if (mode == "auto") {
      out.choice = out.tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (mode == "required") {
      if (out.tools.is_null()) {
        return absl::InvalidArgumentError("tool_choice \"required\" needs a non-empty tools list");
      }
      out.choice = ToolChoice::kRequired;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("tool_choice '", Excerpt(mode),
                       "' is not supported; use \"none\", \"auto\", \"required\" or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
    return out;
  }
  const Json* type = choice->is_object() ? Find(*choice, "type") : nullptr;
  const Json* function = choice->is_object() ? Find(*choice, "function") : nullptr;
  const Json* name =
      function != nullptr && function->is_object() ? Find(*function, "name") : nullptr;
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "function" ||
      name == nullptr || !name->is_string()) {
    return absl::InvalidArgumentError(
        "tool_choice must be \"none\", \"auto\", \"required\" or "
        "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  out.named = name->get<std::string>();
  if (FindTool(out.tools, out.named) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tool_choice.function.name '", Excerpt(out.named), "' is not a function of tools"));
  }
  out.choice = ToolChoice::kNamed;
  return out;
}

absl::StatusOr<engine::ChatTemplateOptions> TemplateOptions(const Json& body,
                                                            const ChatTools& tools) {
  engine::ChatTemplateOptions options;
  options.add_generation_prompt = true;
  if (tools.choice == ToolChoice::kAuto || tools.choice == ToolChoice::kRequired) {
    options.tools = tools.tools;
  } else if (tools.choice == ToolChoice::kNamed) {
    options.tools = OrderedJson::array();
    for (const OrderedJson& tool : tools.tools) {
      if (tool["function"]["name"].get<std::string>() == tools.named) options.tools.push_back(tool);
    }
  }
  if (const Json* kwargs = Find(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat_template_kwargs must be an object, got ", JsonTypeName(*kwargs)));
    }
    options.kwargs = OrderedValue(*kwargs);
  }
  // reasoning_effort "none" turns thinking off, as SGLang reads it: enable_thinking (Qwen3) and
  // thinking default to false unless chat_template_kwargs sets them. Other efforts have no
  // template variable to map to.
  const Json* effort = Find(body, "reasoning_effort");
  if (effort != nullptr) RETURN_IF_ERROR(CheckReasoningEffort(*effort, "reasoning_effort"));
  if (effort != nullptr && effort->get<std::string>() == "none") {
    if (!options.kwargs.is_object()) options.kwargs = OrderedJson::object();
    for (const char* key : {"enable_thinking", "thinking"}) {
      if (!options.kwargs.contains(key)) options.kwargs[key] = false;
    }
  }
  return options;
}

}  // namespace tandem::router::api_internal
