// OpenAI /v1/chat/completions -> RoutedRequest: the messages are rendered with the tokenizer's
// chat template (with the generation prompt) and tokenized without adding special tokens again.
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/ordered_json.h"
#include "common/status.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "router/api/chat_tools.h"
#include "router/api/json_fields.h"
#include "router/api/request_common.h"
#include "router/api/sampling_params.h"
#include "router/api/tool_grammar.h"

namespace tandem::router::api_internal {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxMessages = 4096;

// Whether a rendered prompt leaves the assistant inside a reasoning block: it ends with
// "<think>" and whitespace (Qwen3-Thinking-2507's, DeepSeek-R1's and thinking DeepSeek-V3.1's
// templates).
bool OpensThinking(std::string_view prompt) {
  while (!prompt.empty() && absl::ascii_isspace(static_cast<unsigned char>(prompt.back()))) {
    prompt.remove_suffix(1);
  }
  return prompt.ends_with("<think>");
}

// A message's content: a string, or an array of {"type":"text","text":...} parts, joined. An
// assistant turn may also hold OpenAI's {"type":"refusal","refusal":...} parts: what the
// assistant said, so their text joins the content too.
absl::StatusOr<std::string> ReadContent(const Json& content, const std::string& path,
                                        bool assistant) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " must be a string or an array of text parts, got ", JsonTypeName(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_path = absl::StrCat(path, "[", i, "]");
    if (!part.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(part_path, " must be an object, got ", JsonTypeName(part)));
    }
    const Json* type = Find(part, "type");
    if (type == nullptr) return absl::InvalidArgumentError(part_path + ".type is required");
    ASSIGN_OR_RETURN(const std::string type_name, ToString(*type, part_path + ".type"));
    const bool refusal = assistant && type_name == "refusal";
    if (type_name != "text" && !refusal) {
      return absl::InvalidArgumentError(absl::StrCat(part_path, ".type '", Excerpt(type_name),
                                                     "' is not supported; only text parts are"));
    }
    const char* key = refusal ? "refusal" : "text";
    const Json* part_text = Find(part, key);
    if (part_text == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(part_path, ".", key, " is required"));
    }
    ASSIGN_OR_RETURN(const std::string piece, ToString(*part_text, JoinPath(part_path, key)));
    text += piece;
  }
  return text;
}

// An assistant turn's tool_calls as the chat template sees them: OpenAI's list of
// {"id", "type": "function", "function": {"name", "arguments"}}, each `arguments` JSON text parsed
// into its value (as vLLM and SGLang do; templates print it with tojson).
absl::StatusOr<nlohmann::ordered_json> ReadToolCalls(const Json& calls, const std::string& path) {
  if (!calls.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be an array, got ", JsonTypeName(calls)));
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& call = calls[i];
    const std::string call_path = absl::StrCat(path, "[", i, "]");
    if (!call.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(call_path, " must be an object, got ", JsonTypeName(call)));
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    if (const Json* id = Find(call, "id"); id != nullptr) {
      ASSIGN_OR_RETURN(const std::string text, ToString(*id, call_path + ".id"));
      entry["id"] = text;
    }
    if (const Json* type = Find(call, "type");
        type != nullptr && !(type->is_string() && type->get<std::string>() == "function")) {
      return absl::InvalidArgumentError(call_path + ".type must be \"function\"");
    }
    entry["type"] = "function";
    const Json* function = Find(call, "function");
    if (function == nullptr || !function->is_object()) {
      return absl::InvalidArgumentError(call_path + ".function must be an object");
    }
    const Json* name = Find(*function, "name");
    if (name == nullptr)
      return absl::InvalidArgumentError(call_path + ".function.name is required");
    ASSIGN_OR_RETURN(const std::string name_text, ToString(*name, call_path + ".function.name"));
    nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
    if (const Json* args = Find(*function, "arguments"); args != nullptr) {
      if (args->is_string()) {
        try {
          arguments = ParseOrderedJson(args->get<std::string>());
        } catch (const nlohmann::ordered_json::exception&) {
          return absl::InvalidArgumentError(call_path + ".function.arguments must be a JSON text");
        }
      } else if (args->is_object()) {
        arguments = OrderedValue(*args);
      } else {
        return absl::InvalidArgumentError(call_path +
                                          ".function.arguments must be a string of JSON");
      }
    }
    entry["function"] = {{"name", name_text}, {"arguments", std::move(arguments)}};
    out.push_back(std::move(entry));
  }
  return out;
}

absl::StatusOr<engine::ChatMessage> ReadMessage(const Json& message, size_t index) {
  const std::string path = absl::StrCat("messages[", index, "]");
  if (!message.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be an object, got ", JsonTypeName(message)));
  }
  const Json* role = Find(message, "role");
  if (role == nullptr) return absl::InvalidArgumentError(path + ".role is required");
  engine::ChatMessage out;
  ASSIGN_OR_RETURN(out.role, ToString(*role, path + ".role"));
  if (out.role == "developer") out.role = "system";  // OpenAI's newer name for system
  if (out.role != "system" && out.role != "user" && out.role != "assistant" && out.role != "tool") {
    return absl::InvalidArgumentError(absl::StrCat(path, ".role '", Excerpt(out.role),
                                                   "' is not supported; use system, user, "
                                                   "assistant or tool"));
  }
  for (const char* key : {"function_call", "audio"}) {
    const Json* value = Find(message, key);
    if (value != nullptr && IsSet(*value)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key, " is not supported"));
    }
  }
  const bool assistant = out.role == "assistant";
  if (const Json* calls = Find(message, "tool_calls"); calls != nullptr) {
    if (!assistant) {
      return absl::InvalidArgumentError(path + ".tool_calls is only allowed on assistant messages");
    }
    ASSIGN_OR_RETURN(nlohmann::ordered_json tool_calls,
                     ReadToolCalls(*calls, path + ".tool_calls"));
    if (!tool_calls.empty()) out.extra["tool_calls"] = std::move(tool_calls);
  }
  if (out.role == "tool") {
    if (const Json* id = Find(message, "tool_call_id"); id != nullptr) {
      ASSIGN_OR_RETURN(const std::string text, ToString(*id, path + ".tool_call_id"));
      out.extra["tool_call_id"] = text;
    }
  }
  if (out.role == "tool" || assistant) {
    if (const Json* name = Find(message, "name"); name != nullptr) {
      ASSIGN_OR_RETURN(const std::string text, ToString(*name, path + ".name"));
      out.extra["name"] = text;
    }
  }
  if (const Json* reasoning = Find(message, "reasoning_content"); reasoning != nullptr) {
    if (!assistant) {
      return absl::InvalidArgumentError(path +
                                        ".reasoning_content is only allowed on assistant messages");
    }
    ASSIGN_OR_RETURN(const std::string text, ToString(*reasoning, path + ".reasoning_content"));
    out.extra["reasoning_content"] = text;
  }
  const Json* content = Find(message, "content");
  if (content == nullptr) {
    // OpenAI allows a null content only on assistant turns (that carried tool calls); the
    // template sees "" (Qwen3's fails on None), as SGLang passes it.
    if (!assistant) return absl::InvalidArgumentError(path + ".content is required");
    return out;
  }
  ASSIGN_OR_RETURN(out.content, ReadContent(*content, path + ".content", assistant));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<engine::ChatMessage>> ReadConversation(const Json* messages) {
  if (messages == nullptr) return absl::InvalidArgumentError("messages is required");
  if (!messages->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages must be an array, got ", JsonTypeName(*messages)));
  }
  if (messages->empty()) return absl::InvalidArgumentError("messages must not be empty");
  if (messages->size() > kMaxMessages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messages has ", messages->size(), " entries; at most ", kMaxMessages, " are allowed"));
  }
  std::vector<engine::ChatMessage> conversation;
  conversation.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    ASSIGN_OR_RETURN(engine::ChatMessage message, ReadMessage((*messages)[i], i));
    conversation.push_back(std::move(message));
  }
  return conversation;
}

absl::Status ReadResponseFormat(const Json& format, proto::SamplingParams* sampling) {
  using Kind = engine::GrammarConstraint::Kind;
  const Json* type = format.is_object() ? Find(format, "type") : nullptr;
  const std::string name = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (name == "text") return absl::OkStatus();
  if (name == "json_object") {
    return SetGrammarConstraint({Kind::kJsonObject, ""}, "response_format", sampling);
  }
  if (name == "json_schema") {
    const Json* spec = Find(format, "json_schema");
    if (spec == nullptr || !spec->is_object()) {
      return absl::InvalidArgumentError("response_format.json_schema must be an object");
    }
    // ParseJsonObject turned the schema object into its text, keeping its key order.
    const Json* schema = Find(*spec, "schema");
    if (schema == nullptr || !(schema->is_object() || schema->is_string())) {
      return absl::InvalidArgumentError(
          "response_format.json_schema.schema must be a JSON Schema object");
    }
    return SetGrammarConstraint(
        {Kind::kJsonSchema, schema->is_string() ? schema->get<std::string>() : schema->dump()},
        "response_format.json_schema.schema", sampling);
  }
  if (name == "structural_tag") {
    // ParseJsonObject kept `structures` in the body's order (json_fields.h).
    nlohmann::ordered_json tag = nlohmann::ordered_json::object();
    for (const auto& [key, value] : format.items()) tag[key] = OrderedValue(value);
    return SetGrammarConstraint({Kind::kStructuralTag, tag.dump()}, "response_format", sampling);
  }
  return absl::InvalidArgumentError(
      "response_format.type must be \"text\", \"json_object\", \"json_schema\" or "
      "\"structural_tag\"");
}

absl::StatusOr<RoutedRequest> ParseChatCompletionsJson(const Json& body, const ApiContext& ctx) {
  RoutedRequest request = NewRequest(ApiKind::kChatCompletions);
  RETURN_IF_ERROR(ReadModel(body, ctx, &request));
  ASSIGN_OR_RETURN(const std::vector<engine::ChatMessage> conversation,
                   ReadConversation(Find(body, "messages")));

  // max_completion_tokens is OpenAI's current name; max_tokens the deprecated one.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const Json* v = Find(body, key); v != nullptr) {
      ASSIGN_OR_RETURN(const int64_t n, ToInt(*v, key, 0, kInt32Max));
      request.sampling.set_max_new_tokens(static_cast<int32_t>(n));
    }
  }
  if (const Json* v = Find(body, "logprobs"); v != nullptr) {
    ASSIGN_OR_RETURN(request.return_logprob, ToBool(*v, "logprobs"));
  }
  if (const Json* v = Find(body, "top_logprobs"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t n, ToInt(*v, "top_logprobs", 0, engine::kMaxTopLogprobs));
    if (n > 0 && !request.return_logprob) {
      return absl::InvalidArgumentError("top_logprobs requires logprobs: true");
    }
    request.top_logprobs = static_cast<int>(n);
  }
  ASSIGN_OR_RETURN(const ChatTools tools, ReadChatTools(body));
  ASSIGN_OR_RETURN(const engine::ChatTemplateOptions options, TemplateOptions(body, tools));
  if (const Json* v = Find(body, "response_format"); v != nullptr) {
    RETURN_IF_ERROR(ReadResponseFormat(*v, &request.sampling));
  }
  // OpenAI's audio output: the models served answer text only, so asking for audio is refused
  // rather than answered without it.
  if (const Json* v = Find(body, "audio"); v != nullptr && IsSet(*v)) {
    return absl::InvalidArgumentError("audio is not supported: the answer is text only");
  }
  if (const Json* v = Find(body, "modalities"); v != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<std::string> modalities,
                     ToStringOrList(*v, "modalities", 8));
    for (const std::string& m : modalities) {
      if (m != "text") {
        return absl::InvalidArgumentError(
            absl::StrCat("modalities \"", Excerpt(m), "\" is not supported: only \"text\""));
      }
    }
  }
  if (const Json* v = Find(body, "continue_final_message"); v != nullptr && IsSet(*v)) {
    return absl::InvalidArgumentError("continue_final_message is not supported");
  }
  // The legacy function-calling API: answering without the call it asks for would look like
  // a model that chose not to call, so it is refused and `tools` named instead.
  if (const Json* v = Find(body, "functions"); v != nullptr && IsSet(*v)) {
    return absl::InvalidArgumentError(
        "functions is not supported by this server; send them as tools "
        "([{\"type\": \"function\", \"function\": {...}}])");
  }
  if (const Json* v = Find(body, "function_call"); v != nullptr && IsSet(*v)) {
    if (!(v->is_string() && v->get<std::string>() == "none")) {
      return absl::InvalidArgumentError(
          "function_call is not supported by this server; use tool_choice");
    }
  }
  RETURN_IF_ERROR(ReadOpenAiCommon(body, &request));
  if (tools.choice != ToolChoice::kNone && ctx.tokenizer != nullptr) {
    request.tool_call_syntax = ctx.tokenizer->chat_family() == engine::ChatFamily::kLlama3
                                   ? ToolCallSyntax::kLlama3
                                   : ToolCallSyntax::kQwen;
    if (tools.choice == ToolChoice::kNamed) {
      request.tool_names.push_back(tools.named);
    } else {
      for (const nlohmann::ordered_json& tool : tools.tools) {
        request.tool_names.push_back(tool["function"]["name"].get<std::string>());
      }
    }
  }
  bool parallel = true;
  if (const Json* v = Find(body, "parallel_tool_calls"); v != nullptr) {
    ASSIGN_OR_RETURN(parallel, ToBool(*v, "parallel_tool_calls"));
  }
  request.separate_reasoning = ctx.reasoning_parser;
  if (const Json* v = Find(body, "separate_reasoning"); v != nullptr) {
    ASSIGN_OR_RETURN(const bool separate, ToBool(*v, "separate_reasoning"));
    request.separate_reasoning = separate && ctx.reasoning_parser;
  }

  // "auto" is constrained only where it must be (a strict function, parallel_tool_calls false),
  // and not over the client's own constraint (response_format, regex...), which it leaves as is.
  const bool constrain_auto =
      tools.choice == ToolChoice::kAuto && AutoToolsNeedGrammar(tools, parallel) &&
      request.sampling.constraint_case() == proto::SamplingParams::CONSTRAINT_NOT_SET;
  const bool tool_grammar = request.tool_call_syntax != ToolCallSyntax::kNone &&
                            (tools.choice == ToolChoice::kRequired ||
                             tools.choice == ToolChoice::kNamed || constrain_auto);
  // What follows the prompt, once it is known: `opens_thinking` when the prompt ends inside a
  // <think> block (OpensThinking), so the answer starts as reasoning.
  const auto finish = [&](bool opens_thinking) -> absl::Status {
    request.reasoning_open = request.separate_reasoning && (ctx.reasoning_always || opens_thinking);
    if (tool_grammar) {
      // Qwen3 templates let the model think first unless chat_template_kwargs.enable_thinking
      // is false (the template then closes an empty <think></think> block in the prompt); a
      // prompt that opened the block has the model close it before its calls.
      const auto thinking = options.kwargs.find("enable_thinking");
      const bool allow_thinking =
          opens_thinking ||
          (ctx.tokenizer->chat_family() == engine::ChatFamily::kQwen3 &&
           !(thinking != options.kwargs.end() && thinking->is_boolean() && !thinking->get<bool>()));
      ASSIGN_OR_RETURN(const engine::GrammarConstraint constraint,
                       ToolCallConstraint(request.tool_call_syntax, tools, parallel, allow_thinking,
                                          opens_thinking));
      RETURN_IF_ERROR(SetCompiledGrammarConstraint(constraint, "tool_choice", &request.sampling));
    }
    // The rendered template already carries its special tokens (e.g. BOS).
    return FinishPrompt(ctx, ctx.default_max_new_tokens, /*add_special_tokens=*/false, &request);
  };

  // SGLang's extension: the prompt already rendered and tokenized by the client, used as it is
  // instead of the template's rendering of `messages` (which are still checked, and tools and
  // tool_choice still read, as SGLang does).
  if (const Json* ids = Find(body, "input_ids"); ids != nullptr) {
    ASSIGN_OR_RETURN(request.input_ids, ToIntList(*ids, "input_ids", 0, kInt32Max));
    if (request.input_ids.empty()) return absl::InvalidArgumentError("input_ids is empty");
    bool opens_thinking = false;
    if (ctx.tokenizer != nullptr && (request.separate_reasoning || tool_grammar)) {
      // The prompt's end, as text: a template's "<think>\n" is a few tokens at most.
      constexpr size_t kTail = 8;
      const size_t n = request.input_ids.size();
      const std::vector<int32_t> tail(request.input_ids.begin() + (n > kTail ? n - kTail : 0),
                                      request.input_ids.end());
      opens_thinking = OpensThinking(ctx.tokenizer->Decode(tail));
    }
    RETURN_IF_ERROR(finish(opens_thinking));
    return request;
  }
  if (ctx.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "this server has no tokenizer loaded, so it cannot apply the chat template");
  }
  ASSIGN_OR_RETURN(request.prompt_text, ctx.tokenizer->ApplyChatTemplate(conversation, options),
                   "cannot apply the chat template: ");
  RETURN_IF_ERROR(finish(OpensThinking(request.prompt_text)));
  return request;
}

}  // namespace tandem::router::api_internal
