#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::engine {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be -1 (disabled) or >= 1, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  return absl::OkStatus();
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  return Sampler(params);
}

int32_t Argmax(std::span<const float> logits) {
  if (logits.empty()) return -1;
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

absl::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits) {
  if (logits.empty()) return absl::InvalidArgumentError("empty logits row");
  for (float v : logits) {
    if (std::isnan(v)) return absl::InvalidArgumentError("NaN in logits");
  }
  if (params_.temperature == 0.0f) return Argmax(logits);

  // Softmax of logits / temperature in double (stable, max-subtracted).
  const int32_t best = Argmax(logits);
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double max_l = static_cast<double>(logits[best]) * inv_t;
  candidates_.clear();
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(static_cast<double>(logits[i]) * inv_t - max_l);
    if (e > 0.0) {
      candidates_.emplace_back(static_cast<float>(e), static_cast<int32_t>(i));
      total += e;
    }
  }
  auto by_prob = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  const bool limit_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep;
  if (limit_k) keep = static_cast<size_t>(params_.top_k);
  if (limit_k || params_.top_p < 1.0f || params_.min_p > 0.0f) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                      candidates_.end(), by_prob);
    if (limit_k) {
      total = 0.0;
      for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
    }
    if (params_.top_p < 1.0f) {
      double mass = 0.0;
      size_t i = 0;
      while (i < keep) {
        mass += candidates_[i].first;
        ++i;
        if (mass >= params_.top_p * total) break;
      }
      keep = i;
    }
    if (params_.min_p > 0.0f) {
      // Probabilities relative to the top token (whose unnormalised weight is 1).
      size_t i = 1;
      while (i < keep && candidates_[i].first >= params_.min_p * candidates_[0].first) ++i;
      keep = i;
    }
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += candidates_[i].first;
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace tandem::engine
