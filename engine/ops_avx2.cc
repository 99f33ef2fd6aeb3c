// AVX2 forms of ops.cc's element-wise loops (exp, SiLU * up), for CPUs without AVX-512. GCC does
// not vectorize the portable loops for AVX2 (the clamps and the NaN select stay branches), so
// these are written with intrinsics, one IEEE operation for each of ExpF's, in ExpF's order:
// `x < c ? x : c` is vminps(x, c) and `x > c ? x : c` vmaxps(x, c) exactly (both return the
// second operand when x is NaN, as the comparisons do), the float -> int conversion truncates as
// static_cast does, and no multiply is fused into an add (the target has no FMA and the file is
// compiled with -ffp-contract=off, engine/CMakeLists.txt). Every result bit equals the portable
// loop's (tests/engine/model/ops_test.cc). ops.cc calls these only on CPUs with AVX2.
#include <immintrin.h>

#include "engine/kernels/matmul_internal.h"
#include "engine/ops_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2")

namespace tandem::engine::internal {
namespace {

// ExpF of eight lanes (engine/ops.h).
inline __m256 Exp8(__m256 in) {
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

}  // namespace

void ExpInPlaceAvx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, Exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = ExpF(x[i]);
}

// out[i] = bf16(gate[i] / (1 + exp(-gate[i])) * up[i]), as SiluMulToBf16Loop: the products in
// chunks that stay in L1, then rounded to bf16 by the AVX2 conversion (same rounding as
// F32ToBf16).
void SiluMulToBf16Avx2(const float* gate, const float* up, int64_t n, bf16* out) {
  constexpr int64_t kChunk = 256;
  alignas(32) float tmp[kChunk];
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = n - i < kChunk ? n - i : kChunk;
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
      const __m256 g = _mm256_loadu_ps(gate + i + j);
      const __m256 e = Exp8(_mm256_xor_ps(g, sign));
      _mm256_store_ps(tmp + j, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)),
                                             _mm256_loadu_ps(up + i + j)));
    }
    for (; j < len; ++j) tmp[j] = gate[i + j] / (1.0f + ExpF(-gate[i + j])) * up[i + j];
    ConvertF32ToBf16Avx2(tmp, out + i, len);
  }
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options
