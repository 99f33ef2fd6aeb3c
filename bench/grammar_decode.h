// Batch-1 decode with and without a JSON-schema constraint, measured in one run (grammar_bench's
// "decode" section).
//
// One model, one prompt of `context` random tokens (prefilled untimed before each run), then
// `steps` decode steps, each a Forward of the last token followed by Sampler::Sample
// (temperature 1, the same seed in both modes). The runs alternate, unconstrained then
// constrained, `repeats` times, so a shared host's swings hit both alike; per pair the ratio
// constrained tok/s / unconstrained tok/s is reported (min, median, max), with the sampler's
// time per token in each mode (mean, p50, p99), the constrained sampler's mask-cache hit rate
// and the constraint's compile time (Sampler::Create, median over the runs).
#ifndef TANDEM_BENCH_GRAMMAR_DECODE_H_
#define TANDEM_BENCH_GRAMMAR_DECODE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

struct GrammarDecodeOptions {
  std::string model_dir;  // a model with its tokenizer.json
  std::string schema;     // the JSON schema of the constrained runs
  int steps = 0;
  int repeats = 5;
  int context = 32;
  int threads = 2;
  uint64_t seed = 1;
};

// The report, or the error of loading the model or tokenizer or of a Forward / Sample.
absl::StatusOr<nlohmann::json> RunGrammarDecode(const GrammarDecodeOptions& options);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_GRAMMAR_DECODE_H_
