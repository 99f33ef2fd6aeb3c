// The prompt sets tandem-bench sends, generated as `python -m sglang.bench_serving` generates
// them, with prompt lengths that are exact token counts under the served model's tokenizer.
//
//   random                  input lengths uniform in [max(in * ratio, 1), in], output lengths
//                           in [max(out * ratio, 1), out]; the prompt's tokens come from a ShareGPT
//                           file's first turns (repeated/cut) when --dataset-path names one,
//                           otherwise they are drawn uniformly from the ordinary vocabulary.
//   random-ids              the same lengths; token j of prompt i is (offset_i + i + j) mod vocab.
//   sharegpt                the first two turns of each conversation of a ShareGPT JSON file,
//                           shuffled; prompts or answers under 2 tokens are dropped.
//   generated-shared-prefix groups of prompts "<system prompt>\n\n<question>": every prompt of a
//                           group starts with the same system prompt; all prompts shuffled.
//
// Exactness: bench_serving decodes sampled ids to text, which does not always re-encode to the
// same count. Here every random prompt is checked by encoding its text (without the
// post-processor's special tokens, e.g. BOS) and adjusted until that count is the requested one.
// Output lengths are never 0 (bench_serving may ask for max_new_tokens=0; servers differ on it).
//
// Everything is deterministic for a given seed and tokenizer. Thread-compatible (pure functions).
#ifndef TANDEM_BENCH_TANDEM_BENCH_DATASET_H_
#define TANDEM_BENCH_TANDEM_BENCH_DATASET_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::bench {

struct DatasetRow {
  std::string prompt;
  int prompt_len = 0;  // tokens of `prompt` (text tokens, no BOS)
  int output_len = 0;  // max_new_tokens to ask for
};

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 1024;
  double range_ratio = 0.0;   // in [0, 1]
  bool ids = false;           // random-ids instead of random
  std::string sharegpt_path;  // optional source text for `random`
};

struct ShareGptOptions {
  std::string path;
  int num_prompts = 1000;
  int fixed_output_len = 0;  // > 0 overrides the answers' lengths
  int context_len = 0;       // > 0 drops prompt + output longer than this
};

struct SharedPrefixOptions {
  int num_groups = 64;
  int prompts_per_group = 16;
  int system_prompt_len = 2048;
  int question_len = 128;
  int output_len = 256;
};

// Each generator validates its options (InvalidArgument naming the flag) and reports unreadable
// or malformed files as errors naming the file.
absl::StatusOr<std::vector<DatasetRow>> GenerateRandomDataset(const engine::Tokenizer& tokenizer,
                                                              const RandomDatasetOptions& options,
                                                              std::mt19937_64& rng);
absl::StatusOr<std::vector<DatasetRow>> LoadShareGptDataset(const engine::Tokenizer& tokenizer,
                                                            const ShareGptOptions& options,
                                                            std::mt19937_64& rng);
absl::StatusOr<std::vector<DatasetRow>> GenerateSharedPrefixDataset(
    const engine::Tokenizer& tokenizer, const SharedPrefixOptions& options, std::mt19937_64& rng);

// A text of exactly `num_tokens` tokens (Encode(text, false).size()), starting from `ids`
// decoded and adjusted with tokens drawn from `pool` until the count matches. Internal error
// when no such text is found (practically never: byte-level BPE can always be adjusted).
absl::StatusOr<std::string> TextOfExactLength(const engine::Tokenizer& tokenizer,
                                              std::vector<int32_t> ids, int num_tokens,
                                              const std::vector<int32_t>& pool,
                                              std::mt19937_64& rng);

// The ids random prompts draw from: every id that decodes to non-empty text and is not an
// added/special token.
std::vector<int32_t> OrdinaryTokenIds(const engine::Tokenizer& tokenizer);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_DATASET_H_
