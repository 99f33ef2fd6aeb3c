#include "bench/tandem_bench/dataset.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

constexpr int kAdjustRounds = 32;  // re-encode/adjust rounds per attempt
constexpr int kFreshAttempts = 8;  // fresh random starts after a non-converging attempt

std::vector<int32_t> DrawIds(const std::vector<int32_t>& pool, int count, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (auto& id : ids) id = pool[pick(rng)];
  return ids;
}

absl::Status CheckPositive(int value, const char* flag) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", value));
}

// Lengths uniform in [max(len * ratio, 1), len], as bench_serving draws them (but never 0).
std::vector<int> DrawLengths(int len, double ratio, int count, std::mt19937_64& rng) {
  int low = std::max(static_cast<int>(len * ratio), 1);
  std::uniform_int_distribution<int> dist(low, len);
  std::vector<int> lengths(static_cast<size_t>(count));
  for (auto& value : lengths) value = dist(rng);
  return lengths;
}

// The first two turns' texts of each conversation with at least two turns.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadShareGpt(
    const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the ShareGPT file"));
  std::stringstream contents;
  contents << file.rdbuf();
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(contents.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!root.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON array of conversations"));
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < root.size(); ++i) {
    const auto& entry = root[i];
    if (!entry.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": entry ", i, " is not an object"));
    }
    const char* key = entry.contains("conversations") ? "conversations" : "conversation";
    if (!entry.contains(key)) continue;
    const auto& turns = entry[key];
    if (!turns.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": entry ", i, ": '", key, "' is not an array"));
    }
    if (turns.size() < 2) continue;
    std::string texts[2];
    for (int t = 0; t < 2; ++t) {
      const auto& turn = turns[static_cast<size_t>(t)];
      if (!turn.is_object() || !turn.contains("value") || !turn["value"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": entry ", i, ": turn ", t, " has no string 'value'"));
      }
      texts[t] = turn["value"].get<std::string>();
    }
    pairs.emplace_back(std::move(texts[0]), std::move(texts[1]));
  }
  if (pairs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no conversation with at least two turns"));
  }
  return pairs;
}

}  // namespace

std::vector<int32_t> OrdinaryTokenIds(const engine::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.TokenBytes(id, /*skip_special_tokens=*/true).empty()) continue;
    // Special tokens with skip_special_tokens are empty above; leave out every other added
    // token too, so prompts are plain text.
    if (tokenizer.Decode({id}, true).empty()) continue;
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<std::string> TextOfExactLength(const engine::Tokenizer& tokenizer,
                                              std::vector<int32_t> ids, int num_tokens,
                                              const std::vector<int32_t>& pool,
                                              std::mt19937_64& rng) {
  if (num_tokens <= 0) return std::string();
  if (pool.empty()) return absl::InternalError("the tokenizer has no ordinary tokens");
  for (int attempt = 0; attempt < kFreshAttempts; ++attempt) {
    if (attempt > 0) ids = DrawIds(pool, num_tokens, rng);
    for (int round = 0; round < kAdjustRounds; ++round) {
      std::string text = tokenizer.Decode(ids);
      std::vector<int32_t> encoded = tokenizer.Encode(text, /*add_special_tokens=*/false);
      const auto want = static_cast<size_t>(num_tokens);
      if (encoded.size() == want) return text;
      if (encoded.size() > want) {
        encoded.resize(want);
      } else {
        std::vector<int32_t> more = DrawIds(pool, static_cast<int>(want - encoded.size()), rng);
        encoded.insert(encoded.end(), more.begin(), more.end());
      }
      ids = std::move(encoded);
    }
  }
  return absl::InternalError(
      absl::StrCat("could not make a text of exactly ", num_tokens, " tokens"));
}

absl::StatusOr<std::vector<DatasetRow>> GenerateRandomDataset(const engine::Tokenizer& tokenizer,
                                                              const RandomDatasetOptions& options,
                                                              std::mt19937_64& rng) {
  if (auto s = CheckPositive(options.num_prompts, "--num-prompts"); !s.ok()) return s;
  if (auto s = CheckPositive(options.input_len, "--random-input-len"); !s.ok()) return s;
  if (auto s = CheckPositive(options.output_len, "--random-output-len"); !s.ok()) return s;
  if (!(options.range_ratio >= 0.0 && options.range_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-range-ratio must be in [0, 1], got ", options.range_ratio));
  }
  const std::vector<int32_t> pool = OrdinaryTokenIds(tokenizer);
  if (pool.empty()) return absl::InvalidArgumentError("the tokenizer has no ordinary tokens");
  const int n = options.num_prompts;
  std::vector<int> input_lens = DrawLengths(options.input_len, options.range_ratio, n, rng);
  std::vector<int> output_lens = DrawLengths(options.output_len, options.range_ratio, n, rng);

  // Source token streams for `random` with a ShareGPT file: its first turns, shuffled.
  std::vector<std::vector<int32_t>> sources;
  if (!options.ids && !options.sharegpt_path.empty()) {
    auto pairs = ReadShareGpt(options.sharegpt_path);
    if (!pairs.ok()) return pairs.status();
    std::shuffle(pairs->begin(), pairs->end(), rng);
    for (const auto& [prompt, answer] : *pairs) {
      std::vector<int32_t> ids = tokenizer.Encode(prompt, false);
      if (!ids.empty()) sources.push_back(std::move(ids));
      if (static_cast<int>(sources.size()) == n) break;
    }
  }

  const int32_t vocab = tokenizer.vocab_size();
  std::uniform_int_distribution<int32_t> offset_dist(0, vocab - 1);
  std::vector<DatasetRow> rows;
  rows.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int len = input_lens[static_cast<size_t>(i)];
    std::vector<int32_t> ids;
    if (options.ids) {
      const int32_t offset = offset_dist(rng);
      for (int j = 0; j < len; ++j) ids.push_back((offset + i + j) % vocab);
    } else if (!sources.empty()) {
      const auto& source = sources[static_cast<size_t>(i) % sources.size()];
      for (int j = 0; j < len; ++j) ids.push_back(source[static_cast<size_t>(j) % source.size()]);
    } else {
      ids = DrawIds(pool, len, rng);
    }
    auto text = TextOfExactLength(tokenizer, std::move(ids), len, pool, rng);
    if (!text.ok()) return text.status();
    rows.push_back({std::move(*text), len, output_lens[static_cast<size_t>(i)]});
  }
  return rows;
}

absl::StatusOr<std::vector<DatasetRow>> LoadShareGptDataset(const engine::Tokenizer& tokenizer,
                                                            const ShareGptOptions& options,
                                                            std::mt19937_64& rng) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError(
        "--dataset-name sharegpt needs --dataset-path (a ShareGPT JSON file; nothing is "
        "downloaded)");
  }
  if (auto s = CheckPositive(options.num_prompts, "--num-prompts"); !s.ok()) return s;
  auto pairs = ReadShareGpt(options.path);
  if (!pairs.ok()) return pairs.status();
  std::shuffle(pairs->begin(), pairs->end(), rng);
  std::vector<DatasetRow> rows;
  for (const auto& [prompt, answer] : *pairs) {
    if (static_cast<int>(rows.size()) == options.num_prompts) break;
    const int prompt_len = static_cast<int>(tokenizer.Encode(prompt, false).size());
    const int output_len = options.fixed_output_len > 0
                               ? options.fixed_output_len
                               : static_cast<int>(tokenizer.Encode(answer, false).size());
    if (prompt_len < 2 || output_len < 2) continue;
    if (options.context_len > 0 && prompt_len + output_len > options.context_len) continue;
    rows.push_back({prompt, prompt_len, output_len});
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": no usable conversation (all too short or too long)"));
  }
  return rows;
}

absl::StatusOr<std::vector<DatasetRow>> GenerateSharedPrefixDataset(
    const engine::Tokenizer& tokenizer, const SharedPrefixOptions& options, std::mt19937_64& rng) {
  if (auto s = CheckPositive(options.num_groups, "--gsp-num-groups"); !s.ok()) return s;
  if (auto s = CheckPositive(options.prompts_per_group, "--gsp-prompts-per-group"); !s.ok()) {
    return s;
  }
  if (auto s = CheckPositive(options.system_prompt_len, "--gsp-system-prompt-len"); !s.ok()) {
    return s;
  }
  if (auto s = CheckPositive(options.question_len, "--gsp-question-len"); !s.ok()) return s;
  if (auto s = CheckPositive(options.output_len, "--gsp-output-len"); !s.ok()) return s;
  const std::vector<int32_t> pool = OrdinaryTokenIds(tokenizer);
  if (pool.empty()) return absl::InvalidArgumentError("the tokenizer has no ordinary tokens");

  std::vector<std::string> system_prompts;
  for (int g = 0; g < options.num_groups; ++g) {
    auto text = TextOfExactLength(tokenizer, DrawIds(pool, options.system_prompt_len, rng),
                                  options.system_prompt_len, pool, rng);
    if (!text.ok()) return text.status();
    system_prompts.push_back(std::move(*text));
  }
  std::vector<DatasetRow> rows;
  for (int g = 0; g < options.num_groups; ++g) {
    for (int p = 0; p < options.prompts_per_group; ++p) {
      auto question = TextOfExactLength(tokenizer, DrawIds(pool, options.question_len, rng),
                                        options.question_len, pool, rng);
      if (!question.ok()) return question.status();
      std::string prompt = absl::StrCat(system_prompts[static_cast<size_t>(g)], "\n\n", *question);
      const int prompt_len = static_cast<int>(tokenizer.Encode(prompt, false).size());
      rows.push_back({std::move(prompt), prompt_len, options.output_len});
    }
  }
  std::shuffle(rows.begin(), rows.end(), rng);
  return rows;
}

}  // namespace tandem::bench
