// The 256-bit int8 paths: AVX2 (vpmaddubsw) and AVX-VNNI (vpdpbusd), the same tiles
// (matmul_int8_avx2_impl.inc) compiled for each instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/matmul_int8_internal.h"

namespace tandem::engine::internal {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace int8_avx2 {
#define TANDEM_INT8_VNNI 0
#include "engine/kernels/matmul_int8_avx2_impl.inc"
#undef TANDEM_INT8_VNNI
}  // namespace int8_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace int8_avxvnni {
#define TANDEM_INT8_VNNI 1
#include "engine/kernels/matmul_int8_avx2_impl.inc"
#undef TANDEM_INT8_VNNI
}  // namespace int8_avxvnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// QuantizeRowAvx512's steps on 8 values: max(|x|, amax) skips NaNs, round_ps rounds to nearest
// even, NaN is set to 0 and the clamped integers narrowed by saturating packs (exact: they lie
// in [-127, 127]); the last k % 8 values go through the scalar loop's arithmetic.
float QuantizeRowAvx2(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q) {
  const int64_t full = k / 8;
  auto load = [x](int64_t p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  };
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m0 = _mm256_setzero_ps();
  for (int64_t b = 0; b < full; ++b) m0 = _mm256_max_ps(_mm256_and_ps(load(8 * b), abs_mask), m0);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  float amax = _mm_cvtss_f32(m);
  for (int64_t p = 8 * full; p < k; ++p) amax = std::max(amax, std::fabs(Bf16ToF32(x[p])));
  const uint8_t pad = offset ? 128 : 0;
  if (!(amax > 0.0f)) {
    std::memset(q, pad, static_cast<size_t>(kp));
    return 0.0f;
  }
  const float inv = 127.0f / amax;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m128i flip = _mm_set1_epi8(offset ? static_cast<char>(0x80) : 0);
  for (int64_t b = 0; b < full; ++b) {
    const __m256 v = _mm256_mul_ps(load(8 * b), vinv);
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    const __m256i i32 = _mm256_cvttps_epi32(r);
    const __m128i i16 =
        _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    const __m128i i8 = _mm_xor_si128(_mm_packs_epi16(i16, i16), flip);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 8 * b), i8);
  }
  for (int64_t p = 8 * full; p < k; ++p) {
    const float v = Bf16ToF32(x[p]) * inv;
    const float r = v == v ? std::clamp(std::nearbyint(v), -127.0f, 127.0f) : 0.0f;
    q[p] = static_cast<uint8_t>(static_cast<int8_t>(r) + (offset ? 128u : 0u));
  }
  std::memset(q + k, pad, static_cast<size_t>(kp - k));
  return amax / 127.0f;
}
#pragma GCC pop_options

void MatmulInt8GroupsAvx2(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  int8_avx2::GroupsEntry(job, g_begin, g_end);
}

void MatmulInt8GroupsAvxVnni(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  int8_avxvnni::GroupsEntry(job, g_begin, g_end);
}

}  // namespace tandem::engine::internal
