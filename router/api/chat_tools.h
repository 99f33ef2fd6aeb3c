// OpenAI tool calling on the request side (internal to router/api): `tools`, `tool_choice`,
// `chat_template_kwargs` and `reasoning_effort` of a chat body, read and checked, and what the
// chat template sees of them.
//
// Decisions (as SGLang's serving_chat): tool_choice defaults to "auto" when tools are given,
// "none" otherwise; with "none" the template is rendered without the tools and no calls are
// parsed; a named choice shows the template only that function; "required" or a named choice
// without tools, or naming a function not in `tools`, is a 400.
//
// Thread-safety: pure functions.
#ifndef TANDEM_ROUTER_API_CHAT_TOOLS_H_
#define TANDEM_ROUTER_API_CHAT_TOOLS_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "router/api/json_fields.h"

namespace tandem::router::api_internal {

// At most this many tools per request (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatTools {
  // The validated `tools` ([{"type":"function","function":{"name",...}}], the client's key
  // order); null when absent or empty.
  nlohmann::ordered_json tools;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;  // the function a kNamed choice names
};

// Reads `tools` and `tool_choice`. Each tool must be {"type": "function", "function": {"name":
// 1 to 64 of [A-Za-z0-9_-], "description"?: string, "parameters"?: object, "strict"?: bool}},
// names unique.
// Errors name the field ("tools[1].function.name ...").
absl::StatusOr<ChatTools> ReadChatTools(const Json& body);

// The template options for `tools` (the tools the choice shows: all, the named one, or none)
// and `chat_template_kwargs` (an object; its keys become template variables); `reasoning_effort`
// (checked: CheckReasoningEffort in request_common.h) "none" sets enable_thinking and thinking to
// false where chat_template_kwargs does not.
absl::StatusOr<engine::ChatTemplateOptions> TemplateOptions(const Json& body,
                                                            const ChatTools& tools);

// The function of `tools` named `name`, or nullptr.
const nlohmann::ordered_json* FindTool(const nlohmann::ordered_json& tools,
                                       const std::string& name);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_CHAT_TOOLS_H_
