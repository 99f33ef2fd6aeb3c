// Tokenizers for the sampling tests: the shipped model's and, when the npm reference packages
// are installed, Qwen3's and Llama-3's. Loaded once per process; never freed (test-only).
#ifndef TANDEM_TESTS_ENGINE_SAMPLING_TEST_TOKENIZERS_H_
#define TANDEM_TESTS_ENGINE_SAMPLING_TEST_TOKENIZERS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {
// gtest prints a FinishReason as its JSON.
inline void PrintTo(const FinishReason& r, std::ostream* os) { *os << r.ToJson().dump(); }
}  // namespace tandem::engine

namespace tandem::engine::testing {

struct NamedTokenizer {
  std::string name;
  const Tokenizer* tokenizer;
};

// models/tandem-tiny-english (always present; a test fails if it cannot be loaded).
const Tokenizer& TinyEnglishTokenizer();
// The tandem-tiny-english tokenizer plus Qwen3 and Llama-3 when their files exist.
std::vector<NamedTokenizer> AllTokenizers();

// One byte-level token per byte of `text` (byte-level BPE vocabularies hold all 256 bytes).
std::vector<int32_t> ByteTokens(const Tokenizer& tokenizer, std::string_view text);
// Encodes each piece separately (no special tokens) and concatenates the ids, so token
// boundaries fall at least at the piece boundaries.
std::vector<int32_t> PieceTokens(const Tokenizer& tokenizer,
                                 const std::vector<std::string>& pieces);

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_SAMPLING_TEST_TOKENIZERS_H_
