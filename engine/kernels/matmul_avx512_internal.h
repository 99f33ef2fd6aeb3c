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
