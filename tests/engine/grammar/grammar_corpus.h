// The grammar test corpus (tests/engine/grammar/corpus/*.json) and the shipped model's
// vocabulary, shared by the grammar tests and the sampler behind the JSON Schema validation.
#ifndef TANDEM_TESTS_ENGINE_GRAMMAR_GRAMMAR_CORPUS_H_
#define TANDEM_TESTS_ENGINE_GRAMMAR_GRAMMAR_CORPUS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::grammar::testing {

struct CorpusCase {
  std::string kind;  // "json_schema", "regex" or "ebnf"
  std::string name;
  nlohmann::ordered_json grammar;  // the schema, or the pattern / EBNF text as a string
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

// Every case of corpus/json_schema.json, regex.json and ebnf.json.
std::vector<CorpusCase> LoadCorpus();
// corpus/invalid.json: {kind, grammar, error} entries.
nlohmann::ordered_json LoadInvalidCorpus();

absl::StatusOr<GrammarPtr> CompileCase(const std::string& kind,
                                       const nlohmann::ordered_json& grammar);

// models/tandem-tiny-english' vocabulary (special tokens have no bytes), loaded once.
const TokenVocabulary& TinyEnglishVocabulary();

// One random output under the grammar: up to `max_tokens` tokens drawn uniformly among those
// the mask allows (EOS, when allowed, with probability 1/8), then the shortest byte completion
// if the output is not complete yet. Returns the output's bytes; `tokens` (optional) receives
// the drawn token ids.
std::string SampleOutput(const GrammarPtr& grammar, const TokenVocabulary& vocabulary,
                         uint64_t seed, int max_tokens, std::vector<int32_t>* tokens = nullptr);

}  // namespace tandem::engine::grammar::testing

#endif  // TANDEM_TESTS_ENGINE_GRAMMAR_GRAMMAR_CORPUS_H_
