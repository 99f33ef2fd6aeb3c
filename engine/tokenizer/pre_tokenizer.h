// The pre-tokenizer stage of a Hugging Face tokenizer: splits normalized text into the pieces
// BPE works on. Supports `Split` (regex or literal pattern, every delimiter behaviour, invert),
// `ByteLevel` (add_prefix_space, use_regex) and `Sequence` of them. Regexes are compiled with
// PCRE2 in UTF mode with Unicode properties; `\s`/`\S` are rewritten to the White_Space set
// that Oniguruma (the engine of the reference Rust implementation) uses, so that U+0085 counts
// as whitespace as it does there. Immutable after construction, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define TANDEM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace tandem::engine {

// A compiled PCRE2 pattern. Thread-safe for concurrent matching.
class Regex {
 public:
  // Compiles `pattern` (HF/Oniguruma syntax as used in tokenizer.json). Errors carry PCRE2's
  // message and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of all non-overlapping matches in well-formed UTF-8
  // `text`, left to right. Empty matches are skipped.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*, owned.
};

class PreTokenizer {
 public:
  // Parses tokenizer.json's `pre_tokenizer` value found at `path` (JSON null: the whole text is
  // one piece).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const json_fields::Json& value,
                                                                const std::string& path);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits well-formed UTF-8 `text` into pieces, appended to `*pieces`. When a ByteLevel step
  // is present the pieces are in the byte-level alphabet.
  void Split(std::string_view text, std::vector<std::string>* pieces) const;

  // True if a ByteLevel step maps pieces to the byte-level alphabet.
  bool byte_level() const;

 private:
  struct Step;
  PreTokenizer();
  static absl::Status Parse(const json_fields::Json& value, const std::string& path,
                            std::vector<std::unique_ptr<Step>>* steps);
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
