// The `mixed` dataset of tandem-bench (no bench_serving counterpart): two length classes in
// fixed proportions, the workload where prefill-decode disaggregation is meant to pay off, e.g.
// 20% long prompts (2,048 in, 64 out) among 80% short chat turns (128-256 in, 256 out):
//
//   classes   exactly round(num_prompts * long_fraction) rows are long, the rest short; which
//             positions are long is a Python random.shuffle of the class labels (so the long
//             prompts are spread through the run, not bunched at its start);
//   lengths   long: long_input_len in, long_output_len out; short: input uniform in
//             [short_input_min, short_input_max] (one np.random.randint draw per short row, in
//             row order), short_output_len out;
//   tokens    as random-ids draws them (dataset.h): one offset per row from np.random.randint(0,
//             vocab), token j of row i being (offset_i + i + j) % vocab. Rows sent as text leave
//             room for the tokens the tokenizer's post-processor adds, as `random` does.
//
// Deterministic for a given seed and tokenizer; thread-compatible.
#ifndef TANDEM_BENCH_TANDEM_BENCH_MIXED_DATASET_H_
#define TANDEM_BENCH_TANDEM_BENCH_MIXED_DATASET_H_

#include <vector>

#include "absl/status/statusor.h"
#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/upstream_random.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::bench {

struct MixedDatasetOptions {
  int num_prompts = 100;
  double long_fraction = 0.2;  // in [0, 1]
  int long_input_len = 2048;
  int long_output_len = 64;
  int short_input_min = 128;
  int short_input_max = 256;
  int short_output_len = 256;
  bool tokenize_prompt = false;  // rows carry ids only (no allowance for special tokens)
  int32_t vocab_size = 0;        // HfVocabSize of the tokenizer
};

// The rows, in send order. InvalidArgument naming the flag for a bad option.
absl::StatusOr<std::vector<DatasetRow>> GenerateMixedDataset(const engine::Tokenizer& tokenizer,
                                                             const MixedDatasetOptions& options,
                                                             BenchRandom& rng);

// How many of `num_prompts` rows are long: round(num_prompts * long_fraction).
int MixedLongCount(int num_prompts, double long_fraction);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_MIXED_DATASET_H_
