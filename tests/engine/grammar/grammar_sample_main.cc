// grammar_sample: random outputs of the JSON Schema corpus under the token mask, one JSON line
// per output ({"name", "seed", "schema", "output"}), for validate_json_samples.py.
//   grammar_sample [seeds=8] [max_tokens=64]
#include <cstdlib>
#include <iostream>

#include "tests/engine/grammar/grammar_corpus.h"

int main(int argc, char** argv) {
  using namespace tandem::engine::grammar::testing;
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 8;
  const int max_tokens = argc > 2 ? std::atoi(argv[2]) : 64;
  const auto& vocab = TinyEnglishVocabulary();
  for (const CorpusCase& c : LoadCorpus()) {
    if (c.kind != "json_schema") continue;
    auto grammar = CompileCase(c.kind, c.grammar);
    if (!grammar.ok()) {
      std::cerr << c.name << ": " << grammar.status() << "\n";
      return 1;
    }
    for (int seed = 1; seed <= seeds; ++seed) {
      nlohmann::json line = {{"name", c.name},
                             {"seed", seed},
                             {"schema", c.grammar},
                             {"output", SampleOutput(*grammar, vocab, seed, max_tokens)}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
  }
  return 0;
}
