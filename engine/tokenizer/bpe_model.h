// The byte-pair-encoding model of a Hugging Face tokenizer.json (`model.type == "BPE"`): the
// vocabulary, the merge ranks (both serialisations: "a b" strings and ["a", "b"] pairs), and the
// merge loop. Merging uses a priority queue over a linked list of symbols, so a piece of n
// characters costs O(n log n). Results for short pieces are memoised in a bounded cache.
// Thread-safe: the vocabulary is immutable after load and the cache is mutex-protected.
#ifndef TANDEM_ENGINE_TOKENIZER_BPE_MODEL_H_
#define TANDEM_ENGINE_TOKENIZER_BPE_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/tokenizer_json_reader.h"

namespace tandem::engine {

class BpeModel {
 public:
  // Parses tokenizer.json's `model` object found at `path`, taking the vocabulary and merges
  // from `tables` where the streaming reader extracted them. Any other model type (Unigram,
  // WordPiece, WordLevel) is an error naming it.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const json_fields::Json& model,
                                                            const std::string& path,
                                                            const BpeTables* tables);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-tokenized piece (in the model's alphabet) to `*ids`.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr if the model has no such id.
  const std::string* IdToToken(int32_t id) const;
  // Largest vocabulary id + 1.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void Merge(std::string_view piece, std::vector<int32_t>* ids) const;
  // Ids of one character that is not in the vocabulary: byte-fallback tokens or unk, or none.
  void AppendUnknown(std::string_view ch, std::vector<int32_t>* ids) const;

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  struct MergeTarget {
    int32_t rank;
    int32_t id;
  };

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids the vocabulary skips
  absl::flat_hash_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  static constexpr size_t kCacheCapacity = 20000;
  static constexpr size_t kMaxCachedPieceBytes = 256;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_BPE_MODEL_H_
