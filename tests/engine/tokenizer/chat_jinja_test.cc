// Tokenizer::ApplyChatTemplate through the checkpoint's own Jinja template: every rendering of
// tests/engine/jinja_templates/goldens.json (Python's Jinja2 with Hugging Face's settings) is
// reproduced through the Tokenizer API (messages with tool_calls, tool results,
// reasoning_content; tools; chat_template_kwargs), and templates Tandem cannot parse are refused.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const fs::path kTemplates = fs::path(TANDEM_SOURCE_DIR) / "tests/engine/jinja_templates";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string MinimalTokenizerJson() {
  return Json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", Json::array()}}}}
      .dump();
}

std::tm FixedNow() {  // render_goldens.py's clock: Saturday 2026-03-14 15:09:26
  std::tm t{};
  t.tm_year = 126;
  t.tm_mon = 2;
  t.tm_mday = 14;
  t.tm_hour = 15;
  t.tm_min = 9;
  t.tm_sec = 26;
  t.tm_wday = 6;
  t.tm_yday = 72;
  return t;
}

TEST(ChatJinjaTest, TokenizerReproducesPythonJinja2Goldens) {
  const Json goldens = Json::parse(ReadFile(kTemplates / "goldens.json")).at("goldens");
  ASSERT_GE(goldens.size(), 200u);
  size_t checked = 0;
  for (const Json& g : goldens) {
    const Json& vars = g.at("variables");
    // tokenizer_config.json with this template; the special tokens the golden passed go in as
    // template kwargs (the minimal vocabulary does not hold them).
    // A ChatMessage always has a content; conversations with a turn without one cannot be
    // expressed (the API layer gives such turns an empty content).
    bool all_have_content = true;
    for (const Json& m : vars.at("messages")) all_have_content &= m.contains("content");
    if (!all_have_content) continue;
    const Json config = {
        {"chat_template", ReadFile(kTemplates / g.at("template").get<std::string>())}};
    auto tokenizer = Tokenizer::FromStrings(MinimalTokenizerJson(), config.dump());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    std::vector<ChatMessage> messages;
    for (const Json& m : vars.at("messages")) {
      ChatMessage message{m.at("role"), "", Json::object()};
      for (const auto& [key, value] : m.items()) {
        if (key == "role") continue;
        if (key == "content" && value.is_string()) {
          message.content = value;
        } else {
          message.extra[key] = value;
        }
      }
      messages.push_back(std::move(message));
    }
    ChatTemplateOptions options;
    options.add_generation_prompt = vars.at("add_generation_prompt");
    options.tools = vars.at("tools");
    options.clock = FixedNow;
    for (const auto& [key, value] : vars.items()) {
      if (key != "messages" && key != "tools" && key != "documents" &&
          key != "add_generation_prompt") {
        options.kwargs[key] = value;
      }
    }
    auto rendered = (*tokenizer)->ApplyChatTemplate(messages, options);
    const std::string where =
        g.at("template").get<std::string>() + " / " + g.at("label").get<std::string>();
    if (g.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << where;
      continue;
    }
    ASSERT_TRUE(rendered.ok()) << where << ": " << rendered.status();
    EXPECT_EQ(*rendered, g.at("rendered").get<std::string>()) << where;
    ++checked;
  }
  EXPECT_GE(checked, 200u);
}

TEST(ChatJinjaTest, ShippedModelRendersItsOwnTemplate) {
  auto t = Tokenizer::FromModelDir(
      (fs::path(TANDEM_SOURCE_DIR) / "models/tandem-tiny-english").string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->chat_template_status().ok());
  auto r = (*t)->ApplyChatTemplate({{"system", "Be kind."}, {"user", "A fortune?"}}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r,
            "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nA fortune?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatJinjaTest, UnparseableTemplateIsRefusedNotReplaced) {
  // A ChatML-looking template with a construct Tandem does not support: no silent fallback to
  // the native ChatML rendering.
  const std::string config = Json{
      {"chat_template",
       "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content|wordwrap }}<|im_end|>\n"
       "{% endfor %}"}}.dump();
  auto t = Tokenizer::FromStrings(MinimalTokenizerJson(), config);
  ASSERT_TRUE(t.ok()) << t.status();  // raw-prompt endpoints keep working
  EXPECT_EQ((*t)->chat_template_status().code(), absl::StatusCode::kFailedPrecondition);
  auto r = (*t)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("line 2: unsupported filter 'wordwrap'"));
}

TEST(ChatJinjaTest, TemplateErrorsReachTheCaller) {
  const std::string config =
      Json{{"chat_template", ReadFile(kTemplates / "meta-llama-Llama-3.3-70B-Instruct.jinja")}}
          .dump();
  auto t = Tokenizer::FromStrings(MinimalTokenizerJson(), config);
  ASSERT_TRUE(t.ok()) << t.status();
  ChatMessage calls{"assistant", "", Json::object()};
  calls.extra["tool_calls"] =
      Json::array({Json{{"function", {{"name", "a"}, {"arguments", Json::object()}}}},
                   Json{{"function", {{"name", "b"}, {"arguments", Json::object()}}}}});
  auto r = (*t)->ApplyChatTemplate({{"user", "x"}, calls}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("only supports single tool-calls"));
}

TEST(ChatJinjaTest, WithoutATemplateToolsNeedOne) {
  const std::string tokenizer =
      Json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", Json::array()}}},
           {"added_tokens",
            Json::array({Json{{"id", 1}, {"content", "<|im_start|>"}, {"special", true}},
                         Json{{"id", 2}, {"content", "<|im_end|>"}, {"special", true}}})}}
          .dump();
  auto t = Tokenizer::FromStrings(tokenizer, "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->chat_family(), ChatFamily::kChatMl);
  auto plain = (*t)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateOptions options;
  options.tools = Json::array({Json{{"type", "function"}}});
  auto with_tools = (*t)->ApplyChatTemplate({{"user", "hi"}}, options);
  ASSERT_FALSE(with_tools.ok());
  EXPECT_THAT(std::string(with_tools.status().message()),
              HasSubstr("need the checkpoint's own template"));
}

TEST(ChatJinjaTest, DeeplyNestedMessageFieldsAreRefused) {
  const std::string config = Json{{"chat_template", "{{ messages|tojson }}"}}.dump();
  auto t = Tokenizer::FromStrings(MinimalTokenizerJson(), config);
  ASSERT_TRUE(t.ok()) << t.status();
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  ChatMessage m{"assistant", "", Json::object()};
  m.extra["tool_calls"] = std::move(deep);
  auto r = (*t)->ApplyChatTemplate({m}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("deeper than 128"));
}

}  // namespace
}  // namespace tandem::engine
