#include "bench/tandem_bench/mixed_dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::bench {
namespace {

absl::Status CheckPositive(int value, const char* flag) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", value));
}

absl::Status Validate(const MixedDatasetOptions& o) {
  if (auto s = CheckPositive(o.num_prompts, "--num-prompts"); !s.ok()) return s;
  if (auto s = CheckPositive(o.long_input_len, "--mixed-long-input-len"); !s.ok()) return s;
  if (auto s = CheckPositive(o.short_input_min, "--mixed-short-input-min"); !s.ok()) return s;
  if (!(o.long_fraction >= 0.0 && o.long_fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mixed-long-fraction must be in [0, 1], got ", o.long_fraction));
  }
  if (o.short_input_max < o.short_input_min) {
    return absl::InvalidArgumentError(absl::StrCat("--mixed-short-input-max (", o.short_input_max,
                                                   ") must be >= --mixed-short-input-min (",
                                                   o.short_input_min, ")"));
  }
  if (o.long_output_len < 0 || o.short_output_len < 0) {
    return absl::InvalidArgumentError(
        "--mixed-long-output-len and --mixed-short-output-len must be >= 0");
  }
  if (o.vocab_size <= 0) return absl::InvalidArgumentError("the tokenizer's vocabulary is empty");
  return absl::OkStatus();
}

}  // namespace

int MixedLongCount(int num_prompts, double long_fraction) {
  return static_cast<int>(std::lround(static_cast<double>(num_prompts) * long_fraction));
}

absl::StatusOr<std::vector<DatasetRow>> GenerateMixedDataset(const engine::Tokenizer& tokenizer,
                                                             const MixedDatasetOptions& options,
                                                             BenchRandom& rng) {
  if (auto s = Validate(options); !s.ok()) return s;
  const auto n = static_cast<size_t>(options.num_prompts);
  const auto longs = static_cast<size_t>(std::clamp(
      MixedLongCount(options.num_prompts, options.long_fraction), 0, options.num_prompts));
  std::vector<int> labels(n, 0);  // 1: long
  std::fill_n(labels.begin(), longs, 1);
  rng.python.Shuffle(labels);

  const size_t shorts = static_cast<size_t>(std::count(labels.begin(), labels.end(), 0));
  const std::vector<int64_t> short_lens =
      rng.numpy.RandInt(options.short_input_min, int64_t{options.short_input_max} + 1, shorts);
  const int64_t vocab = options.vocab_size;
  const std::vector<int64_t> offsets = rng.numpy.RandInt(0, vocab, n);
  const int special =
      options.tokenize_prompt ? 0 : static_cast<int>(tokenizer.Encode("", true).size());

  std::vector<DatasetRow> rows;
  rows.reserve(n);
  size_t next_short = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool long_row = labels[i] != 0;
    const int input_len = std::max(
        0,
        (long_row ? options.long_input_len : static_cast<int>(short_lens[next_short++])) - special);
    std::vector<int32_t> ids(static_cast<size_t>(input_len));
    for (size_t j = 0; j < ids.size(); ++j) {
      ids[j] = static_cast<int32_t>((offsets[i] + static_cast<int64_t>(i + j)) % vocab);
    }
    DatasetRow row;
    if (!options.tokenize_prompt) row.prompt = tokenizer.Decode(ids);
    row.prompt_ids = std::move(ids);
    row.prompt_len = input_len;
    row.output_len = long_row ? options.long_output_len : options.short_output_len;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tandem::bench
