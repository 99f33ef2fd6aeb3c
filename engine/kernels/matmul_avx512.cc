// AVX-512 matmul paths.
//
// kAvx512 runs the AVX2-instruction kernels of matmul_avx_impl.inc compiled with AVX-512VL, so
// the compiler has 32 vector registers; the arithmetic (and hence every result bit) is the same
// as on the AVX2 path. kAvx512Bf16 uses vdpbf16ps on 256-bit registers: 8 fp32 lanes, each adding
// the odd then the even product of its bf16 pair, which is by definition the order of matmul.h;
// vdpbf16ps applies DAZ/FTZ itself. 256-bit vdpbf16ps has the same throughput per element as the
// 512-bit form on Zen 4, which executes 512-bit operations as two 256-bit halves.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/matmul_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")

namespace tandem::engine::internal {
namespace avx512 {
#define TANDEM_MATMUL_ENTRY MatmulEntry
#define TANDEM_MATMUL_DIRECT_ROWS 4
#include "engine/kernels/matmul_avx_impl.inc"
#undef TANDEM_MATMUL_ENTRY
#undef TANDEM_MATMUL_DIRECT_ROWS
}  // namespace avx512

void MatmulBf16Avx512(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool) {
  avx512::MatmulEntry(x, ldx, m, k, w, n, y, ldy, pool);
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma,f16c")

namespace tandem::engine::internal {
namespace avx512bf16 {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileCols = 4;
constexpr int64_t kRowChunk = 128;  // rows of x (bf16) kept in L2 while a w tile is reused

inline __m256bh AsBh(__m256i v) { return reinterpret_cast<__m256bh&>(v); }

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

// y[r, c] for R rows of zero-padded x (bf16, stride xs) and C rows of w.
template <int R, int C>
void Tile(const bf16* xb, int64_t xs, const bf16* w, int64_t k, float* y, int64_t ldy) {
  const int64_t full = k / 16;
  const int tail = static_cast<int>(k % 16);
  __m256 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  __m256i v[C];
  for (int64_t q = 0; q < full; ++q) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const bf16* src = w + c * k + 16 * q;
      _mm_prefetch(reinterpret_cast<const char*>(src + 512), _MM_HINT_T0);
      v[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + r * xs + 16 * q));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_dpbf16_ps(acc[r][c], AsBh(xv), AsBh(v[c]));
    }
  }
  if (tail) {
    const __mmask16 mask = static_cast<__mmask16>((1u << tail) - 1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) v[c] = _mm256_maskz_loadu_epi16(mask, w + c * k + 16 * full);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + r * xs + 16 * full));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_dpbf16_ps(acc[r][c], AsBh(xv), AsBh(v[c]));
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) y[r * ldy + c] = ReduceLanes(acc[r][c]);
}

template <int C>
void Rows(const bf16* xb, int64_t xs, int64_t m, const bf16* w, int64_t k, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + kTileRows <= m; i += kTileRows)
    Tile<kTileRows, C>(xb + i * xs, xs, w, k, y + i * ldy, ldy);
  switch (m - i) {
    case 3:
      Tile<3, C>(xb + i * xs, xs, w, k, y + i * ldy, ldy);
      break;
    case 2:
      Tile<2, C>(xb + i * xs, xs, w, k, y + i * ldy, ldy);
      break;
    case 1:
      Tile<1, C>(xb + i * xs, xs, w, k, y + i * ldy, ldy);
      break;
    default:
      break;
  }
}

void Columns(const bf16* xb, int64_t xs, int64_t m, const bf16* w, int64_t k, int64_t j0,
             int64_t j1, float* y, int64_t ldy) {
  for (int64_t i0 = 0; i0 < m; i0 += kRowChunk) {
    const int64_t rows = m - i0 < kRowChunk ? m - i0 : kRowChunk;
    int64_t j = j0;
    for (; j + kTileCols <= j1; j += kTileCols)
      Rows<kTileCols>(xb + i0 * xs, xs, rows, w + j * k, k, y + i0 * ldy + j, ldy);
    for (; j < j1; ++j) Rows<1>(xb + i0 * xs, xs, rows, w + j * k, k, y + i0 * ldy + j, ldy);
  }
}

}  // namespace

void MatmulEntry(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                 float* y, int64_t ldy, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  // x rows copied with stride xs (a multiple of 16) and zero padding, so full-width loads of the
  // last block read zeros; vdpbf16ps then adds exact +0 products, which changes no lane.
  const int64_t xs = (k + 15) / 16 * 16;
  bf16* xb = reinterpret_cast<bf16*>(ScratchFloats(m * xs / 2, 0));
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(xb + i * xs, x + i * ldx, static_cast<size_t>(k) * sizeof(bf16));
    std::memset(xb + i * xs + k, 0, static_cast<size_t>(xs - k) * sizeof(bf16));
  }
  const int64_t n_units = (n + kTileCols - 1) / kTileCols;
  auto body = [&](int64_t begin, int64_t end) {
    FlushDenormalsScope flush;
    const int64_t j0 = begin * kTileCols;
    const int64_t j1 = end * kTileCols < n ? end * kTileCols : n;
    Columns(xb, xs, m, w, k, j0, j1, y, ldy);
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_units, m * n * k, body);
  } else {
    body(0, n_units);
  }
}

}  // namespace avx512bf16

void MatmulBf16Avx512Bf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                          int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  avx512bf16::MatmulEntry(x, ldx, m, k, w, n, y, ldy, pool);
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options
