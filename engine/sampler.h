// Sampling parameters of a request and the Sampler that picks its next token from a row of
// logits.
//
// Per step, in this order:
//  1. Penalties over the tokens generated so far (returned by Sample or passed to Observe; the
//     prompt is not counted, as in SGLang's penalizers and OpenAI's API):
//     repetition_penalty (HF/SGLang: a seen token's logit l becomes l / r if l > 0, else l * r),
//     then frequency_penalty * count + presence_penalty * (count > 0) is subtracted (OpenAI).
//  2. While fewer than min_new_tokens tokens have been generated, the EOS ids and
//     stop_token_ids get -inf (they cannot be chosen).
//  3. logprob of the chosen token = log_softmax of the row after steps 1-2, before temperature
//     and before any top-k/top-p/min-p truncation (the model's distribution under penalties).
//     With top_logprobs_num = n > 0, the n most likely tokens of that same distribution too
//     (most likely first, ties by the lower id), whichever token is then chosen.
//  4. temperature == 0 (or top_k == 1): greedy, argmax with the lowest id on ties. Otherwise
//     softmax(row / temperature), then three masks over that full distribution, as SGLang's
//     reference sampler applies them: keep the top_k most likely; keep a token if the mass of
//     the tokens more likely than it is <= top_p; keep a token if its probability is
//     >= min_p * the largest probability. The kept tokens are renormalised and one is drawn with
//     the request's RNG. Ordering ties are broken by the lower id. Weights use ExpF (scalar or
//     AVX2, the same bits) and sums run in a fixed order, so a draw does not depend on the CPU
//     path; the top_p cut sums mass per weight bucket, which may move the cut by one token of
//     rounding compared with one running sum over the sorted tokens.
// The RNG (mt19937_64) is seeded per request, so a seeded request samples the same tokens
// whatever else runs in the batch.
//
// Thread-compatible: one Sampler per request; Sample and Observe mutate it. Copyable and
// movable (it owns only plain containers). Different Samplers may run on different threads at
// once (scratch memory is per thread).
#ifndef TANDEM_ENGINE_SAMPLER_H_
#define TANDEM_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine {

// At most this many stop strings per request, each at most kMaxStopStringBytes long (a stop
// string is matched against the held-back tail of the text on every token).
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
// At most this many alternatives per position (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

// SGLang's names and defaults.
struct SamplingParams {
  float temperature = 1.0f;             // >= 0; 0 = greedy
  int32_t top_k = -1;                   // -1 (or 0): no limit; else >= 1
  float top_p = 1.0f;                   // (0, 1]
  float min_p = 0.0f;                   // [0, 1]
  uint64_t seed = 0;                    // the engine fills a random one when the request has none
  float frequency_penalty = 0.0f;       // [-2, 2], OpenAI semantics over generated tokens
  float presence_penalty = 0.0f;        // [-2, 2], OpenAI semantics over generated tokens
  float repetition_penalty = 1.0f;      // (0, 2], HF/SGLang semantics over generated tokens
  int32_t max_new_tokens = 128;         // >= 0
  int32_t min_new_tokens = 0;           // [0, max_new_tokens]: EOS/stop ids masked until reached
  std::vector<std::string> stop;        // stop strings: non-empty, valid UTF-8, see limits above
  std::vector<int32_t> stop_token_ids;  // each in [0, vocab_size)
  bool ignore_eos = false;              // EOS does not end the request (stop_token_ids still do)
  bool skip_special_tokens = true;      // special tokens contribute no text
  bool no_stop_trim = false;            // keep the matched stop string in the text
  int32_t top_logprobs_num = 0;         // [0, kMaxTopLogprobs]: alternatives reported per token
};

// OK, or InvalidArgument whose message names the parameter and its allowed range, e.g.
// "sampling_params.top_p must be in (0, 1], got 1.5". `vocab_size` bounds stop_token_ids.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;           // see step 3 above; <= 0
  std::vector<TokenLogprob> top;  // top_logprobs_num of them (fewer only for a smaller vocab)
};

// A first token sampled by another worker (the prefill side): InvalidArgument when the token or
// one of its alternatives is outside [0, vocab_size), or it has more than kMaxTopLogprobs
// alternatives.
absl::Status ValidateFirstToken(const SampleResult& first, int32_t vocab_size);

class Sampler {
 public:
  // Validates `params` (the error of ValidateSamplingParams). `eos_token_ids` (ids outside the
  // vocabulary are ignored) are masked together with stop_token_ids while fewer than
  // min_new_tokens tokens have been generated.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params, int32_t vocab_size,
                                        std::vector<int32_t> eos_token_ids);

  // The next token for `logits` [vocab_size], after penalties over the tokens generated so far;
  // records the token. InvalidArgument on a row whose size is not vocab_size, on NaN or +inf, and
  // when every token is masked (-inf everywhere). Never changes state on error.
  absl::StatusOr<SampleResult> Sample(std::span<const float> logits);

  // Records a token generated elsewhere (the first token sampled by a prefill worker) so that
  // penalties and min_new_tokens count it. An id outside the vocabulary counts towards
  // num_generated but not towards penalties. Advances the RNG as Sample would have, so a
  // seeded request continues exactly as if this Sampler had drawn `token` itself.
  void Observe(int32_t token);

  // Tokens returned by Sample plus tokens passed to Observe.
  int64_t num_generated() const { return num_generated_; }
  const SamplingParams& params() const { return params_; }

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size, std::vector<int32_t> masked_ids);

  // Per-thread scratch buffers of one Sample call (sampler.cc): a Sampler lives as long as its
  // request, so vocabulary-sized buffers are kept per thread, not per request.
  struct Scratch;

  bool HasPenalties() const;
  bool MaskActive() const { return num_generated_ < params_.min_new_tokens && !masked_.empty(); }
  // Applies steps 1-2 to a copy of `logits` in scratch->logits and returns it, or returns
  // `logits` itself when neither applies.
  std::span<const float> Penalized(std::span<const float> logits, Scratch* scratch) const;
  // Draws from `probs` [vocab_size] (unnormalised, the largest exactly 1, summing to `total`)
  // under the top-k/top-p/min-p masks.
  int32_t Draw(std::span<const float> probs, double total, Scratch* scratch);
  // Without top_k: sets scratch->kept to the tokens top_p and min_p keep (in no particular but
  // deterministic order). Linear in the vocabulary plus a sort of one bucket.
  static void KeepTopP(std::span<const float> probs, float threshold, double budget,
                       Scratch* scratch);
  // Uniform in [0, bound) from the request's RNG.
  double Uniform(double bound) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 * bound; }

  SamplingParams params_;
  int32_t vocab_size_;
  std::vector<int32_t> masked_;  // EOS ids and stop_token_ids, deduplicated, in range
  std::mt19937_64 rng_;
  int64_t num_generated_ = 0;
  std::unordered_map<int32_t, int32_t> counts_;  // generated token id -> occurrences
};

// The logprob of `token` under the model's own distribution `logits` [vocab] (log_softmax, no
// penalties, no temperature: how prompt tokens are scored), with the `top_n` most likely tokens
// of that distribution, computed as Sample computes its logprobs. `token` must be in range.
SampleResult ScoreToken(std::span<const float> logits, int32_t token, int32_t top_n);

// Argmax with the lowest index on ties; -1 for an empty row.
int32_t Argmax(std::span<const float> logits);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLER_H_
