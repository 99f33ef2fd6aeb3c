// Native renderings of the supported chat templates. Each function reproduces the official
// Jinja template of its family for messages with plain string content (no tools, no images).

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/tokenizer/tokenizer_state.h"
#include "engine/tokenizer/unicode_class.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Python's str.isspace() on one code point (Jinja's `trim` and str.strip() use it).
bool IsPythonSpace(char32_t c) { return IsWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); }

// Strips characters from the ends of `text`: Python whitespace when `chars` is empty,
// otherwise the given ASCII characters.
std::string Strip(std::string_view text, bool left, bool right, std::string_view chars = {}) {
  auto strip_char = [&chars](char32_t c) {
    return chars.empty() ? IsPythonSpace(c) : (c < 0x80 && Contains(chars, std::string(1, c)));
  };
  size_t begin = 0;
  size_t end = text.size();
  while (left && begin < end) {
    size_t len = 0;
    if (ValidSequenceLength(text.substr(begin)) == 0) break;
    const char32_t c = DecodeUtf8(text.substr(begin), &len);
    if (!strip_char(c)) break;
    begin += len;
  }
  while (right && end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (ValidSequenceLength(text.substr(start, end - start)) == 0) break;
    size_t len = 0;
    const char32_t c = DecodeUtf8(text.substr(start), &len);
    if (!strip_char(c)) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

absl::Status CheckRoles(const std::vector<ChatMessage>& messages,
                        std::initializer_list<std::string_view> allowed) {
  for (size_t i = 0; i < messages.size(); ++i) {
    bool ok = false;
    for (std::string_view role : allowed) ok |= messages[i].role == role;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat message ", i, " has unsupported role \"", messages[i].role, "\""));
    }
  }
  return absl::OkStatus();
}

// Qwen's tool results: consecutive "tool" messages share one user turn.
void AppendToolMessage(const std::vector<ChatMessage>& messages, size_t i, std::string* out) {
  if (i == 0 || messages[i - 1].role != "tool") out->append("<|im_start|>user");
  absl::StrAppend(out, "\n<tool_response>\n", messages[i].content, "\n</tool_response>");
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") out->append("<|im_end|>\n");
}

absl::StatusOr<std::string> RenderChatMl(const Tokenizer::State& state,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) {
  static constexpr std::string_view kQwenDefaultSystem =
      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  std::string out;
  const bool default_system = Contains(state.chat_template, kQwenDefaultSystem);
  if (default_system && (messages.empty() || messages[0].role != "system")) {
    absl::StrAppend(&out, "<|im_start|>system\n", std::string(kQwenDefaultSystem), "<|im_end|>\n");
  }
  // Qwen2.5 folds tool results into user turns; plain ChatML templates print every role as is.
  const bool qwen_tools = Contains(state.chat_template, "<tool_response>");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (qwen_tools && messages[i].role == "tool") {
      AppendToolMessage(messages, i, &out);
      continue;
    }
    absl::StrAppend(&out, "<|im_start|>", messages[i].role, "\n", messages[i].content,
                    "<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

absl::StatusOr<std::string> RenderQwen3(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) {
  std::string out;
  if (!messages.empty() && messages[0].role == "system") {
    absl::StrAppend(&out, "<|im_start|>system\n", messages[0].content, "<|im_end|>\n");
  }
  // The last user turn that is not a tool response; thinking is kept only after it.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const std::string& c = messages[k].content;
    const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[k].role == "user" && !tool_response) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string content = m.content;
      std::string reasoning;
      if (Contains(m.content, "</think>")) {
        // content.split('</think>')[-1] and [0], then the part after the last '<think>'.
        const std::string_view whole = m.content;
        const size_t last_end = whole.rfind("</think>");
        const size_t first_end = whole.find("</think>");
        content = Strip(whole.substr(last_end + 8), true, false, "\n");
        const std::string before = Strip(whole.substr(0, first_end), false, true, "\n");
        const size_t last_start = before.rfind("<think>");
        const std::string_view after_start = last_start == std::string::npos
                                                 ? std::string_view(before)
                                                 : std::string_view(before).substr(last_start + 7);
        reasoning = Strip(after_start, true, false, "\n");
      }
      const bool last = i + 1 == messages.size();
      if (i > last_query && (last || !reasoning.empty())) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n<think>\n",
                        Strip(reasoning, true, true, "\n"), "\n</think>\n\n",
                        Strip(content, true, false, "\n"));
      } else {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", content);
      }
      out.append("<|im_end|>\n");
    } else if (m.role == "tool") {
      AppendToolMessage(messages, i, &out);
    }
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

absl::StatusOr<std::string> RenderLlama3(const Tokenizer::State& state,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) {
  auto header = [](const std::string& role) {
    return absl::StrCat("<|start_header_id|>", role, "<|end_header_id|>\n\n");
  };
  std::string out = state.bos_token;
  size_t first = 0;
  if (Contains(state.chat_template, "Cutting Knowledge Date")) {
    // Llama 3.1+: a system turn with the knowledge cut-off always comes first.
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = Strip(messages[0].content, true, true);
      first = 1;
    }
    absl::StrAppend(&out, header("system"),
                    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n", system,
                    "<|eot_id|>");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    // Llama 3.1+ templates name the tool-result role "ipython"; older ones print roles as is.
    const bool ipython = Contains(state.chat_template, "ipython");
    const std::string role =
        ipython && messages[i].role == "tool" ? std::string("ipython") : messages[i].role;
    absl::StrAppend(&out, header(role), Strip(messages[i].content, true, true), "<|eot_id|>");
  }
  // The base Llama-3 template always ends with the assistant header.
  const bool honours_flag =
      Contains(state.chat_template, "add_generation_prompt") || state.chat_template.empty();
  if (add_generation_prompt || !honours_flag) out.append(header("assistant"));
  return out;
}

}  // namespace

ChatFamily DetectChatFamily(const std::string& chat_template, const AddedVocabulary& added) {
  if (!chat_template.empty()) {
    if (Contains(chat_template, "<|start_header_id|>")) return ChatFamily::kLlama3;
    if (Contains(chat_template, "<|im_start|>")) {
      return Contains(chat_template, "<think>") ? ChatFamily::kQwen3 : ChatFamily::kChatMl;
    }
    return ChatFamily::kNone;
  }
  if (added.FindContent("<|start_header_id|>")) return ChatFamily::kLlama3;
  if (added.FindContent("<|im_start|>")) return ChatFamily::kChatMl;
  return ChatFamily::kNone;
}

absl::StatusOr<std::string> RenderChat(const Tokenizer::State& state,
                                       const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) {
  switch (state.family) {
    case ChatFamily::kChatMl:
      RETURN_IF_ERROR(CheckRoles(messages, {"system", "user", "assistant", "tool"}));
      return RenderChatMl(state, messages, add_generation_prompt);
    case ChatFamily::kQwen3:
      RETURN_IF_ERROR(CheckRoles(messages, {"system", "user", "assistant", "tool"}));
      return RenderQwen3(messages, add_generation_prompt);
    case ChatFamily::kLlama3:
      RETURN_IF_ERROR(CheckRoles(messages, {"system", "user", "assistant", "tool", "ipython"}));
      return RenderLlama3(state, messages, add_generation_prompt);
    case ChatFamily::kNone:
      break;
  }
  return absl::FailedPreconditionError(
      "tokenizer_config.json: the chat template is not of a supported family (ChatML/Qwen, "
      "Llama-3); send a completion request with a pre-formatted prompt instead");
}

}  // namespace tandem::engine
