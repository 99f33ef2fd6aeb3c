// grammar_bench: compile time and per-token mask cost of grammar-constrained decoding, printed
// as JSON.
//
//   grammar_bench [--model-dir models/tandem-tiny-english] [--tokens 128] [--seed 1]
//                 [--decode-steps 64 --decode-repeats 5 --threads 2] [--json out.json]
//                 [--decode-max-new-tokens N]
//
// For each grammar below: the compile time (median of repeated compiles) and, along one random
// generation of up to --tokens tokens (uniform among the tokens the mask allows, ending at EOS
// when it is drawn), per token (mean, p50, p99): the time of ComputeTokenMask (the trie walk,
// mask_us_*), of the mask as the sampler gets it through its TokenMaskCache (cached_mask_us_*,
// with the cache's hit rate), and of advancing the matcher by the drawn token. --model-dir picks
// the tokenizer (any directory with a tokenizer.json), e.g. a Qwen checkpoint for a 151k
// vocabulary.
//
// With --decode-steps > 0, --model-dir must hold a model too (e.g. tools/make_synthetic_model
// --preset qwen2.5-0.5b --tokenizer-from <a Qwen tokenizer>), and the "decode" section reports
// batch-1 decode with and without a JSON-schema constraint (bench_decode.cc).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/grammar_decode.h"
#include "engine/grammar/ebnf_compiler.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/mask_cache.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/grammar/structural_tag.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using namespace tandem::engine::grammar;
using Clock = std::chrono::steady_clock;

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct BenchGrammar {
  std::string name;
  std::function<absl::StatusOr<GrammarPtr>()> compile;
};

const char* kEventSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
    "participants": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "location": {"type": "object", "properties": {"city": {"type": "string"},
                 "country": {"enum": ["NO", "SE", "DK", "FI", "IS"]}},
                 "required": ["city", "country"], "additionalProperties": false},
    "priority": {"type": "integer"},
    "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
  },
  "required": ["name", "date", "participants", "location", "priority", "tags"],
  "additionalProperties": false
})";

const char* kRecursiveSchema = R"({
  "$ref": "#/$defs/node",
  "$defs": {"node": {"type": "object", "properties": {
    "value": {"type": "number"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    "required": ["value", "children"], "additionalProperties": false}}
})";

const char* kEbnf =
    R"(root ::= "<tool_call>" ws "{\"name\": \"" name "\", \"arguments\": " obj "}" ws "</tool_call>"
name ::= [a-z_]+
obj ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= "\"" [a-z_]+ "\"" ws ":" ws value ws
value ::= "\"" [^"\\]* "\"" | [0-9]+ | obj
ws ::= [ \n]?)";

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grammar_bench"};
  std::string model_dir = "models/tandem-tiny-english";
  int tokens = 128;
  uint64_t seed = 1;
  app.add_option("--model-dir", model_dir, "directory with tokenizer.json");
  app.add_option("--tokens", tokens, "tokens per generation")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "sampling seed");
  std::string json_path;
  app.add_option("--json", json_path, "also write the report to this JSON file");
  tandem::bench::GrammarDecodeOptions decode;
  app.add_option("--decode-steps", decode.steps, "decode steps per timed run (0: no decode)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--decode-repeats", decode.repeats, "alternated pairs of decode runs")
      ->check(CLI::PositiveNumber);
  app.add_option("--decode-context", decode.context, "prompt tokens before the decode steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--decode-max-new-tokens", decode.max_new_tokens,
                 "the requests' max_new_tokens (0: decode steps + 1; the budget's narrowing of "
                 "the mask runs near it)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", decode.threads, "model compute threads")->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = tandem::engine::Tokenizer::FromModelDir(model_dir);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 1;
  }
  const auto vocab_start = Clock::now();
  std::vector<std::string> bytes;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    bytes.push_back((*tokenizer)->TokenBytes(id, /*skip_special_tokens=*/true));
  }
  const TokenVocabulary vocab(std::move(bytes), (*tokenizer)->eos_token_ids());
  const double vocab_us = Micros(vocab_start, Clock::now());

  const std::vector<BenchGrammar> grammars = {
      {"json_object", [] { return CompileAnyJsonObject(); }},
      {"schema_event", [] { return CompileJsonSchema(kEventSchema); }},
      {"schema_recursive", [] { return CompileJsonSchema(kRecursiveSchema); }},
      {"regex_email",
       [] { return CompileRegex("[a-z0-9._%+-]{1,32}@[a-z0-9.-]{1,32}\\.[a-z]{2,6}"); }},
      {"ebnf_tool_call", [] { return CompileEbnf(kEbnf); }},
      // Free text with a tool call (the event schema) behind a "<tool_call>" trigger.
      {"structural_tag_tool_call",
       [] {
         const std::string tag =
             std::string(R"({"structures": [{"begin": "<tool_call>\n{\"name\": \"event\", )"
                         R"(\"arguments\": ", "schema": )") +
             kEventSchema + R"(, "end": "}\n</tool_call>"}], "triggers": ["<tool_call>"]})";
         return CompileStructuralTag(tag, StructuralTagForm::kTriggered, false);
       }},
  };
  nlohmann::json report = {{"model_dir", model_dir},
                           {"vocab_size", vocab.vocab_size()},
                           {"trie_nodes", vocab.num_trie_nodes()},
                           {"vocabulary_build_us", vocab_us}};
  for (const BenchGrammar& g : grammars) {
    std::vector<double> compile_us;
    absl::StatusOr<GrammarPtr> grammar;
    for (int i = 0; i < 21; ++i) {
      const auto start = Clock::now();
      grammar = g.compile();
      compile_us.push_back(Micros(start, Clock::now()));
    }
    if (!grammar.ok()) {
      std::cerr << g.name << ": " << grammar.status() << "\n";
      return 1;
    }
    GrammarMatcher matcher = GrammarMatcher::Create(*grammar).value();
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> mask(MaskWords(vocab.vocab_size()));
    TokenMaskCache cache;
    std::vector<double> mask_us, cached_us, accept_us;
    int64_t allowed_total = 0;
    std::string output;
    for (int step = 0; step < tokens; ++step) {
      const auto start = Clock::now();
      ComputeTokenMask(matcher, vocab, mask);
      mask_us.push_back(Micros(start, Clock::now()));
      const auto cached_start = Clock::now();
      const std::span<const uint32_t> cached = cache.Get(matcher, vocab);
      cached_us.push_back(Micros(cached_start, Clock::now()));
      if (!std::equal(cached.begin(), cached.end(), mask.begin())) {
        std::cerr << g.name << ": the cached mask differs at step " << step << "\n";
        return 1;
      }
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
        if (MaskAllows(mask, id)) allowed.push_back(id);
      }
      allowed_total += static_cast<int64_t>(allowed.size());
      if (allowed.empty()) break;
      const int32_t id = allowed[rng() % allowed.size()];
      if (vocab.is_eos(id)) break;
      const auto accept_start = Clock::now();
      AcceptToken(matcher, vocab, id);
      accept_us.push_back(Micros(accept_start, Clock::now()));
      output += vocab.token_bytes(id);
    }
    double mask_sum = 0, cached_sum = 0, accept_sum = 0;
    for (double v : mask_us) mask_sum += v;
    for (double v : cached_us) cached_sum += v;
    for (double v : accept_us) accept_sum += v;
    report["grammars"].push_back(
        {{"name", g.name},
         {"compile_us_median", Percentile(compile_us, 0.5)},
         {"rules", (*grammar)->num_rules()},
         {"slots", (*grammar)->slots().size()},
         {"steps", mask_us.size()},
         {"mask_us_mean", mask_sum / std::max<size_t>(1, mask_us.size())},
         {"mask_us_p50", Percentile(mask_us, 0.5)},
         {"mask_us_p99", Percentile(mask_us, 0.99)},
         {"cached_mask_us_mean", cached_sum / std::max<size_t>(1, cached_us.size())},
         {"cached_mask_us_p50", Percentile(cached_us, 0.5)},
         {"cached_mask_us_p99", Percentile(cached_us, 0.99)},
         // The first step's: a cold cache, a walk that learns from nothing.
         {"cached_mask_us_first", cached_us.empty() ? 0.0 : cached_us.front()},
         {"cache_hit_rate",
          static_cast<double>(cache.hits()) / std::max<int64_t>(1, cache.hits() + cache.misses())},
         {"cache_transitions", cache.num_transitions()},
         {"matcher_states", matcher.num_states()},
         {"matcher_state_bytes", matcher.state_bytes()},
         {"accept_token_us_mean", accept_sum / std::max<size_t>(1, accept_us.size())},
         {"allowed_tokens_mean",
          static_cast<double>(allowed_total) / std::max<size_t>(1, mask_us.size())},
         {"output_prefix", output.substr(0, 80)}});
  }
  if (decode.steps > 0) {
    decode.model_dir = model_dir;
    decode.schema = kEventSchema;
    decode.seed = seed;
    absl::StatusOr<nlohmann::json> decoded = tandem::bench::RunGrammarDecode(decode);
    if (!decoded.ok()) {
      std::cerr << "decode: " << decoded.status() << "\n";
      return 1;
    }
    report["decode"] = *std::move(decoded);
  }
  const std::string text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::cout << text << "\n";
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << text << "\n";
    if (!f) {
      std::cerr << "cannot write " << json_path << "\n";
      return 1;
    }
  }
  return 0;
}
