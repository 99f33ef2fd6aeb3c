// The added tokens of a tokenizer.json (`added_tokens`): special tokens such as <|im_start|>
// and ordinary added tokens such as <think>. Finds them in text before normalization and
// pre-tokenization, the way Hugging Face tokenizers does: leftmost-longest match; tokens with
// `normalized: false` are matched on the raw text, those with `normalized: true` on the
// normalized text; `lstrip`/`rstrip` absorb neighbouring whitespace; `single_word` tokens only
// match between non-word characters. Immutable after construction, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_ADDED_VOCAB_H_
#define TANDEM_ENGINE_TOKENIZER_ADDED_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace tandem::engine {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedVocabulary {
 public:
  // Parses tokenizer.json's `added_tokens` array found at `path` (absent: empty).
  static absl::StatusOr<AddedVocabulary> FromJson(const json_fields::Json* value,
                                                  const std::string& path);
  AddedVocabulary() = default;

  // A piece of text: either an added token (`id` set) or text to tokenize further.
  struct Segment {
    std::string_view text;
    std::optional<int32_t> id;
  };
  // Splits `text` on the added tokens whose `normalized` flag equals `normalized`. Segments
  // point into `text`; stripped whitespace belongs to no segment.
  std::vector<Segment> Split(std::string_view text, bool normalized) const;

  // The added token with this id, or nullptr.
  const AddedToken* Find(int32_t id) const;
  std::optional<int32_t> FindContent(std::string_view content) const;
  int32_t max_id() const { return max_id_; }
  bool has_normalized() const { return has_normalized_; }

 private:
  struct Match {
    size_t begin, end;
    const AddedToken* token;
  };
  // The leftmost-longest match of a token with the given `normalized` flag at or after `from`.
  std::optional<Match> FindNext(std::string_view text, size_t from, bool normalized) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  // Indices into tokens_, grouped by first byte and sorted longest first.
  std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
  int32_t max_id_ = -1;
  bool has_normalized_ = false;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_ADDED_VOCAB_H_
