#include "engine/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/grammar/length_budget.h"
#include "engine/kernels/cpu.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// False if any value is NaN or +inf (one branch-free pass that vectorises).
bool AllBelowInfinity(std::span<const float> row) {
  bool ok = true;
  for (float v : row) ok &= v < kPosInf;
  return ok;
}

absl::Status Invalid(const std::string& name, const std::string& range, const std::string& got) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling_params.", name, " must be ", range, ", got ", got));
}

std::string Num(float v) { return absl::StrCat(v); }

// out[i] = exp((row[i] - max_logit) * scale), 0 where row[i] is -inf; returns the sum (in
// double, 8 interleaved lanes in a fixed order). Plain IEEE operations without FMA, so the
// scalar and AVX2 builds give the same bits.
__attribute__((always_inline)) inline double ExpShiftedBody(const float* row, size_t n,
                                                            float max_logit, float scale,
                                                            float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float e = ExpF((row[i] - max_logit) * scale);
    out[i] = row[i] == kNegInf ? 0.0f : e;
  }
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(out[i + j]);
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(out[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

double ExpShiftedScalar(const float* row, size_t n, float max_logit, float scale, float* out) {
  return ExpShiftedBody(row, n, max_logit, scale, out);
}

__attribute__((target("avx2"))) double ExpShiftedAvx2(const float* row, size_t n, float max_logit,
                                                      float scale, float* out) {
  const __m256 vmax = _mm256_set1_ps(max_logit);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 ninf = _mm256_set1_ps(kNegInf);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    const __m256 e = internal::ExpF8(_mm256_mul_ps(_mm256_sub_ps(v, vmax), vscale));
    _mm256_storeu_ps(out + i, _mm256_andnot_ps(_mm256_cmp_ps(v, ninf, _CMP_EQ_OQ), e));
  }
  for (; i < n; ++i) {
    const float e = ExpF((row[i] - max_logit) * scale);
    out[i] = row[i] == kNegInf ? 0.0f : e;
  }
  // The sum exactly as ExpShiftedBody adds it.
  __m256d lo = _mm256_setzero_pd();
  __m256d hi = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(out + i)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(out + i + 4)));
  }
  double lanes[8];
  _mm256_storeu_pd(lanes, lo);
  _mm256_storeu_pd(lanes + 4, hi);
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(out[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

double ExpShifted(std::span<const float> row, float max_logit, float scale,
                  std::vector<float>* out) {
  static const bool avx2 = DetectSimd() >= SimdLevel::kAvx2;
  out->resize(row.size());
  return avx2 ? ExpShiftedAvx2(row.data(), row.size(), max_logit, scale, out->data())
              : ExpShiftedScalar(row.data(), row.size(), max_logit, scale, out->data());
}

// Heavier first, then the lower id: a strict total order, so the kept set is exact.
struct ByWeightThenId {
  bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  }
};

}  // namespace

struct Sampler::Scratch {
  std::vector<float> logits;                        // [vocab_size] penalized logits
  std::vector<float> probs;                         // [vocab_size] exp weights
  std::vector<std::pair<float, int32_t>> kept;      // (weight, id) of the kept tokens
  std::vector<std::pair<float, int32_t>> boundary;  // KeepTopP: the bucket at the cut
  std::vector<double> bucket_mass;                  // KeepTopP: mass per weight bucket
  std::vector<float> constrained;                   // [vocab_size] logits under the grammar
  std::vector<uint32_t> grammar_mask;               // the state's mask narrowed to the budget
};

absl::Status ValidateSamplingParams(const SamplingParams& p, int32_t vocab_size) {
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be >= 1, got ", vocab_size));
  }
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return Invalid("temperature", "a finite number >= 0 (0 = greedy)", Num(p.temperature));
  }
  if (p.top_k < -1) {
    return Invalid("top_k", "-1 or 0 (no limit) or >= 1", absl::StrCat(p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return Invalid("top_p", "in (0, 1]", Num(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return Invalid("min_p", "in [0, 1]", Num(p.min_p));
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Invalid("frequency_penalty", "in [-2, 2]", Num(p.frequency_penalty));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Invalid("presence_penalty", "in [-2, 2]", Num(p.presence_penalty));
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) {
    return Invalid("repetition_penalty", "in (0, 2]", Num(p.repetition_penalty));
  }
  if (p.max_new_tokens < 0) {
    return Invalid("max_new_tokens", ">= 0", absl::StrCat(p.max_new_tokens));
  }
  if (p.min_new_tokens < 0 || p.min_new_tokens > p.max_new_tokens) {
    return Invalid("min_new_tokens",
                   absl::StrCat("in [0, max_new_tokens] = [0, ", p.max_new_tokens, "]"),
                   absl::StrCat(p.min_new_tokens));
  }
  if (p.top_logprobs_num < 0 || p.top_logprobs_num > kMaxTopLogprobs) {
    return Invalid("top_logprobs_num", absl::StrCat("in [0, ", kMaxTopLogprobs, "]"),
                   absl::StrCat(p.top_logprobs_num));
  }
  if (p.stop.size() > kMaxStopStrings) {
    return Invalid("stop", absl::StrCat("at most ", kMaxStopStrings, " strings"),
                   absl::StrCat(p.stop.size()));
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    const std::string name = absl::StrCat("stop[", i, "]");
    if (p.stop[i].empty()) return Invalid(name, "a non-empty string", "\"\"");
    if (p.stop[i].size() > kMaxStopStringBytes) {
      return Invalid(name, absl::StrCat("at most ", kMaxStopStringBytes, " bytes long"),
                     absl::StrCat(p.stop[i].size(), " bytes"));
    }
    if (!IsValidUtf8(p.stop[i])) return Invalid(name, "valid UTF-8", "ill-formed bytes");
  }
  if (p.logit_bias.size() > kMaxLogitBiasEntries) {
    return Invalid("logit_bias", absl::StrCat("at most ", kMaxLogitBiasEntries, " entries"),
                   absl::StrCat(p.logit_bias.size()));
  }
  std::vector<int32_t> biased;
  biased.reserve(p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {
    const std::string name = absl::StrCat("logit_bias[", id, "]");
    if (id < 0 || id >= vocab_size) {
      return Invalid("logit_bias", absl::StrCat("keyed by token ids in [0, ", vocab_size, ")"),
                     absl::StrCat(id));
    }
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return Invalid(name, "in [-100, 100]", Num(bias));
    }
    biased.push_back(id);
  }
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end()) {
    return Invalid("logit_bias", "keyed by distinct token ids", "a repeated id");
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "]"),
                     absl::StrCat("in [0, vocab_size) = [0, ", vocab_size, ")"), absl::StrCat(id));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFirstToken(const SampleResult& first, int32_t vocab_size) {
  if (first.token < 0 || first.token >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first token ", first.token, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  if (first.top.size() > static_cast<size_t>(kMaxTopLogprobs)) {
    return absl::InvalidArgumentError(absl::StrCat("the first token comes with ", first.top.size(),
                                                   " alternatives; at most ", kMaxTopLogprobs));
  }
  for (const TokenLogprob& t : first.top) {
    if (t.token < 0 || t.token >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("the first token's alternative ", t.token,
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size,
                                        std::vector<int32_t> eos_token_ids,
                                        grammar::TokenVocabularyPtr vocabulary) {
  if (absl::Status s = ValidateSamplingParams(params, vocab_size); !s.ok()) return s;
  std::optional<grammar::GrammarMatcher> matcher;
  if (params.constraint.kind != GrammarConstraint::Kind::kNone) {
    if (vocabulary == nullptr || vocabulary->vocab_size() != vocab_size) {
      return absl::InvalidArgumentError(
          "a grammar constraint needs the tokenizer's vocabulary (vocab_size entries)");
    }
    absl::StatusOr<grammar::GrammarPtr> compiled = CompileConstraint(params.constraint);
    if (!compiled.ok()) return compiled.status();
    absl::StatusOr<grammar::GrammarMatcher> created =
        grammar::GrammarMatcher::Create(*std::move(compiled));
    if (!created.ok()) return created.status();
    matcher.emplace(*std::move(created));
  }
  std::vector<int32_t> masked;
  for (int32_t id : eos_token_ids) {
    if (id >= 0 && id < vocab_size) masked.push_back(id);
  }
  masked.insert(masked.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  std::sort(masked.begin(), masked.end());
  masked.erase(std::unique(masked.begin(), masked.end()), masked.end());
  Sampler sampler(params, vocab_size, std::move(masked));
  if (matcher) {
    sampler.matcher_ = std::move(matcher);
    sampler.vocabulary_ = std::move(vocabulary);
  }
  return sampler;
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, std::vector<int32_t> masked_ids)
    : params_(params), vocab_size_(vocab_size), masked_(std::move(masked_ids)), rng_(params.seed) {}

namespace {

// The `n` largest entries of `row` as (id, logprob), largest first, ties by the lower id; the
// logprob is computed as Sample computes the chosen token's, so the two agree to the bit. One
// pass with a heap of n entries.
std::vector<TokenLogprob> TopLogprobs(std::span<const float> row, int32_t n, float max_logit,
                                      double log_sum) {
  std::vector<TokenLogprob> top;
  if (n <= 0) return top;
  const size_t k = std::min(static_cast<size_t>(n), row.size());
  // `before(a, b)`: a ranks before b. The heap's front is the entry that ranks last.
  auto before = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  top.reserve(k + 1);
  for (size_t i = 0; i < row.size(); ++i) {
    const TokenLogprob entry{static_cast<int32_t>(i), row[i]};
    if (top.size() < k) {
      top.push_back(entry);
      std::push_heap(top.begin(), top.end(), before);
    } else if (before(entry, top.front())) {
      std::pop_heap(top.begin(), top.end(), before);
      top.back() = entry;
      std::push_heap(top.begin(), top.end(), before);
    }
  }
  std::sort_heap(top.begin(), top.end(), before);
  for (TokenLogprob& entry : top) {
    entry.logprob = static_cast<float>(static_cast<double>(entry.logprob) - max_logit - log_sum);
  }
  return top;
}

}  // namespace

SampleResult ScoreToken(std::span<const float> logits, int32_t token, int32_t top_n) {
  thread_local std::vector<float> probs;
  const int32_t best = Argmax(logits);
  const float max_logit = logits[static_cast<size_t>(best)];
  const double log_sum = std::log(ExpShifted(logits, max_logit, 1.0f, &probs));
  SampleResult result;
  result.token = token;
  result.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) -
                                      max_logit - log_sum);
  result.top = TopLogprobs(logits, top_n, max_logit, log_sum);
  return result;
}

int32_t Argmax(std::span<const float> logits) {
  if (logits.empty()) return -1;
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

bool Sampler::HasPenalties() const {
  return !counts_.empty() &&
         (params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
          params_.presence_penalty != 0.0f);
}

std::span<const float> Sampler::Penalized(std::span<const float> logits, Scratch* scratch) const {
  const bool penalties = HasPenalties();
  const bool mask = MaskActive();
  if (!penalties && !mask && params_.logit_bias.empty()) return logits;
  std::vector<float>& work = scratch->logits;
  work.assign(logits.begin(), logits.end());
  if (penalties) {
    const float r = params_.repetition_penalty;
    for (const auto& [id, count] : counts_) {
      float l = work[static_cast<size_t>(id)];
      l = l > 0.0f ? l / r : l * r;
      l -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
      work[static_cast<size_t>(id)] = l;
    }
  }
  for (const auto& [id, bias] : params_.logit_bias) work[static_cast<size_t>(id)] += bias;
  if (mask) {
    for (int32_t id : masked_) work[static_cast<size_t>(id)] = kNegInf;
  }
  return work;
}

absl::StatusOr<SampleResult> Sampler::Sample(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(absl::StrCat("logits row has ", logits.size(),
                                                   " entries, expected vocab_size ", vocab_size_));
  }
  if (!AllBelowInfinity(logits)) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i]) || logits[i] == kPosInf) {
        return absl::InvalidArgumentError(
            absl::StrCat("logits[", i, "] is ", std::isnan(logits[i]) ? "NaN" : "+inf"));
      }
    }
  }
  thread_local Scratch scratch;
  std::span<const float> input = logits;
  if (matcher_) {
    if (!grammar_status_.ok()) return grammar_status_;
    std::span<const uint32_t> mask = masks_.Get(*matcher_, *vocabulary_);
    // Length-aware closing: near the end of the budget, only tokens after which the output can
    // still complete in the tokens left after this one (narrowed on a copy, made only then: the
    // cached mask stays the state's mask).
    const int64_t tokens_after = int64_t{params_.max_new_tokens} - num_generated_ - 1;
    if (budget_.Near(*matcher_, tokens_after)) {
      scratch.grammar_mask.assign(mask.begin(), mask.end());
      if (budget_.Restrict(*matcher_, *vocabulary_, tokens_after,
                           /*eos_selectable=*/!MaskActive(), scratch.grammar_mask)) {
        mask = scratch.grammar_mask;
      }
    }
    scratch.constrained.assign(logits.begin(), logits.end());
    for (size_t word = 0; word < mask.size(); ++word) {
      if (mask[word] == ~0u) continue;  // 32 allowed tokens
      const size_t end = std::min<size_t>(32, static_cast<size_t>(vocab_size_) - word * 32);
      for (size_t bit = 0; bit < end; ++bit) {
        if (!((mask[word] >> bit) & 1u)) scratch.constrained[word * 32 + bit] = kNegInf;
      }
    }
    input = scratch.constrained;
  }
  const std::span<const float> row = Penalized(input, &scratch);
  const int32_t best = Argmax(row);
  const float max_logit = row[static_cast<size_t>(best)];
  if (max_logit == kNegInf) {
    if (matcher_ && !matcher_->status().ok()) return matcher_->status();
    return absl::InvalidArgumentError(
        "every token of the logits row is -inf (masked): nothing can be sampled");
  }

  std::vector<float>& probs = scratch.probs;
  const double sum = ExpShifted(row, max_logit, 1.0f, &probs);
  const double log_sum = std::log(sum);
  int32_t token = best;
  if (params_.temperature != 0.0f && params_.top_k != 1) {
    double total = sum;
    if (params_.temperature != 1.0f) {
      total = ExpShifted(row, max_logit, 1.0f / params_.temperature, &probs);
    }
    token = Draw(probs, total, &scratch);
  }
  SampleResult result;
  result.token = token;
  result.logprob = static_cast<float>(static_cast<double>(row[static_cast<size_t>(token)]) -
                                      max_logit - log_sum);
  result.top = TopLogprobs(row, params_.top_logprobs_num, max_logit, log_sum);
  if (matcher_ && !grammar::AcceptToken(*matcher_, *vocabulary_, token)) {
    // The mask allowed it, so only a recognizer limit can refuse it here.
    return matcher_->status().ok() ? absl::InternalError("the grammar refused an allowed token")
                                   : matcher_->status();
  }
  ++counts_[token];
  ++num_generated_;
  return result;
}

void Sampler::Observe(int32_t token) {
  if (matcher_ && grammar_status_.ok() && !grammar::AcceptToken(*matcher_, *vocabulary_, token)) {
    grammar_status_ = absl::InvalidArgumentError(
        absl::StrCat("token ", token, " generated elsewhere does not fit the grammar"));
  }
  if (token >= 0 && token < vocab_size_) ++counts_[token];
  ++num_generated_;
  // The worker that sampled `token` drew once from its copy of this request's RNG (Sample
  // draws exactly once when it draws at all); draw here too, so that the tokens after it are
  // those a single worker would have sampled.
  if (params_.temperature != 0.0f && params_.top_k != 1) (void)rng_();
}

int32_t Sampler::Draw(std::span<const float> probs, double total, Scratch* scratch) {
  std::vector<std::pair<float, int32_t>>& candidates = scratch->kept;
  const bool limit_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < probs.size();
  const bool limit_p = params_.top_p < 1.0f;
  // min_p: the largest weight is exp(0) = 1, so the threshold is min_p itself (0: off).
  const float threshold = params_.min_p;
  const double budget = static_cast<double>(params_.top_p) * total;

  if (!limit_k && !limit_p) {  // at most min_p: one pass over the row, no candidate list
    double kept_total = total;
    if (threshold > 0.0f) {
      kept_total = 0.0;
      for (float w : probs) kept_total += w >= threshold ? static_cast<double>(w) : 0.0;
    }
    const double u = Uniform(kept_total);
    double acc = 0.0;
    int32_t last = -1;  // always set: the most likely token (weight 1) passes any threshold
    for (size_t i = 0; i < probs.size(); ++i) {
      if (probs[i] == 0.0f || probs[i] < threshold) continue;
      acc += probs[i];
      last = static_cast<int32_t>(i);
      if (u < acc) return last;
    }
    return last;  // rounding left u at the very end
  }

  candidates.clear();
  if (limit_k) {
    for (size_t i = 0; i < probs.size(); ++i) {
      if (probs[i] > 0.0f && probs[i] >= threshold) {
        candidates.emplace_back(probs[i], static_cast<int32_t>(i));
      }
    }
    size_t keep = std::min(candidates.size(), static_cast<size_t>(params_.top_k));
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(keep),
                      candidates.end(), ByWeightThenId());
    if (limit_p) {
      double mass = 0.0;  // of the tokens before candidate i
      size_t i = 0;
      while (i < keep && mass <= budget) mass += candidates[i++].first;
      keep = i;
    }
    candidates.resize(keep);
  } else {
    KeepTopP(probs, threshold, budget, scratch);
  }

  double kept_total = 0.0;
  for (const auto& c : candidates) kept_total += c.first;
  const double u = Uniform(kept_total);
  double acc = 0.0;
  for (const auto& c : candidates) {
    acc += c.first;
    if (u < acc) return c.second;
  }
  return candidates.back().second;
}

void Sampler::KeepTopP(std::span<const float> probs, float threshold, double budget,
                       Scratch* scratch) {
  std::vector<std::pair<float, int32_t>>& candidates = scratch->kept;
  std::vector<std::pair<float, int32_t>>& boundary = scratch->boundary;
  std::vector<double>& bucket_mass = scratch->bucket_mass;
  // Buckets by the float bits of the weight (monotone in the weight): 128 per octave below 1,
  // the last one collects everything under 2^-32. Whole buckets before the one where the
  // cumulative mass passes the budget are kept unsorted; only that bucket is sorted.
  constexpr uint32_t kBuckets = 4096;
  auto bucket_of = [](float w) {
    uint32_t bits;
    std::memcpy(&bits, &w, sizeof(bits));
    const uint32_t below_one = bits >= 0x3F800000u ? 0u : 0x3F800000u - bits;
    return std::min(below_one >> 16, kBuckets - 1);
  };
  bucket_mass.assign(kBuckets, 0.0);
  for (float w : probs) {
    if (w > 0.0f && w >= threshold) bucket_mass[bucket_of(w)] += w;
  }
  uint32_t cut = kBuckets;  // first bucket whose end passes the budget
  double before = 0.0;      // mass of the buckets before `cut`
  for (uint32_t b = 0; b < kBuckets; ++b) {
    if (before + bucket_mass[b] > budget) {
      cut = b;
      break;
    }
    before += bucket_mass[b];
  }
  boundary.clear();
  for (size_t i = 0; i < probs.size(); ++i) {
    const float w = probs[i];
    if (!(w > 0.0f && w >= threshold)) continue;
    const uint32_t b = bucket_of(w);
    if (b < cut) {
      candidates.emplace_back(w, static_cast<int32_t>(i));
    } else if (b == cut) {
      boundary.emplace_back(w, static_cast<int32_t>(i));
    }
  }
  std::sort(boundary.begin(), boundary.end(), ByWeightThenId());
  double mass = before;
  for (const auto& c : boundary) {
    if (mass > budget) break;
    candidates.push_back(c);
    mass += c.first;
  }
}

}  // namespace tandem::engine
