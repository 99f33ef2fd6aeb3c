// The AVX-512-VNNI int8 path: vpdpbusd on 512-bit registers, x as qx + 128 (matmul_int8.h).
// A 64-byte block of a weight row is one register; a tile is up to 4 rows of x against a group of
// 4 weight rows (16 accumulators), so each weight register loaded feeds up to 4 vpdpbusd. At m = 1
// the group is one contiguous stream of 256 bytes per block.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/matmul_int8_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx2,fma,f16c")
// GCC 12 reports the deliberately undefined upper lanes inside _mm512_reduce_add_epi32's
// extraction once the tiles are inlined; every lane read is written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine::internal {
namespace {

constexpr int kTileRows = 4;

// acc + the 4-byte dot products of x (unsigned) and w (signed), vpdpbusd in place. Written as asm
// because GCC 12 copies the accumulators of _mm512_dpbusd_epi32 through other registers (and
// spilled one in the four-stream loop): Tile<4> at m = 64..256, k = 896, one thread, L2-resident,
// 230 GOP/s with the intrinsic against 302 with this (Zen 4; 6 rows a tile measured the same).
inline __m512i Dpbusd(__m512i acc, __m512i x, __m512i w) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
  return acc;
}

// The lane sums of a[0..3] (exact: integers), with fewer shuffles than four reductions.
inline void SumLanes4(const __m512i a[4], int32_t out[4]) {
  __m256i h[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    h[r] = _mm256_add_epi32(_mm512_castsi512_si256(a[r]), _mm512_extracti64x4_epi64(a[r], 1));
  }
  // Per 128-bit lane: pairs of rows 0/1 and 2/3 interleaved and added, then their halves.
  const __m256i t01 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(h[0], h[1]), _mm256_unpackhi_epi32(h[0], h[1]));
  const __m256i t23 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(h[2], h[3]), _mm256_unpackhi_epi32(h[2], h[3]));
  const __m256i u =
      _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
  const __m128i v = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
}

template <int MR>
void Tile(const uint8_t* x, int64_t kp, const int8_t* wg, int32_t out[MR][4]) {
  __m512i acc[MR][4];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[i][r] = _mm512_setzero_si512();
  }
  const int64_t blocks = kp / kInt8Block;
  for (int64_t q = 0; q < blocks; ++q) {
    const int8_t* wb = wg + q * 4 * kInt8Block;
    __m512i w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) w[r] = _mm512_loadu_si512(wb + r * kInt8Block);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + i * kp + q * kInt8Block);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[i][r] = Dpbusd(acc[i][r], xv, w[r]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) SumLanes4(acc[i], out[i]);
}

template <int MR>
void RunTile(const Int8Job& job, int64_t i, int64_t g) {
  int32_t out[MR][4];
  Tile<MR>(job.xq + i * job.kp, job.kp, job.w->data + g * 4 * job.kp, out);
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) StoreInt8Group<true>(job, i + t, g, out[t]);
}

// m = 1: kStreams groups g[0..kStreams) at once, each a contiguous run in its own place in memory
// (more DRAM reads in flight than one run; the hardware prefetchers follow each run), against the
// one row of x. Same sums as Tile<1> (integers: any order). Each stream also prefetches the lines
// kStreamAhead bytes ahead of its loads into L2 (prefetcht1), which keeps more line fills in
// flight than the hardware prefetchers do alone. Measured at Qwen2.5-0.5B shapes (24 layers' int8
// matrices, 358 MB, 2 threads, Zen 4, alternated in one process, median call of each shape per
// round) against two streams without prefetch: in 2 MiB pages, as the model's weights, prefetcht1
// 2 KiB ahead 1.06-1.11x (faster in 396 of 410 rounds; a plain read of the same bytes 16-67
// GB/s, 1.10x in rounds where it got ~63); in 4 KiB pages 1.10-1.13x (254 of 260; 1.12x in rounds
// whose plain read got 45-61 GB/s). 1 KiB ahead 1.05-1.10x; 4 or 8 KiB 0.93-0.94x where a plain
// read got under 28 GB/s; three streams with it 1.08x; four with it 1.00-1.03x and without it
// 0.97-0.98x (2 MiB pages). prefetcht0 (into L1) or prefetchnta 2-4 KiB ahead lost, 0.93-0.95x (4
// KiB pages). The AVX2 path (matmul_int8_avx2_impl.inc) measured no gain from prefetcht1 1 KiB
// ahead and losses further.
constexpr int kStreams = 2;
constexpr int64_t kStreamAhead = 2048;

template <int G>
void StreamGroups(const Int8Job& job, const int64_t* g) {
  const int64_t kp = job.kp;
  const int8_t* wg[G];
  __m512i acc[G][4];
#pragma GCC unroll 4
  for (int s = 0; s < G; ++s) {
    wg[s] = job.w->data + g[s] * 4 * kp;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[s][r] = _mm512_setzero_si512();
  }
  for (int64_t q = 0; q < kp / kInt8Block; ++q) {
    const __m512i xv = _mm512_loadu_si512(job.xq + q * kInt8Block);
#pragma GCC unroll 4
    for (int s = 0; s < G; ++s) {
      // Past a stream's end this reads ahead into the next part or matrix, or nothing (a
      // prefetch never faults).
      const char* ahead = reinterpret_cast<const char*>(wg[s] + q * 4 * kInt8Block) + kStreamAhead;
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) _mm_prefetch(ahead + r * kInt8Block, _MM_HINT_T1);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512i w = _mm512_loadu_si512(wg[s] + (q * 4 + r) * kInt8Block);
        acc[s][r] = Dpbusd(acc[s][r], xv, w);
      }
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < G; ++s) {
    int32_t out[4];
    SumLanes4(acc[s], out);
    StoreInt8Group<true>(job, 0, g[s], out);
  }
}

// m = 1 over groups [g_begin, g_end): split into kStreams near-equal consecutive parts, read side
// by side.
void StreamRange(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  const int64_t count = g_end - g_begin;
  const int64_t part = count / kStreams;
  int64_t g[kStreams];
  for (int64_t i = 0; i < part; ++i) {
    for (int s = 0; s < kStreams; ++s) g[s] = g_begin + s * part + i;
    StreamGroups<kStreams>(job, g);
  }
  for (int64_t rest = g_begin + kStreams * part; rest < g_end; ++rest) {
    StreamGroups<1>(job, &rest);
  }
}

}  // namespace

// 16 values a step: |x| maxed as max(|x|, amax) (a NaN in x is skipped, as in the scalar loop),
// then x * (127 / amax) rounded to nearest even, NaN set to 0, clamped and narrowed by truncation
// (exact: integers in [-127, 127]); the tail is a masked step.
float QuantizeRowAvx512(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q) {
  const int64_t full = k / 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k % 16)) - 1);
  auto load = [x](int64_t p, __mmask16 mask) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, x + p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  };
  __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= full; b += 2) {
    m0 = _mm512_max_ps(_mm512_abs_ps(load(16 * b, 0xFFFF)), m0);
    m1 = _mm512_max_ps(_mm512_abs_ps(load(16 * b + 16, 0xFFFF)), m1);
  }
  if (b < full) m0 = _mm512_max_ps(_mm512_abs_ps(load(16 * b, 0xFFFF)), m0);
  if (tail != 0) m1 = _mm512_max_ps(_mm512_abs_ps(load(16 * full, tail)), m1);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  const uint8_t pad = offset ? 128 : 0;
  if (!(amax > 0.0f)) {
    std::memset(q, pad, static_cast<size_t>(kp));
    return 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(127.0f / amax);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m128i flip = _mm_set1_epi8(offset ? static_cast<char>(0x80) : 0);
  auto step = [&](int64_t p, __mmask16 mask) {
    const __m512 v = _mm512_mul_ps(load(p, mask), inv);
    __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), r);
    r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
    const __m128i bytes = _mm_xor_si128(_mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)), flip);
    _mm_mask_storeu_epi8(q + p, mask, bytes);
  };
  for (int64_t i = 0; i < full; ++i) step(16 * i, 0xFFFF);
  if (tail != 0) step(16 * full, tail);
  std::memset(q + k, pad, static_cast<size_t>(kp - k));
  return amax / 127.0f;
}

void MatmulInt8GroupsAvx512Vnni(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  if (job.m == 1) {
    StreamRange(job, g_begin, g_end);
    return;
  }
  for (int64_t g = g_begin; g < g_end; ++g) {
    int64_t i = 0;
    for (; i + kTileRows <= job.m; i += kTileRows) RunTile<kTileRows>(job, i, g);
    switch (job.m - i) {
      case 3:
        RunTile<3>(job, i, g);
        break;
      case 2:
        RunTile<2>(job, i, g);
        break;
      case 1:
        RunTile<1>(job, i, g);
        break;
      default:
        break;
    }
  }
}

}  // namespace tandem::engine::internal

#pragma GCC diagnostic pop
#pragma GCC pop_options
