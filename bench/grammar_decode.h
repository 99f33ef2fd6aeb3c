// Batch-1 decode with and without a JSON-schema constraint, measured in one run (grammar_bench's
// "decode" section).
//
// One model, two sequences with the same prompt of `context` random tokens, one sampled plainly
// and one under the JSON schema (Sampler::Sample, temperature 1, the same seed). Each pair of
// runs decodes `steps` tokens on both, step by step, the two modes alternating at every step
// (which one goes first alternating too), so a shared host's swings hit both alike; the prefill
// and its first token are untimed. A step's time is its Forward plus its Sample. Per pair the
// ratio constrained tok/s / plain tok/s is reported (min, median, max over `repeats` pairs), with
// the sampler's time per token in each mode (mean, p50, p99), their difference (the mask's cost
// per token) also as a share of the plain step time, the constrained sampler's mask-cache hit
// rate and the constraint's compile time (Sampler::Create, median over the pairs).
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
  // The requests' max_new_tokens (0: steps + 1). Near it the constraint also narrows the mask to
  // what can still complete in the tokens left (engine/grammar/length_budget.h), which costs more.
  int max_new_tokens = 0;
  int repeats = 5;
  int context = 32;
  int threads = 2;
  uint64_t seed = 1;
};

// The report, or the error of loading the model or tokenizer or of a Forward / Sample.
absl::StatusOr<nlohmann::json> RunGrammarDecode(const GrammarDecodeOptions& options);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_GRAMMAR_DECODE_H_
