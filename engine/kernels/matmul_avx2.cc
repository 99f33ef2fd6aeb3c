// AVX2 + FMA matmul path (kernels in matmul_avx_impl.inc).
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/matmul_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace tandem::engine::internal {
namespace avx2 {
#define TANDEM_MATMUL_ENTRY MatmulEntry
#define TANDEM_MATMUL_DIRECT_ROWS 2
#include "engine/kernels/matmul_avx_impl.inc"
#undef TANDEM_MATMUL_ENTRY
#undef TANDEM_MATMUL_DIRECT_ROWS

// Same rounding as F32ToBf16: RNE, NaN forced quiet.
void ConvertEntry(const float* src, bf16* dst, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i round = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x0040);
  auto narrow = [&](__m256i bits) {
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(round, lsb)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
    return _mm256_blendv_epi8(rounded, nan, is_nan);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = narrow(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b = narrow(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

}  // namespace avx2

void MatmulBf16Avx2(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                    float* y, int64_t ldy, ThreadPool* pool) {
  avx2::MatmulEntry<false>(x, ldx, m, k, w, n, y, ldy, pool);
}

void MatmulBf16Avx2Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                           int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  avx2::MatmulEntry<true>(x, ldx, m, k, w, n, y, ldy, pool);
}

void ConvertF32ToBf16Avx2(const float* src, bf16* dst, int64_t n) {
  avx2::ConvertEntry(src, dst, n);
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options
