// AVX2 forms of ops.cc's element-wise loops (exp, SiLU * up), for CPUs without AVX-512. GCC does
// not vectorize the portable loops for AVX2 (the clamps and the NaN select stay branches), so
// these are written with ExpF8 (ops_internal.h). No multiply is fused into an add (the target has
// no FMA and the file is compiled with -ffp-contract=off, engine/CMakeLists.txt), so every result
// bit equals the portable loop's (tests/engine/model/ops_test.cc). ops.cc calls these only on
// CPUs with AVX2.
#include <immintrin.h>

#include "engine/kernels/matmul_internal.h"
#include "engine/ops_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2")

namespace tandem::engine::internal {

void ExpInPlaceAvx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, ExpF8(_mm256_loadu_ps(x + i)));
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
      const __m256 e = ExpF8(_mm256_xor_ps(g, sign));
      _mm256_store_ps(tmp + j, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)),
                                             _mm256_loadu_ps(up + i + j)));
    }
    for (; j < len; ++j) tmp[j] = gate[i + j] / (1.0f + ExpF(-gate[i + j])) * up[i + j];
    ConvertF32ToBf16Avx2(tmp, out + i, len);
  }
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options
