// What the kAvx512Bf16 matmul's two files share: matmul_avx512.cc (MatmulEntry and the tiles)
// and matmul_avx512_stream.cc (the weight streams of small m). Internal to engine/kernels, and
// compiled for AVX-512 BF16: only code that runs once matmul.cc's dispatch has found the CPU
// support may call into it.
#ifndef TANDEM_ENGINE_KERNELS_MATMUL_AVX512_INTERNAL_H_
#define TANDEM_ENGINE_KERNELS_MATMUL_AVX512_INTERNAL_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/bf16.h"
#include "engine/kernels/thread_pool.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma,f16c")
// GCC 12 reports the deliberately undefined upper lanes inside _mm512_broadcast_i64x4 once the
// tiles and streams are inlined; the broadcast writes every lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine::internal::avx512bf16 {

// kGroups4 calls of up to this many rows of x run the streams (StreamGroupColumnsFor), larger
// ones the tiles.
inline constexpr int kBatchGroupRows = 8;

inline __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

inline float ReduceLanes(__m256 acc) {
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

// ReduceLanes of the eight 256-bit halves of a0..a3, in the order a0 low, a0 high, a1 low, ...,
// as one vector: lane u is ReduceLanes of half u, bit for bit (the same pairs are added in the
// same order, ((0+4)+(2+6))+((1+5)+(3+7)); only the shuffles that line them up differ). 13
// instructions for eight sums where ReduceLanes takes about 7 for one.
inline __m256 ReduceLanes8(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // 128-bit lanes: the low 4 of halves 0..3 | their high 4; added, lane i holds half i's
  // (0+4) (1+5) (2+6) (3+7), and u23 those of halves 4..7.
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane i: (0+4)+(2+6), (1+5)+(3+7) of half i, then of half 4 + i.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane i: the sum of half i, of half 4 + i (twice).
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, r));
}

// Sets MXCSR.DAZ and FTZ so the horizontal reduction flushes like the other paths.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushDenormalsScope() { _mm_setcsr(saved_); }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned int saved_;
};

// m = 1: y[0 .. n) = w x for the n rows of w (kRows, or kGroups4 when kGrouped), on the pool
// (null: this thread). Defined for both values of kGrouped in matmul_avx512_stream.cc.
template <bool kGrouped>
void StreamEntry(const bf16* x, int64_t k, const bf16* w, int64_t n, float* y, ThreadPool* pool);

// kGroups4, 1 <= m <= R: the m rows of x (ldx apart) against weight rows [j0, j1) (multiples of
// 4), into y (ldy apart) on this thread; the caller sets FlushDenormalsScope. Defined for the
// default R in matmul_avx512_stream.cc.
template <int R = kBatchGroupRows>
void StreamGroupColumnsFor(int64_t m, const bf16* x, int64_t ldx, const bf16* w, int64_t k,
                           int64_t j0, int64_t j1, float* y, int64_t ldy);

}  // namespace tandem::engine::internal::avx512bf16

#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif  // TANDEM_ENGINE_KERNELS_MATMUL_AVX512_INTERNAL_H_
