#include "bench/tandem_bench/dataset.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

absl::Status CheckPositive(int value, const char* flag) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", value));
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

std::vector<int> ComputeRandomLens(int full_len, double ratio, int num, NumpyRandomState& numpy) {
  std::vector<int> lens(static_cast<size_t>(std::max(num, 0)), 0);
  if (full_len <= 0) return lens;
  const int low = std::max(static_cast<int>(full_len * ratio), 1);
  const std::vector<int64_t> drawn = numpy.RandInt(low, int64_t{full_len} + 1, lens.size());
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = static_cast<int>(drawn[i]);
  return lens;
}

absl::StatusOr<int32_t> HfVocabSize(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream contents;
  contents << file.rdbuf();
  const nlohmann::json root = nlohmann::json::parse(contents.str(), nullptr, false);
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object() ||
      !root["model"].contains("vocab") || !root["model"]["vocab"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no model.vocab object"));
  }
  return static_cast<int32_t>(root["model"]["vocab"].size());
}

absl::StatusOr<std::vector<DatasetRow>> GenerateRandomDataset(const engine::Tokenizer& tokenizer,
                                                              const RandomDatasetOptions& options,
                                                              BenchRandom& rng) {
  if (auto s = CheckPositive(options.num_prompts, "--num-prompts"); !s.ok()) return s;
  if (auto s = CheckPositive(options.input_len, "--random-input-len"); !s.ok()) return s;
  if (options.output_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-output-len must be >= 0, got ", options.output_len));
  }
  if (!(options.range_ratio >= 0.0 && options.range_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-range-ratio must be in [0, 1], got ", options.range_ratio));
  }
  const bool from_file = !options.ids && !options.sharegpt_path.empty();
  if (!from_file && options.vocab_size <= 0) {
    return absl::InvalidArgumentError("the tokenizer's vocabulary is empty");
  }
  const int n = options.num_prompts;
  std::vector<int> input_lens =
      ComputeRandomLens(options.input_len, options.range_ratio, n, rng.numpy);
  const std::vector<int> output_lens =
      ComputeRandomLens(options.output_len, options.range_ratio, n, rng.numpy);
  if (!options.tokenize_prompt) {
    // The server encodes the text with the post-processor's tokens (e.g. BOS): leave room.
    const int special = static_cast<int>(tokenizer.Encode("", true).size());
    for (int& len : input_lens) len = std::max(0, len - special);
  }
  auto make_row = [&](std::vector<int32_t> ids, size_t i) {
    DatasetRow row;
    if (!options.tokenize_prompt) row.prompt = tokenizer.Decode(ids);
    row.prompt_ids = std::move(ids);
    row.prompt_len = input_lens[i];
    row.output_len = output_lens[i];
    return row;
  };

  std::vector<DatasetRow> rows;
  rows.reserve(static_cast<size_t>(n));
  if (from_file) {
    auto pairs = ReadShareGpt(options.sharegpt_path);
    if (!pairs.ok()) return pairs.status();
    rng.python.Shuffle(*pairs);
    for (const auto& [prompt, answer] : *pairs) {
      const size_t i = rows.size();
      if (i == static_cast<size_t>(n)) break;
      const std::vector<int32_t> source = tokenizer.Encode(prompt, true);
      if (source.empty()) continue;
      std::vector<int32_t> ids(static_cast<size_t>(input_lens[i]));
      for (size_t j = 0; j < ids.size(); ++j) ids[j] = source[j % source.size()];
      rows.push_back(make_row(std::move(ids), i));
    }
    return rows;
  }
  const int64_t vocab = options.vocab_size;
  const std::vector<int64_t> offsets = rng.numpy.RandInt(0, vocab, static_cast<size_t>(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(input_lens[i]));
    for (size_t j = 0; j < ids.size(); ++j) {
      ids[j] = static_cast<int32_t>((offsets[i] + static_cast<int64_t>(i + j)) % vocab);
    }
    rows.push_back(make_row(std::move(ids), i));
  }
  return rows;
}

absl::StatusOr<std::vector<DatasetRow>> LoadShareGptDataset(const engine::Tokenizer& tokenizer,
                                                            const ShareGptOptions& options,
                                                            BenchRandom& rng) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError(
        "--dataset-name sharegpt needs --dataset-path (a ShareGPT JSON file; nothing is "
        "downloaded)");
  }
  if (auto s = CheckPositive(options.num_prompts, "--num-prompts"); !s.ok()) return s;
  if (options.fixed_output_len != 0 && options.fixed_output_len < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sharegpt-output-len must be >= 4 (as in bench_serving), got ",
                     options.fixed_output_len));
  }
  auto pairs = ReadShareGpt(options.path);
  if (!pairs.ok()) return pairs.status();
  rng.python.Shuffle(*pairs);
  std::vector<DatasetRow> rows;
  for (auto [prompt, answer] : *pairs) {
    if (static_cast<int>(rows.size()) == options.num_prompts) break;
    if (!options.prompt_suffix.empty()) {
      const std::string kAssistant = "Assistant:";
      if (absl::EndsWith(prompt, kAssistant)) prompt.resize(prompt.size() - kAssistant.size());
      prompt = absl::StrCat(prompt, options.prompt_suffix, kAssistant);
    }
    if (options.apply_chat_template) {
      auto rendered = tokenizer.ApplyChatTemplate({{"user", prompt}}, true);
      if (!rendered.ok()) return rendered.status();
      prompt = std::move(*rendered);
      if (auto bos = tokenizer.bos_token_id(); bos.has_value()) {
        prompt = absl::StrReplaceAll(prompt, {{tokenizer.Decode({*bos}), ""}});
      }
    }
    const int prompt_len = static_cast<int>(tokenizer.Encode(prompt).size());
    const int output_len = options.fixed_output_len > 0
                               ? options.fixed_output_len
                               : static_cast<int>(tokenizer.Encode(answer).size());
    if (prompt_len < 2 || output_len < 2) continue;
    if (options.context_len > 0 && prompt_len + output_len > options.context_len) continue;
    rows.push_back({prompt, {}, prompt_len, output_len});
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": no usable conversation (all too short or too long)"));
  }
  return rows;
}

absl::StatusOr<std::vector<DatasetRow>> GenerateSharedPrefixDataset(
    const engine::Tokenizer& tokenizer, const SharedPrefixOptions& options, BenchRandom& rng) {
  if (auto s = CheckPositive(options.num_groups, "--gsp-num-groups"); !s.ok()) return s;
  if (auto s = CheckPositive(options.prompts_per_group, "--gsp-prompts-per-group"); !s.ok()) {
    return s;
  }
  if (auto s = CheckPositive(options.system_prompt_len, "--gsp-system-prompt-len"); !s.ok()) {
    return s;
  }
  if (auto s = CheckPositive(options.question_len, "--gsp-question-len"); !s.ok()) return s;
  if (options.output_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gsp-output-len must be >= 0, got ", options.output_len));
  }
  if (!(options.range_ratio >= 0.0 && options.range_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gsp-range-ratio must be in [0, 1], got ", options.range_ratio));
  }
  // tokenizer.get_vocab(): every id, added tokens included (in id order; see the header).
  std::vector<int32_t> vocabulary;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.TokenBytes(id, /*skip_special_tokens=*/false).empty()) vocabulary.push_back(id);
  }
  if (vocabulary.empty()) return absl::InvalidArgumentError("the tokenizer has no tokens");
  const int groups = options.num_groups;
  const int per_group = options.prompts_per_group;
  const std::vector<int> system_lens =
      ComputeRandomLens(options.system_prompt_len, options.range_ratio, groups, rng.numpy);
  const std::vector<int> question_lens =
      ComputeRandomLens(options.question_len, options.range_ratio, groups * per_group, rng.numpy);
  const std::vector<int> output_lens =
      ComputeRandomLens(options.output_len, options.range_ratio, groups * per_group, rng.numpy);

  auto gen_prompt = [&](int len) {
    return tokenizer.Decode(rng.python.Choices(vocabulary, static_cast<size_t>(len)));
  };
  std::vector<std::string> system_prompts;
  for (int g = 0; g < groups; ++g) system_prompts.push_back(gen_prompt(system_lens[g]));
  std::vector<std::string> questions;
  for (int q = 0; q < groups * per_group; ++q) questions.push_back(gen_prompt(question_lens[q]));

  std::vector<DatasetRow> rows;
  for (int g = 0; g < groups; ++g) {
    for (int p = 0; p < per_group; ++p) {
      const size_t q = static_cast<size_t>(g * per_group + p);
      DatasetRow row;
      row.prompt = absl::StrCat(system_prompts[static_cast<size_t>(g)], "\n\n", questions[q]);
      row.prompt_len =
          options.fast_prepare ? 1 : static_cast<int>(tokenizer.Encode(row.prompt).size());
      row.output_len = output_lens[q];
      rows.push_back(std::move(row));
    }
  }
  if (!options.ordered) rng.python.Shuffle(rows);
  return rows;
}

}  // namespace tandem::bench
