// The normalizer stage of a Hugging Face tokenizer: Unicode normalization forms (NFC, NFD, NFKC,
// NFKD), alone or as a `Sequence`. Immutable after construction, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_NORMALIZER_H_
#define TANDEM_ENGINE_TOKENIZER_NORMALIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace tandem::engine {

class Normalizer {
 public:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };

  // Parses tokenizer.json's `normalizer` value found at `path` (JSON null: no normalization).
  // Unsupported normalizer types are an error naming the type.
  static absl::StatusOr<Normalizer> FromJson(const json_fields::Json& value,
                                             const std::string& path);

  // An identity normalizer.
  Normalizer() = default;

  bool empty() const { return steps_.empty(); }

  // Applies every step to well-formed UTF-8 `text`.
  std::string Normalize(std::string_view text) const;

 private:
  static absl::Status Parse(const json_fields::Json& value, const std::string& path,
                            std::vector<Form>* steps);

  std::vector<Form> steps_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_NORMALIZER_H_
