// The prompt sets tandem-bench sends, drawn as `python -m sglang.bench_serving` draws them (the
// version whose flags the seed reports print: datasets in sglang.benchmark.datasets, lengths from
// compute_random_lens), from the same generators (upstream_random.h) in the same order, so a
// --seed gives the same lengths and token ids as upstream:
//
//   lengths                 compute_random_lens: np.random.randint(max(int(len * ratio), 1),
//                           len + 1, size=n); a length of 0 gives n zeros without a draw
//                           (--random-output-len 0: zero-token requests). Input lengths first,
//                           then output lengths. Older bench_serving drew output lengths from
//                           [int(len * ratio), len], so ratio 0 could draw 0 (seed 1, 200 x
//                           64/16: 14 zeros, 1698 output tokens); the seed-004 report's 1653
//                           output tokens are this rule's, which never draws 0 for len > 0. Prompts
//                           sent as text leave room for the tokens the tokenizer's post-processor
//                           adds (e.g. BOS), as upstream.
//   random                  the first turns of a ShareGPT file (--dataset-path), shuffled with
//                           Python's random.shuffle, each encoded and repeated/cut to its length;
//                           conversations whose prompt encodes to nothing are skipped.
//                           Without a file upstream downloads ShareGPT; nothing is downloaded
//                           here: the ids are drawn as random-ids draws them (main says so).
//   random-ids              offsets = np.random.randint(0, vocab, n); token j of prompt i is
//                           (offsets[i] + i + j) % vocab, vocab being Hugging Face's
//                           tokenizer.vocab_size (the model vocabulary without added tokens).
//   sharegpt                the first two turns of each conversation, shuffled with Python's
//                           random.shuffle; --prompt-suffix is put before a trailing
//                           "Assistant:", --apply-chat-template renders the prompt as a user
//                           turn (BOS text removed); prompts or answers under 2 tokens are
//                           dropped; --sharegpt-output-len must be >= 4.
//   generated-shared-prefix lengths as above with --gsp-range-ratio; each system prompt, then
//                           each question, is random.choices(vocabulary, k=len) decoded; the
//                           prompt is "<system prompt>\n\n<question>"; all rows shuffled with
//                           random.shuffle unless --gsp-ordered.
//
// Where the datasets differ from upstream's:
//   * random without --dataset-path: upstream's ids come from the downloaded ShareGPT file,
//     ours from the random-ids formula; the lengths are the same, and because the offsets are n
//     more numpy draws, the Poisson gaps of a finite --request-rate come later in numpy's
//     sequence than upstream's (with a file, both match).
//   * generated-shared-prefix draws from the vocabulary in id order; upstream draws from
//     tokenizer.get_vocab().values(), whose order is a Rust hash map's and differs from run to
//     run, so upstream's own ids are not reproducible; the draws' positions are.
// Not a difference, but worth knowing: a prompt is sent as the text its ids decode to, as
// upstream does, and the server may count another number of tokens than prompt_len (the table
// counts prompt_len, as upstream). --tokenize-prompt (sglang backend) sends the ids themselves.
//
// Everything is deterministic for a given seed and tokenizer. Thread-compatible.
#ifndef TANDEM_BENCH_TANDEM_BENCH_DATASET_H_
#define TANDEM_BENCH_TANDEM_BENCH_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/tandem_bench/upstream_random.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::bench {

struct DatasetRow {
  std::string prompt;               // the text sent (empty when the ids are sent instead)
  std::vector<int32_t> prompt_ids;  // the drawn ids (random datasets; empty otherwise)
  int prompt_len = 0;               // tokens counted for the table, as upstream counts them
  int output_len = 0;               // max_new_tokens to ask for (may be 0)
};

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 1024;         // 0: every request asks for no token
  double range_ratio = 0.0;      // in [0, 1]
  bool ids = false;              // random-ids instead of random
  std::string sharegpt_path;     // the token source of `random`
  bool tokenize_prompt = false;  // rows carry ids only (no allowance for special tokens)
  int32_t vocab_size = 0;        // HfVocabSize of the tokenizer (random-ids)
};

struct ShareGptOptions {
  std::string path;
  int num_prompts = 1000;
  int fixed_output_len = 0;          // > 0 overrides the answers' lengths
  int context_len = 0;               // > 0 drops prompt + output longer than this
  std::string prompt_suffix;         // --prompt-suffix: before a final "Assistant:"
  bool apply_chat_template = false;  // --apply-chat-template: the prompt as one user turn
};

struct SharedPrefixOptions {
  int num_groups = 64;
  int prompts_per_group = 16;
  int system_prompt_len = 2048;
  int question_len = 128;
  int output_len = 256;
  double range_ratio = 1.0;   // --gsp-range-ratio (upstream's default differs from random's)
  bool ordered = false;       // --gsp-ordered: no shuffle
  bool fast_prepare = false;  // --gsp-fast-prepare: prompt_len 1 instead of encoding
};

// compute_random_lens: `num` lengths uniform in [max(int(full_len * ratio), 1), full_len], or
// `num` zeros (no draw) when full_len <= 0.
std::vector<int> ComputeRandomLens(int full_len, double ratio, int num, NumpyRandomState& numpy);

// Hugging Face's tokenizer.vocab_size: the number of entries of tokenizer.json's model.vocab
// (added tokens not counted). Errors name the file.
absl::StatusOr<int32_t> HfVocabSize(const std::string& model_dir);

// Each generator validates its options (InvalidArgument naming the flag) and reports unreadable
// or malformed files as errors naming the file.
absl::StatusOr<std::vector<DatasetRow>> GenerateRandomDataset(const engine::Tokenizer& tokenizer,
                                                              const RandomDatasetOptions& options,
                                                              BenchRandom& rng);
absl::StatusOr<std::vector<DatasetRow>> LoadShareGptDataset(const engine::Tokenizer& tokenizer,
                                                            const ShareGptOptions& options,
                                                            BenchRandom& rng);
absl::StatusOr<std::vector<DatasetRow>> GenerateSharedPrefixDataset(
    const engine::Tokenizer& tokenizer, const SharedPrefixOptions& options, BenchRandom& rng);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_DATASET_H_
