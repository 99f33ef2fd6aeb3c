#include "tests/engine/grammar/grammar_corpus.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/grammar/ebnf_compiler.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace tandem::engine::grammar::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

Json ReadJson(const std::string& name) {
  std::ifstream in(fs::path(TANDEM_SOURCE_DIR) / "tests/engine/grammar/corpus" / name);
  return Json::parse(in);
}

}  // namespace

std::vector<CorpusCase> LoadCorpus() {
  std::vector<CorpusCase> cases;
  for (const char* kind : {"json_schema", "regex", "ebnf"}) {
    for (const Json& entry : ReadJson(std::string(kind) + ".json")) {
      CorpusCase c;
      c.kind = kind;
      c.name = entry.at("name").get<std::string>();
      c.grammar = entry.at("grammar");
      c.accept = entry.at("accept").get<std::vector<std::string>>();
      c.reject = entry.at("reject").get<std::vector<std::string>>();
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

Json LoadInvalidCorpus() { return ReadJson("invalid.json"); }

absl::StatusOr<GrammarPtr> CompileCase(const std::string& kind, const Json& grammar) {
  if (kind == "json_schema") return CompileJsonSchema(grammar.dump());
  if (kind == "regex") return CompileRegex(grammar.get<std::string>());
  if (kind == "ebnf") return CompileEbnf(grammar.get<std::string>());
  return absl::InvalidArgumentError("unknown kind " + kind);
}

const TokenVocabulary& TinyEnglishVocabulary() {
  static const TokenVocabulary* vocabulary = [] {
    auto tokenizer =
        Tokenizer::FromModelDir(fs::path(TANDEM_SOURCE_DIR) / "models/tandem-tiny-english");
    if (!tokenizer.ok()) {
      ADD_FAILURE() << tokenizer.status();
      return new TokenVocabulary({}, {});
    }
    std::vector<std::string> bytes;
    for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
      bytes.push_back((*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/true));
    }
    return new TokenVocabulary(std::move(bytes), (*tokenizer)->eos_token_ids());
  }();
  return *vocabulary;
}

std::string SampleOutput(const GrammarPtr& grammar, const TokenVocabulary& vocabulary,
                         uint64_t seed, int max_tokens, std::vector<int32_t>* tokens) {
  std::mt19937_64 rng(seed);
  GrammarMatcher matcher = GrammarMatcher::Create(grammar).value();
  std::string output;
  std::vector<uint32_t> mask(MaskWords(vocabulary.vocab_size()));
  for (int step = 0; step < max_tokens; ++step) {
    ComputeTokenMask(matcher, vocabulary, mask);
    std::vector<int32_t> allowed;
    bool eos_allowed = false;
    for (int32_t id = 0; id < vocabulary.vocab_size(); ++id) {
      if (!MaskAllows(mask, id)) continue;
      if (vocabulary.is_eos(id)) {
        eos_allowed = true;
      } else {
        allowed.push_back(id);
      }
    }
    if (eos_allowed && (allowed.empty() || rng() % 8 == 0)) return output;
    if (allowed.empty()) break;  // no token fits; the byte completion below finishes
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(AcceptToken(matcher, vocabulary, id));
    output += vocabulary.token_bytes(id);
    if (tokens != nullptr) tokens->push_back(id);
  }
  // Finish along a shortest completion, one byte at a time.
  while (!matcher.IsComplete()) {
    const int64_t remaining = matcher.MinBytesToComplete();
    bool advanced = false;
    const ByteSet next = matcher.next_bytes();
    for (int b = 0; b < 256 && !advanced; ++b) {
      if (!next.test(b) || !matcher.Accept(static_cast<uint8_t>(b))) continue;
      if (matcher.MinBytesToComplete() < remaining) {
        output.push_back(static_cast<char>(b));
        advanced = true;
      } else {
        matcher.Rollback(1);
      }
    }
    if (!advanced) {
      ADD_FAILURE() << "no byte shortens the completion of \"" << output << "\"";
      break;
    }
  }
  return output;
}

}  // namespace tandem::engine::grammar::testing
