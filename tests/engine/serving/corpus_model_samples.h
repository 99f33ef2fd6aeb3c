// The grammar test corpus (tests/engine/grammar/corpus) sampled by the shipped model through the
// Scheduler: every case under several seeds at temperature 1, all requests batched together.
// Shared by grammar_corpus_model_test (the matcher, PCRE2 and JSON checks) and
// grammar_model_sample (the outputs validate_json_samples.py checks with python3-jsonschema).
#ifndef TANDEM_TESTS_ENGINE_SERVING_CORPUS_MODEL_SAMPLES_H_
#define TANDEM_TESTS_ENGINE_SERVING_CORPUS_MODEL_SAMPLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampler.h"
#include "tests/engine/grammar/grammar_corpus.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {

struct CorpusModelSample {
  grammar::testing::CorpusCase corpus_case;
  uint64_t seed = 0;
  int32_t max_new_tokens = 0;
  Collected got;       // the request's outputs (tokens, finish reason)
  std::string output;  // the generated tokens' bytes (EOS has none)
};

// The constraint a corpus case is served with.
GrammarConstraint CorpusConstraint(const grammar::testing::CorpusCase& c);

// The token budget of a case: max(64, shortest string in bytes + 16), at least the shortest
// string, so the length-aware closing guarantees a complete output
// (engine/grammar/length_budget.h).
absl::StatusOr<int32_t> CorpusBudget(const grammar::testing::CorpusCase& c);

// Submits every case of `cases` with seeds 1..`seeds` (temperature 1, EOS honoured) to one
// Scheduler over the shipped model and steps it until idle (bounded). Errors: a case that does
// not compile or is refused at Submit, a failed step, or work left after the step bound.
absl::StatusOr<std::vector<CorpusModelSample>> SampleCorpusWithModel(
    const std::vector<grammar::testing::CorpusCase>& cases, int seeds);

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_SERVING_CORPUS_MODEL_SAMPLES_H_
