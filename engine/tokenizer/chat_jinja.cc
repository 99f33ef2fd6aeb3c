// Chat templates rendered from the checkpoint's own Jinja source, with the variables Hugging
// Face's apply_chat_template passes.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/tokenizer/tokenizer_state.h"

namespace tandem::engine {
namespace {

jinja::Value MessageValue(const ChatMessage& message) {
  jinja::Dict fields = {{"role", jinja::Value(message.role)},
                        {"content", jinja::Value(message.content)}};
  for (const auto& [key, value] : message.extra.items()) {
    if (key == "role") continue;
    if (key == "content") {
      fields[1].second = jinja::Value::FromJson(value);
      continue;
    }
    fields.emplace_back(key, jinja::Value::FromJson(value));
  }
  return jinja::Value(std::move(fields));
}

// Whether `json` nests at most `budget` levels (values are converted and printed recursively).
bool WithinDepth(const nlohmann::ordered_json& json, int budget) {
  if (!json.is_structured()) return true;
  if (budget == 0) return false;
  for (const auto& item : json) {
    if (!WithinDepth(item, budget - 1)) return false;
  }
  return true;
}

constexpr int kMaxJsonDepth = 128;

}  // namespace

absl::StatusOr<std::string> RenderChatJinja(const Tokenizer::State& state,
                                            const std::vector<ChatMessage>& messages,
                                            const ChatTemplateOptions& options) {
  for (const ChatMessage& m : messages) {
    if (!WithinDepth(m.extra, kMaxJsonDepth)) {
      return absl::InvalidArgumentError("a chat message nests deeper than 128 levels");
    }
  }
  if (!WithinDepth(options.tools, kMaxJsonDepth) || !WithinDepth(options.kwargs, kMaxJsonDepth)) {
    return absl::InvalidArgumentError("tools or template kwargs nest deeper than 128 levels");
  }
  jinja::List message_values;
  message_values.reserve(messages.size());
  for (const ChatMessage& m : messages) message_values.push_back(MessageValue(m));
  jinja::Dict variables = {
      {"messages", jinja::Value(std::move(message_values))},
      {"tools",
       options.tools.is_null() ? jinja::Value::None() : jinja::Value::FromJson(options.tools)},
      {"documents", jinja::Value::None()},
      {"add_generation_prompt", jinja::Value(options.add_generation_prompt)}};
  const auto set = [&variables](const std::string& key, jinja::Value value) {
    for (auto& [k, existing] : variables) {
      if (k == key) {
        existing = std::move(value);
        return;
      }
    }
    variables.emplace_back(key, std::move(value));
  };
  for (const auto& [key, value] : state.special_tokens) set(key, value);
  if (!options.kwargs.is_null()) {
    if (!options.kwargs.is_object()) {
      return absl::InvalidArgumentError("chat template kwargs must be an object");
    }
    for (const auto& [key, value] : options.kwargs.items()) {
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        return absl::InvalidArgumentError(
            absl::StrCat("chat template kwargs may not set '", key, "'"));
      }
      set(key, jinja::Value::FromJson(value));
    }
  }
  jinja::RenderOptions render_options;
  render_options.clock = options.clock;
  return state.jinja_template->Render(variables, render_options);
}

}  // namespace tandem::engine
