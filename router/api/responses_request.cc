// OpenAI /v1/responses -> RoutedRequest (router/api/responses.h): the input items become chat
// messages and the Responses settings chat's, and the chat parser does the rest (template,
// tools, constraints, sampling, prompt checks).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "router/api/json_fields.h"
#include "router/api/request_common.h"
#include "router/api/responses.h"

namespace tandem::router::api_internal {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxInputItems = 4096;  // chat's limit on messages
// OpenAI's limits on metadata.
constexpr size_t kMaxMetadataPairs = 16;
constexpr size_t kMaxMetadataKeyBytes = 64;
constexpr size_t kMaxMetadataValueBytes = 512;

// OpenAI's `include` values. Only the logprobs change an answer here: the other items (tool
// outputs, images, encrypted reasoning) never occur, so asking for them adds nothing.
constexpr absl::string_view kIncludes[] = {
    "code_interpreter_call.outputs", "computer_call_output.output.image_url",
    "file_search_call.results",      "message.input_image.image_url",
    "message.output_text.logprobs",  "reasoning.encrypted_content",
    "web_search_call.action.sources"};

absl::Status CheckInclude(const std::string& value) {
  if (std::find(std::begin(kIncludes), std::end(kIncludes), value) != std::end(kIncludes)) {
    return absl::OkStatus();
  }
  std::string supported;
  for (absl::string_view known : kIncludes) {
    absl::StrAppend(&supported, supported.empty() ? "" : ", ", "'", known, "'");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "include: '", Excerpt(value), "' is not a supported value; supported values: ", supported));
}

// What a Responses body shares with chat, handed on as it is: OpenAI's sampling settings and
// SGLang's extras, which the chat parser reads and checks under the same names.
constexpr const char* kSharedKeys[] = {"model",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "seed",
                                       "stop",
                                       "frequency_penalty",
                                       "rid",
                                       "presence_penalty",
                                       "stream",
                                       "repetition_penalty",
                                       "user",
                                       "parallel_tool_calls",
                                       "chat_template_kwargs",
                                       "separate_reasoning"};

std::string ItemId(const char* prefix) { return absl::StrCat(prefix, NewRid()); }

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A message's text: a string, or an array of input_text / output_text parts (and refusal parts
// on an assistant turn), joined.
absl::StatusOr<std::string> ContentText(const Json& content, const std::string& path,
                                        bool assistant) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Invalid(absl::StrCat(path, " must be a string or an array of input_text parts, got ",
                                JsonTypeName(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_path = absl::StrCat(path, "[", i, "]");
    if (!part.is_object()) {
      return Invalid(absl::StrCat(part_path, " must be an object, got ", JsonTypeName(part)));
    }
    const Json* type = Find(part, "type");
    if (type == nullptr) return Invalid(part_path + ".type is required");
    ASSIGN_OR_RETURN(const std::string type_name, ToString(*type, part_path + ".type"));
    const char* key = "text";
    if (assistant && type_name == "refusal") {
      key = "refusal";
    } else if (type_name != "input_text" && type_name != "output_text" && type_name != "text") {
      return Invalid(absl::StrCat(part_path, ".type '", Excerpt(type_name),
                                  "' is not supported: this server takes text only "
                                  "(input_text parts)"));
    }
    const Json* value = Find(part, key);
    if (value == nullptr) return Invalid(absl::StrCat(part_path, ".", key, " is required"));
    ASSIGN_OR_RETURN(const std::string piece, ToString(*value, JoinPath(part_path, key)));
    text += piece;
  }
  return text;
}

// A required string field of an input item.
absl::StatusOr<std::string> ItemString(const Json& item, const std::string& path, const char* key) {
  const Json* value = Find(item, key);
  if (value == nullptr) return Invalid(absl::StrCat(path, ".", key, " is required"));
  return ToString(*value, JoinPath(path, key));
}

// `input` as chat messages, and as the Response items GET .../input_items lists.
class InputReader {
 public:
  absl::Status Read(const Json& input) {
    if (input.is_string()) {
      AddMessage("user", input.get<std::string>(), ItemId("msg_"));
      return absl::OkStatus();
    }
    if (!input.is_array()) {
      return Invalid(absl::StrCat("input must be a string or an array of input items, got ",
                                  JsonTypeName(input)));
    }
    if (input.empty()) return Invalid("input must not be empty");
    if (input.size() > kMaxInputItems) {
      return Invalid(absl::StrCat("input has ", input.size(), " items; at most ", kMaxInputItems,
                                  " are allowed"));
    }
    for (size_t i = 0; i < input.size(); ++i) {
      RETURN_IF_ERROR(ReadItem(input[i], absl::StrCat("input[", i, "]")));
    }
    if (messages_.empty()) return Invalid("input has no message, call or call output");
    return absl::OkStatus();
  }

  Json& messages() { return messages_; }
  Json& items() { return items_; }

 private:
  absl::Status ReadItem(const Json& item, const std::string& path) {
    if (!item.is_object()) {
      return Invalid(absl::StrCat(path, " must be an object, got ", JsonTypeName(item)));
    }
    std::string type = "message";  // an easy input message has no type
    if (const Json* t = Find(item, "type"); t != nullptr) {
      ASSIGN_OR_RETURN(type, ToString(*t, path + ".type"));
    }
    if (type == "message") return ReadMessage(item, path);
    if (type == "function_call") {
      ASSIGN_OR_RETURN(const std::string call_id, ItemString(item, path, "call_id"));
      ASSIGN_OR_RETURN(const std::string name, ItemString(item, path, "name"));
      ASSIGN_OR_RETURN(const std::string arguments, ItemString(item, path, "arguments"));
      if (!Json::accept(arguments)) {
        return Invalid(path + ".arguments must be JSON text (the call's arguments object)");
      }
      std::string id = ItemId("fc_");
      if (const Json* given = Find(item, "id"); given != nullptr) {
        ASSIGN_OR_RETURN(id, ToString(*given, path + ".id"));
      }
      AddCall(call_id, name, arguments);
      items_.push_back({{"type", "function_call"},
                        {"id", id},
                        {"call_id", call_id},
                        {"name", name},
                        {"arguments", arguments},
                        {"status", "completed"}});
      return absl::OkStatus();
    }
    if (type == "function_call_output") {
      ASSIGN_OR_RETURN(const std::string call_id, ItemString(item, path, "call_id"));
      const Json* output = Find(item, "output");
      if (output == nullptr) return Invalid(path + ".output is required");
      ASSIGN_OR_RETURN(const std::string text, ContentText(*output, path + ".output", false));
      messages_.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
      items_.push_back({{"type", "function_call_output"},
                        {"id", ItemId("fco_")},
                        {"call_id", call_id},
                        {"output", text},
                        {"status", "completed"}});
      return absl::OkStatus();
    }
    // An earlier turn's reasoning: chat templates drop past reasoning, so it is not sent.
    if (type == "reasoning") return absl::OkStatus();
    return Invalid(absl::StrCat(path, ".type '", Excerpt(type),
                                "' is not supported; use message, function_call or "
                                "function_call_output items"));
  }

  absl::Status ReadMessage(const Json& item, const std::string& path) {
    ASSIGN_OR_RETURN(const std::string role, ItemString(item, path, "role"));
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return Invalid(absl::StrCat(path, ".role '", Excerpt(role),
                                  "' is not supported; use user, system, developer or "
                                  "assistant"));
    }
    const bool assistant = role == "assistant";
    const Json* content = Find(item, "content");
    if (content == nullptr) return Invalid(path + ".content is required");
    ASSIGN_OR_RETURN(const std::string text, ContentText(*content, path + ".content", assistant));
    std::string id = ItemId("msg_");
    if (const Json* given = Find(item, "id"); given != nullptr) {
      ASSIGN_OR_RETURN(id, ToString(*given, path + ".id"));
    }
    AddMessage(role, text, id);
    return absl::OkStatus();
  }

  // A message turn, and its item (the role as the client named it).
  void AddMessage(const std::string& role, const std::string& text, const std::string& id) {
    const bool assistant = role == "assistant";
    messages_.push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
    Json part = {{"type", assistant ? "output_text" : "input_text"}, {"text", text}};
    if (assistant) part["annotations"] = Json::array();
    items_.push_back({{"type", "message"},
                      {"id", id},
                      {"role", role},
                      {"content", Json::array({std::move(part)})},
                      {"status", "completed"}});
  }

  // A call joins the assistant turn before it (the text it came with, or the calls made with
  // it), as chat templates expect parallel calls: in one assistant message.
  void AddCall(const std::string& call_id, const std::string& name, const std::string& arguments) {
    Json call = {{"id", call_id},
                 {"type", "function"},
                 {"function", {{"name", name}, {"arguments", arguments}}}};
    if (messages_.empty() || messages_.back()["role"] != "assistant") {
      messages_.push_back({{"role", "assistant"}, {"content", ""}});
    }
    Json& turn = messages_.back();
    if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
    turn["tool_calls"].push_back(std::move(call));
  }

  Json messages_ = Json::array();
  Json items_ = Json::array();
};

// A Responses function tool ({"type":"function","name",...}) as chat's
// ({"type":"function","function":{"name",...}}), the client's key order kept.
absl::StatusOr<nlohmann::ordered_json> ChatTools(const Json& tools_value) {
  const nlohmann::ordered_json tools = OrderedValue(tools_value);
  if (!tools.is_array()) {
    return Invalid(absl::StrCat("tools must be an array, got ", tools.type_name()));
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& tool = tools[i];
    const std::string path = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) {
      return Invalid(absl::StrCat(path, " must be an object, got ", tool.type_name()));
    }
    const auto type = tool.find("type");
    if (type == tool.end() || !type->is_string()) {
      return Invalid(path + ".type is required (\"function\")");
    }
    if (type->get<std::string>() != "function") {
      return Invalid(absl::StrCat(path, ".type '", Excerpt(type->get<std::string>()),
                                  "' is not supported: only function tools are (the server has "
                                  "no built-in tools)"));
    }
    nlohmann::ordered_json function = nlohmann::ordered_json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key != "type" && !value.is_null()) function[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// Responses' tool_choice as chat's.
absl::StatusOr<Json> ChatToolChoice(const Json& choice) {
  if (choice.is_string()) return choice;  // "auto", "none", "required": chat checks them
  if (!choice.is_object()) {
    return Invalid(
        absl::StrCat("tool_choice must be a string or an object, got ", JsonTypeName(choice)));
  }
  const Json* type = Find(choice, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
    return Invalid(
        "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
        "\"name\": ...}");
  }
  ASSIGN_OR_RETURN(const std::string name, ItemString(choice, "tool_choice", "name"));
  return Json{{"type", "function"}, {"function", {{"name", name}}}};
}

// Responses' text.format as chat's response_format.
absl::StatusOr<Json> ChatResponseFormat(const Json& format) {
  if (!format.is_object()) {
    return Invalid(absl::StrCat("text.format must be an object, got ", JsonTypeName(format)));
  }
  ASSIGN_OR_RETURN(const std::string type, ItemString(format, "text.format", "type"));
  if (type == "text" || type == "json_object") return Json{{"type", type}};
  if (type != "json_schema") {
    return Invalid("text.format.type must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const Json* schema = Find(format, "schema");
  if (schema == nullptr) return Invalid("text.format.schema is required for json_schema");
  Json spec = {{"schema", *schema}};
  for (const char* key : {"name", "strict", "description"}) {
    if (const Json* v = Find(format, key); v != nullptr) spec[key] = *v;
  }
  return Json{{"type", "json_schema"}, {"json_schema", std::move(spec)}};
}

absl::StatusOr<Json> ReadMetadata(const Json& metadata) {
  if (!metadata.is_object()) {
    return Invalid(
        absl::StrCat("metadata must be an object of strings, got ", JsonTypeName(metadata)));
  }
  if (metadata.size() > kMaxMetadataPairs) {
    return Invalid(absl::StrCat("metadata has ", metadata.size(), " keys; at most ",
                                kMaxMetadataPairs, " are allowed"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (key.size() > kMaxMetadataKeyBytes) {
      return Invalid(absl::StrCat("metadata key '", Excerpt(key), "' is longer than ",
                                  kMaxMetadataKeyBytes, " bytes"));
    }
    if (!value.is_string()) {
      return Invalid(
          absl::StrCat("metadata.", Excerpt(key), " must be a string, got ", JsonTypeName(value)));
    }
    if (value.get<std::string>().size() > kMaxMetadataValueBytes) {
      return Invalid(absl::StrCat("metadata.", Excerpt(key), " is longer than ",
                                  kMaxMetadataValueBytes, " bytes"));
    }
  }
  return metadata;
}

// The fields a Responses request may set that this server does not serve: a 400 when set.
absl::Status RefuseUnserved(const Json& body) {
  if (const Json* v = Find(body, "background"); v != nullptr && IsSet(*v)) {
    return Invalid(
        "background is not supported: a response is answered on the request's own connection");
  }
  if (const Json* v = Find(body, "conversation"); v != nullptr && IsSet(*v)) {
    return Invalid(
        "conversation is not supported; continue a conversation with previous_response_id");
  }
  if (const Json* v = Find(body, "prompt"); v != nullptr && IsSet(*v)) {
    return Invalid("prompt (a stored prompt template) is not supported; send the input itself");
  }
  if (const Json* v = Find(body, "truncation"); v != nullptr) {
    ASSIGN_OR_RETURN(const std::string truncation, ToString(*v, "truncation"));
    if (truncation != "disabled" && truncation != "auto") {
      return Invalid("truncation must be \"disabled\" or \"auto\"");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RoutedRequest> ParseResponsesJson(const Json& body, const ApiContext& ctx) {
  RETURN_IF_ERROR(RefuseUnserved(body));
  auto responses = std::make_shared<ResponsesRequest>();
  responses->id = ItemId("resp_");
  Json chat = Json::object();
  for (const char* key : kSharedKeys) {
    if (const Json* v = Find(body, key); v != nullptr) chat[key] = *v;
  }
  Json echo = {{"background", false},
               {"instructions", nullptr},
               {"max_output_tokens", nullptr},
               {"max_tool_calls", nullptr},
               {"metadata", Json::object()},
               {"parallel_tool_calls", true},
               {"previous_response_id", nullptr},
               {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
               {"text", {{"format", {{"type", "text"}}}}},
               {"tool_choice", "auto"},
               {"tools", Json::array()},
               {"top_logprobs", 0},
               {"truncation", "disabled"},
               {"user", nullptr}};

  if (const Json* v = Find(body, "store"); v != nullptr) {
    ASSIGN_OR_RETURN(responses->store, ToBool(*v, "store"));
  }
  // Logprobs: include "message.output_text.logprobs" (OpenAI's switch) or top_logprobs > 0 asks
  // for them, as chat's logprobs / top_logprobs.
  bool logprobs = false;
  if (const Json* v = Find(body, "include"); v != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<std::string> include, ToStringOrList(*v, "include", 16));
    for (const std::string& what : include) {
      RETURN_IF_ERROR(CheckInclude(what));
      logprobs |= what == "message.output_text.logprobs";
    }
  }
  if (const Json* v = Find(body, "top_logprobs"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n, ToInt(*v, "top_logprobs", 0, 20));
    logprobs |= n > 0;
    chat["top_logprobs"] = n;
    echo["top_logprobs"] = n;
  }
  if (logprobs) chat["logprobs"] = true;
  if (const Json* v = Find(body, "metadata"); v != nullptr) {
    ASSIGN_OR_RETURN(echo["metadata"], ReadMetadata(*v));
  }
  if (const Json* v = Find(body, "max_output_tokens"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n, ToInt(*v, "max_output_tokens", 1, kInt32Max));
    chat["max_completion_tokens"] = n;
    echo["max_output_tokens"] = n;
  }
  if (const Json* v = Find(body, "text"); v != nullptr) {
    if (!v->is_object()) {
      return Invalid(absl::StrCat("text must be an object, got ", JsonTypeName(*v)));
    }
    if (const Json* format = Find(*v, "format"); format != nullptr) {
      ASSIGN_OR_RETURN(chat["response_format"], ChatResponseFormat(*format));
      echo["text"]["format"] = *format;
    }
  }
  if (const Json* v = Find(body, "reasoning"); v != nullptr) {
    if (!v->is_object()) {
      return Invalid(absl::StrCat("reasoning must be an object, got ", JsonTypeName(*v)));
    }
    if (const Json* effort = Find(*v, "effort"); effort != nullptr) {
      RETURN_IF_ERROR(CheckReasoningEffort(*effort, "reasoning.effort"));
      chat["reasoning_effort"] = *effort;
      echo["reasoning"]["effort"] = *effort;
    }
  }
  if (const Json* v = Find(body, "tools"); v != nullptr) {
    ASSIGN_OR_RETURN(const nlohmann::ordered_json tools, ChatTools(*v));
    chat["tools"] = Json{{kOrderedJsonKey, tools.dump()}};
    echo["tools"] = Json::parse(OrderedValue(*v).dump());
  }
  if (const Json* v = Find(body, "tool_choice"); v != nullptr) {
    ASSIGN_OR_RETURN(chat["tool_choice"], ChatToolChoice(*v));
    echo["tool_choice"] = *v;
  }
  for (const char* key : {"parallel_tool_calls", "user", "truncation"}) {
    if (const Json* v = Find(body, key); v != nullptr) echo[key] = *v;
  }

  Json messages = Json::array();
  if (const Json* v = Find(body, "instructions"); v != nullptr) {
    ASSIGN_OR_RETURN(const std::string instructions, ToString(*v, "instructions"));
    messages.push_back({{"role", "system"}, {"content", instructions}});
    echo["instructions"] = instructions;
  }
  responses->conversation = Json::array();
  if (const Json* v = Find(body, "previous_response_id"); v != nullptr) {
    ASSIGN_OR_RETURN(const std::string previous, ToString(*v, "previous_response_id"));
    std::shared_ptr<const StoredResponse> stored =
        ctx.response_store == nullptr ? nullptr : ctx.response_store->Get(previous);
    if (stored == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("previous_response_id '", Excerpt(previous),
                       "' names no stored response: it was not stored (store: false, or its answer "
                       "failed or was left unfinished), was deleted, or was dropped from this "
                       "router's store (--response-store-mb)"));
    }
    responses->conversation = stored->conversation;
    echo["previous_response_id"] = previous;
  }
  const Json* input = Find(body, "input");
  if (input == nullptr) return Invalid("input is required");
  InputReader reader;
  RETURN_IF_ERROR(reader.Read(*input));
  for (Json& message : reader.messages()) responses->conversation.push_back(std::move(message));
  for (const Json& message : responses->conversation) messages.push_back(message);
  responses->input_items = std::move(reader.items());
  chat["messages"] = std::move(messages);

  ASSIGN_OR_RETURN(RoutedRequest request, ParseChatCompletionsJson(chat, ctx));
  request.kind = ApiKind::kResponses;
  // As the client sent them (checked by the chat parser), else the defaults the workers use.
  for (const char* key : {"temperature", "top_p"}) {
    const Json* v = Find(body, key);
    echo[key] = v != nullptr ? *v : Json(1.0);
  }
  echo["store"] = responses->store;
  responses->echo = std::move(echo);
  request.responses = std::move(responses);
  return request;
}

}  // namespace tandem::router::api_internal

namespace tandem::router {

absl::StatusOr<RoutedRequest> ParseResponses(std::string_view body, const ApiContext& ctx) {
  return ParseRequest(ApiKind::kResponses, body, ctx);
}

}  // namespace tandem::router
