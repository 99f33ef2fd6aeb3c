#include "tests/engine/serving/corpus_model_samples.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/grammar/matcher.h"
#include "engine/scheduler.h"

namespace tandem::engine::testing {

using grammar::testing::CorpusCase;

GrammarConstraint CorpusConstraint(const CorpusCase& c) {
  using Kind = GrammarConstraint::Kind;
  if (c.kind == "json_schema") return {Kind::kJsonSchema, c.grammar.dump()};
  if (c.kind == "regex") return {Kind::kRegex, c.grammar.get<std::string>()};
  if (c.kind == "ebnf") return {Kind::kEbnf, c.grammar.get<std::string>()};
  return {};
}

absl::StatusOr<int32_t> CorpusBudget(const CorpusCase& c) {
  auto grammar = CompileConstraint(CorpusConstraint(c));
  if (!grammar.ok()) return grammar.status();
  auto matcher = grammar::GrammarMatcher::Create(*grammar);
  if (!matcher.ok()) return matcher.status();
  const int64_t shortest = matcher->MinBytesToComplete();
  return static_cast<int32_t>(std::max<int64_t>(64, shortest + 16));
}

absl::StatusOr<std::vector<CorpusModelSample>> SampleCorpusWithModel(
    const std::vector<CorpusCase>& cases, int seeds) {
  SchedulerConfig config = SmallConfig(/*num_blocks=*/4096);
  config.max_running_requests = 256;
  auto scheduler = Scheduler::Create(config, &SharedModel(), &SharedTokenizer());
  if (!scheduler.ok()) return scheduler.status();
  const std::vector<int32_t> prompt = SharedTokenizer().Encode("Here is the answer:");

  std::vector<CorpusModelSample> samples;
  std::map<std::string, Collected> sink;
  for (const CorpusCase& c : cases) {
    auto budget = CorpusBudget(c);
    if (!budget.ok()) return budget.status();
    for (int seed = 1; seed <= seeds; ++seed) {
      CorpusModelSample sample{c, static_cast<uint64_t>(seed), *budget, {}, {}};
      Request r = MakeRequest(absl::StrCat(samples.size()), prompt, *budget, &sink,
                              /*temperature=*/1.0f, sample.seed);
      r.sampling.ignore_eos = false;
      r.sampling.constraint = CorpusConstraint(c);
      if (absl::Status st = (*scheduler)->Submit(std::move(r)); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat(c.kind, "/", c.name, ": ", st.message()));
      }
      samples.push_back(std::move(sample));
    }
  }
  constexpr int kMaxSteps = 100000;
  for (int step = 0; step < kMaxSteps && (*scheduler)->HasWork(); ++step) {
    if (auto st = (*scheduler)->Step(); !st.ok()) return st.status();
  }
  if ((*scheduler)->HasWork())
    return absl::DeadlineExceededError("still busy after the step bound");

  for (size_t i = 0; i < samples.size(); ++i) {
    CorpusModelSample& sample = samples[i];
    sample.got = std::move(sink[absl::StrCat(i)]);
    for (int32_t id : sample.got.tokens) {
      sample.output += SharedTokenizer().TokenBytes(id, /*skip_special_tokens=*/true);
    }
  }
  return samples;
}

}  // namespace tandem::engine::testing
