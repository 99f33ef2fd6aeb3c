// Internal to engine/: the element-wise loops of ops.cc, as inline functions, so that ops.cc
// (portable), ops_avx2.cc and ops_avx512.cc (the same loops compiled for AVX2 / AVX-512, without
// contraction) run the same source. Callers outside use ops.h.
#ifndef TANDEM_ENGINE_OPS_INTERNAL_H_
#define TANDEM_ENGINE_OPS_INTERNAL_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/bf16.h"
#include "engine/ops.h"

namespace tandem::engine::internal {

// out[i] = bf16(gate[i] / (1 + exp(-gate[i])) * up[i]), in chunks that keep the exps in L1.
// Always inlined, so each caller compiles it for its own instruction set; any out-of-line copy
// is compiled for the baseline (this header comes before ops_avx512.cc's target pragma).
__attribute__((always_inline)) inline void SiluMulToBf16Loop(const float* gate, const float* up,
                                                             int64_t n, bf16* out) {
  constexpr int64_t kChunk = 256;
  float tmp[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = n - i < kChunk ? n - i : kChunk;
    for (int64_t j = 0; j < len; ++j) tmp[j] = ExpF(-gate[i + j]);
    for (int64_t j = 0; j < len; ++j) tmp[j] = gate[i + j] / (1.0f + tmp[j]) * up[i + j];
    for (int64_t j = 0; j < len; ++j) out[i + j] = F32ToBf16(tmp[j]);
  }
}

// ExpF (engine/ops.h) of eight lanes, one IEEE operation for each of ExpF's, in ExpF's order:
// `x < c ? x : c` is vminps(x, c) and `x > c ? x : c` vmaxps(x, c) exactly (both return the
// second operand when x is NaN, as the comparisons do), the float -> int conversion truncates as
// static_cast does, and a NaN input comes back as itself. Every lane equals ExpF bit for bit as
// long as no multiply is fused into an add: its target has no FMA, so callers must not have it
// either (an AVX2 + FMA caller could contract the inlined code).
__attribute__((target("avx2"))) inline __m256 ExpF8(__m256 in) {
  const __m256 x =
      _mm256_max_ps(_mm256_min_ps(in, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3365478515625f));
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 n = _mm256_sub_ps(
      _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y =
      _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_blendv_ps(result, in, _mm256_cmp_ps(in, in, _CMP_UNORD_Q));
}

void ExpInPlaceAvx512(float* x, int64_t n);
void SiluMulToBf16Avx512(const float* gate, const float* up, int64_t n, bf16* out);
void ExpInPlaceAvx2(float* x, int64_t n);
void SiluMulToBf16Avx2(const float* gate, const float* up, int64_t n, bf16* out);

}  // namespace tandem::engine::internal

#endif  // TANDEM_ENGINE_OPS_INTERNAL_H_
