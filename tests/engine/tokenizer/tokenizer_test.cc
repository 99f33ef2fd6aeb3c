// Behaviour of the tokenizer on small hand-written tokenizer.json files: both merge formats,
// added tokens, malformed files, streaming detokenization, invalid UTF-8 input.
#include "engine/tokenizer/tokenizer.h"

#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// A byte-level BPE over the full 256-character alphabet (ids 0..255 in byte order) plus
// `merges`, each adding the concatenation as the next id.
Json ByteLevelTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                        bool pair_format) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    BytesToByteLevel(std::string(1, static_cast<char>(b)), &ch);
    vocab[ch] = b;
  }
  Json merge_list = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    if (pair_format) {
      merge_list.push_back(Json::array({a, b}));
    } else {
      merge_list.push_back(a + " " + b);
    }
  }
  Json split = {{"type", "Split"},
                {"pattern",
                 {{"Regex",
                   "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                   "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                   "\\s+(?!\\S)|\\s+"}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return {
      {"version", "1.0"},
      {"added_tokens",
       Json::array(
           {{{"id", next}, {"content", "<|im_start|>"}, {"special", true}, {"normalized", false}},
            {{"id", next + 1}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}},
            {{"id", next + 2},
             {"content", "<tool>"},
             {"special", false},
             {"normalized", false},
             {"lstrip", true},
             {"rstrip", true}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"Ġw", "o"}};

std::unique_ptr<Tokenizer> Load(const Json& tokenizer, const std::string& config = "") {
  auto t = Tokenizer::FromStrings(tokenizer.dump(), config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string ErrorOf(const std::string& tokenizer_json, const std::string& config = "") {
  auto t = Tokenizer::FromStrings(tokenizer_json, config);
  return t.ok() ? std::string("(loaded)") : std::string(t.status().message());
}

TEST(TokenizerTest, BothMergeFormatsGiveTheSameTokens) {
  auto legacy = Load(ByteLevelTokenizer(kMerges, /*pair_format=*/false));
  auto pairs = Load(ByteLevelTokenizer(kMerges, /*pair_format=*/true));
  ASSERT_NE(legacy, nullptr);
  ASSERT_NE(pairs, nullptr);
  // "hello" merges fully (id 259 = "hello"); " wo" + "r" "l" "d".
  const std::vector<int32_t> want = {259, 261, 'r', 'l', 'd'};
  EXPECT_EQ(legacy->Encode("hello world"), want);
  EXPECT_EQ(pairs->Encode("hello world"), want);
  EXPECT_EQ(legacy->Decode(want), "hello world");
  EXPECT_EQ(legacy->vocab_size(), 262 + 3);
  EXPECT_EQ(legacy->TokenId("hello"), 259);
  EXPECT_EQ(legacy->TokenId("Ġwo"), 261);
  EXPECT_EQ(legacy->TokenId("<|im_end|>"), 263);
  EXPECT_FALSE(legacy->TokenId("nope").has_value());
}

TEST(TokenizerTest, PairFormatAllowsSpacesInsideTokens) {
  // Tokens with a literal space can only be written in the pair format.
  Json t = ByteLevelTokenizer({}, true);
  t["pre_tokenizer"] = nullptr;
  t["decoder"] = nullptr;
  t["post_processor"] = nullptr;
  t["model"]["vocab"] = {{"a", 0}, {" ", 1}, {"a ", 2}, {"a a", 3}};
  t["model"]["merges"] = Json::array({Json::array({"a", " "}), Json::array({"a ", "a"})});
  t["added_tokens"] = Json::array();
  auto tokenizer = Load(t);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("a aa "), ElementsAre(3, 2));
  // The legacy string form cannot express this merge.
  t["model"]["merges"] = Json::array({"a  ", "a  a"});
  EXPECT_THAT(ErrorOf(t.dump()), HasSubstr("model.merges[0]"));
}

TEST(TokenizerTest, MergesFollowRankNotPosition) {
  // "ll" (rank 1) must merge before "he" + "l"... and a lower-ranked pair wins anywhere.
  auto tokenizer = Load(ByteLevelTokenizer({{"l", "l"}, {"h", "e"}, {"e", "l"}}, true));
  ASSERT_NE(tokenizer, nullptr);
  // h e l l o: "ll" first (rank 0) → h e ll o; then "he" (rank 1) → he ll o.
  EXPECT_THAT(tokenizer->Encode("hello"), ElementsAre(257, 256, 'o'));
}

TEST(TokenizerTest, IgnoreMergesUsesWholeVocabularyEntries) {
  Json t = ByteLevelTokenizer({{"a", "b"}}, true);
  t["model"]["vocab"]["abc"] = 300;  // reachable only as a whole word
  auto plain = Load(t);
  t["model"]["ignore_merges"] = true;
  auto ignoring = Load(t);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(ignoring, nullptr);
  EXPECT_THAT(plain->Encode("abc"), ElementsAre(256, 'c'));
  EXPECT_THAT(ignoring->Encode("abc"), ElementsAre(300));
}

TEST(TokenizerTest, AddedTokensAreCutOutBeforeSplitting) {
  auto tokenizer = Load(ByteLevelTokenizer(kMerges, true));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("<|im_start|>hello<|im_end|>"), ElementsAre(262, 259, 263));
  // Almost-special text is ordinary text.
  EXPECT_EQ(tokenizer->Encode("<|im_start|")[0], '<');
  // lstrip/rstrip: the whitespace around <tool> belongs to the token.
  EXPECT_THAT(tokenizer->Encode("hello  <tool>\n hello"), ElementsAre(259, 264, 259));
  EXPECT_EQ(tokenizer->Decode({262, 259, 263}), "<|im_start|>hello<|im_end|>");
  EXPECT_EQ(tokenizer->Decode({262, 259, 263, 264}, /*skip_special_tokens=*/true), "hello<tool>");
}

TEST(TokenizerTest, NormalizesToNfc) {
  auto tokenizer = Load(ByteLevelTokenizer({}, true));
  ASSERT_NE(tokenizer, nullptr);
  // e + U+0301 composes to U+00E9, two bytes C3 A9.
  EXPECT_THAT(tokenizer->Encode("e\xCC\x81"), ElementsAre(0xC3, 0xA9));
}

TEST(TokenizerTest, InvalidUtf8IsReplacedLikeALossyDecode) {
  auto tokenizer = Load(ByteLevelTokenizer({}, true));
  ASSERT_NE(tokenizer, nullptr);
  // One U+FFFD per maximal ill-formed subpart: "\xE4\xB8" is one, "\xFF" another.
  EXPECT_EQ(tokenizer->Encode("a\xE4\xB8"
                              "b\xFF"),
            tokenizer->Encode("a\xEF\xBF\xBD"
                              "b\xEF\xBF\xBD"));
  // Decoding bytes that are not UTF-8 gives U+FFFD, never broken text.
  EXPECT_EQ(tokenizer->Decode({0xE4, 0xB8, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_TRUE(IsValidUtf8(tokenizer->Decode({0xFF, 0xC0, 0x80, 0xED, 0xA0, 0x80})));
  EXPECT_EQ(tokenizer->Decode({-1, 100000}), "");
}

TEST(TokenizerTest, CleanUpTokenizationSpacesFollowsConfig) {
  Json t = ByteLevelTokenizer({}, true);
  auto raw = Load(t, R"({"clean_up_tokenization_spaces": false})");
  auto clean = Load(t, R"({"clean_up_tokenization_spaces": true})");
  ASSERT_NE(raw, nullptr);
  ASSERT_NE(clean, nullptr);
  const std::string text = "Hi , it 's me .";
  EXPECT_EQ(raw->Decode(raw->Encode(text)), text);
  EXPECT_EQ(clean->Decode(clean->Encode(text)), "Hi, it's me.");
}

TEST(TokenizerTest, PostProcessorTemplateAddsBos) {
  Json t = ByteLevelTokenizer({}, true);
  t["added_tokens"].push_back({{"id", 500}, {"content", "<s>"}, {"special", true}});
  t["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       Json::array({{{"type", "ByteLevel"}},
                    {{"type", "TemplateProcessing"},
                     {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                     {"special_tokens",
                      {{"<s>", {{"id", "<s>"}, {"ids", {500}}, {"tokens", {"<s>"}}}}}}}})}};
  auto tokenizer = Load(t, R"({"bos_token": "<s>", "eos_token": {"content": "<|im_end|>"}})");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("a"), ElementsAre(500, 'a'));
  EXPECT_THAT(tokenizer->Encode("a", /*add_special_tokens=*/false), ElementsAre('a'));
  EXPECT_EQ(tokenizer->bos_token_id(), 500);
  ASSERT_TRUE(tokenizer->TokenId("<|im_end|>").has_value());
  EXPECT_THAT(tokenizer->eos_token_ids(), ::testing::Contains(*tokenizer->TokenId("<|im_end|>")));
}

TEST(TokenizerTest, ConcurrentEncodeAgreesWithSerial) {
  auto tokenizer = Load(ByteLevelTokenizer(kMerges, true));
  ASSERT_NE(tokenizer, nullptr);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("hello world " + std::to_string(i * 7919) + " wörld 世界 <|im_end|>" +
                    std::string(static_cast<size_t>(i % 13), 'l'));
  }
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& t : texts) serial.push_back(tokenizer->Encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t k = (i * 31 + static_cast<size_t>(w) * 17) % texts.size();
        if (tokenizer->Encode(texts[k]) != serial[k]) ++mismatches[w];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(mismatches, ::testing::Each(0));
}

TEST(IncrementalDetokenizerTest, HoldsBackSplitCharacters) {
  auto tokenizer = Load(ByteLevelTokenizer({}, true));
  ASSERT_NE(tokenizer, nullptr);
  IncrementalDetokenizer detok(*tokenizer);
  // 世 = E4 B8 96 arrives one byte-token at a time.
  EXPECT_EQ(detok.Push(0xE4), "");
  EXPECT_EQ(detok.Push(0xB8), "");
  EXPECT_EQ(detok.Push(0x96), "世");
  // 😀 = F0 9F 98 80 after ASCII: the ASCII goes out at once.
  EXPECT_EQ(detok.Push('a'), "a");
  EXPECT_EQ(detok.Push(0xF0), "");
  EXPECT_EQ(detok.Push(0x9F), "");
  EXPECT_EQ(detok.Push(0x98), "");
  EXPECT_EQ(detok.Push(0x80), "😀");
  // A sequence that cannot complete is replaced once it is known to be broken.
  EXPECT_EQ(detok.Push(0xE4), "");
  EXPECT_EQ(detok.Push('b'),
            "\xEF\xBF\xBD"
            "b");
  // Finish flushes an incomplete tail as U+FFFD.
  EXPECT_EQ(detok.Push(0xE4), "");
  EXPECT_EQ(detok.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.Finish(), "");
}

TEST(IncrementalDetokenizerTest, StreamEqualsDecode) {
  auto tokenizer =
      Load(ByteLevelTokenizer(kMerges, true), R"({"clean_up_tokenization_spaces": false})");
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "hello wörld 世界 👨‍👩‍👧 <|im_end|> e\xCC\x81 \xF0\x9F";
  const std::vector<int32_t> ids = tokenizer->Encode(text);
  IncrementalDetokenizer detok(*tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.Push(id);
    EXPECT_TRUE(IsValidUtf8(piece));
    streamed += piece;
  }
  streamed += detok.Finish();
  EXPECT_EQ(streamed, tokenizer->Decode(ids));
}

TEST(TokenizerErrorTest, MalformedFilesNameTheProblem) {
  const Json good = ByteLevelTokenizer(kMerges, true);
  EXPECT_THAT(ErrorOf("{\"model\": "), HasSubstr("tokenizer.json: not valid JSON"));
  const std::string full = good.dump();
  EXPECT_THAT(ErrorOf(full.substr(0, full.size() / 2)), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf("[]"), HasSubstr("expected an object"));
  EXPECT_THAT(ErrorOf("{}"), HasSubstr("field `model`: missing"));

  auto with = [&good](const std::string& pointer, const Json& value) {
    Json t = good;
    t[Json::json_pointer(pointer)] = value;
    return ErrorOf(t.dump());
  };
  EXPECT_THAT(with("/model/type", "Unigram"), HasSubstr("unsupported model type \"Unigram\""));
  EXPECT_THAT(with("/model/type", "WordPiece"), HasSubstr("field `model.type`"));
  EXPECT_THAT(with("/model/vocab", Json::array()),
              HasSubstr("field `model.vocab`: expected an object"));
  EXPECT_THAT(with("/model/vocab/h", "zero"), HasSubstr("model.vocab[\"h\"]"));
  EXPECT_THAT(with("/model/merges", "h e"), HasSubstr("field `model.merges`: expected an array"));
  EXPECT_THAT(with("/model/merges/0", 7), HasSubstr("field `model.merges[0]`"));
  EXPECT_THAT(with("/model/merges/1", Json::array({"l", "l", "l"})), HasSubstr("model.merges[1]"));
  EXPECT_THAT(with("/model/merges/2", "q zz"), HasSubstr("\"zz\" is not in the vocabulary"));
  EXPECT_THAT(with("/normalizer/type", "Lowercase"),
              HasSubstr("unsupported normalizer type \"Lowercase\""));
  EXPECT_THAT(with("/pre_tokenizer/pretokenizers/0/pattern/Regex", "(unclosed"),
              HasSubstr("pre_tokenizer.pretokenizers[0].pattern.Regex"));
  EXPECT_THAT(with("/pre_tokenizer/pretokenizers/0/behavior", "Sideways"),
              HasSubstr("unknown split behavior"));
  EXPECT_THAT(with("/pre_tokenizer/type", "Metaspace"),
              HasSubstr("unsupported pre-tokenizer type \"Metaspace\""));
  EXPECT_THAT(with("/decoder/type", "WordPiece"), HasSubstr("unsupported decoder type"));
  EXPECT_THAT(with("/added_tokens/0/id", "x"), HasSubstr("field `added_tokens[0].id`"));
  EXPECT_THAT(with("/added_tokens/1/content", nullptr), HasSubstr("added_tokens[1].content"));
  EXPECT_THAT(with("/model", 3), HasSubstr("field `model`: expected an object"));

  // tokenizer_config.json problems name that file.
  EXPECT_THAT(ErrorOf(good.dump(), "{"), HasSubstr("tokenizer_config.json: not valid JSON"));
  EXPECT_THAT(ErrorOf(good.dump(), R"({"eos_token": "<nope>"})"),
              HasSubstr("tokenizer_config.json: field `eos_token`"));
  EXPECT_THAT(ErrorOf(good.dump(), R"({"clean_up_tokenization_spaces": "yes"})"),
              HasSubstr("clean_up_tokenization_spaces"));
}

TEST(TokenizerErrorTest, MissingFilesNameThePath) {
  auto t = Tokenizer::FromModelDir("/nonexistent/model");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("/nonexistent/model/tokenizer.json"));
}

}  // namespace
}  // namespace tandem::engine
