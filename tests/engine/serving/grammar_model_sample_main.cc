// grammar_model_sample: the JSON Schema corpus sampled by the shipped model through the
// Scheduler (temperature 1), one JSON line per output ({"name", "seed", "schema", "output"}), for
// validate_json_samples.py. Exit code 1 when sampling fails or an output did not end with
// finish reason stop or length.
//   grammar_model_sample [seeds=3]
#include <cstdlib>
#include <iostream>

#include "tests/engine/serving/corpus_model_samples.h"

int main(int argc, char** argv) {
  using namespace tandem::engine;
  using namespace tandem::engine::testing;
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<grammar::testing::CorpusCase> cases;
  for (auto& c : grammar::testing::LoadCorpus()) {
    if (c.kind == "json_schema") cases.push_back(std::move(c));
  }
  auto samples = SampleCorpusWithModel(cases, seeds);
  if (!samples.ok()) {
    std::cerr << samples.status() << "\n";
    return 1;
  }
  for (const CorpusModelSample& s : *samples) {
    if (!s.got.finish.has_value() || s.got.finish->kind == FinishReason::Kind::kAbort) {
      std::cerr << s.corpus_case.name << " seed " << s.seed << ": did not finish by stop/length\n";
      return 1;
    }
    nlohmann::json line = {{"name", s.corpus_case.name},
                           {"seed", s.seed},
                           {"schema", s.corpus_case.grammar},
                           {"output", s.output}};
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
