// Sampler: picks the next token from a row of logits with a request's sampling parameters.
//
// Order (as SGLang): temperature == 0 means greedy (argmax, lowest id on ties); otherwise
// logits / temperature -> softmax -> keep the top_k most likely -> keep the smallest prefix
// (by descending probability) whose mass reaches top_p -> drop tokens with probability below
// min_p * max probability -> renormalise and draw with the request's RNG.
// The RNG (mt19937_64) is seeded per request, so a seeded request samples the same tokens
// whatever else runs in the batch.
//
// Thread-compatible: one Sampler per request; Sample mutates the RNG state.
#ifndef TANDEM_ENGINE_SAMPLER_H_
#define TANDEM_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine {

struct SamplingParams {
  float temperature = 1.0f;  // >= 0; 0 = greedy
  int32_t top_k = -1;        // -1 or 0: no limit; else >= 1
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  uint64_t seed = 0;
};

// InvalidArgument naming the parameter when a value is out of range or not finite.
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  // `params` must have passed ValidateSamplingParams (Create checks it).
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  // The next token for `logits` [vocab]. InvalidArgument on an empty row or NaN logits.
  absl::StatusOr<int32_t> Sample(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch, reused across calls
};

// Argmax with the lowest index on ties; -1 for an empty row.
int32_t Argmax(std::span<const float> logits);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLER_H_
