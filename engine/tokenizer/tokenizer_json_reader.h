// Streaming reader of tokenizer.json. The vocabulary and merge list hold hundreds of thousands
// of entries; building a JSON DOM for them dominates load time, so they are streamed straight
// into flat vectors while everything else becomes an ordinary nlohmann::json value.
// Pure function, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_TOKENIZER_JSON_READER_H_
#define TANDEM_ENGINE_TOKENIZER_TOKENIZER_JSON_READER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace tandem::engine {

// `model.vocab` and `model.merges` as found in the file.
struct BpeTables {
  struct MergeEntry {
    std::string left;   // the whole "a b" line when `legacy`
    std::string right;  // empty when `legacy`
    bool legacy = false;
  };
  bool has_vocab = false;   // model.vocab was an object and is in `vocab`
  bool has_merges = false;  // model.merges was an array and is in `merges`
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<MergeEntry> merges;
};

// Parses `contents`. When model.vocab is an object and model.merges an array, their entries are
// moved to `*tables` and the DOM keeps an empty object/array in their place. Syntax errors and
// ill-typed vocab/merge entries are InvalidArgument errors naming the field.
absl::StatusOr<json_fields::Json> ReadTokenizerJson(std::string_view contents, BpeTables* tables);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_TOKENIZER_JSON_READER_H_
