// AVX-512 matmul paths, all but the weight streams of small m (matmul_avx512_stream.cc).
//
// kAvx512 runs the AVX2-instruction kernels of matmul_avx_impl.inc compiled with AVX-512VL, so
// the compiler has 32 vector registers; the arithmetic (and hence every result bit) is the same
// as on the AVX2 path.
//
// kAvx512Bf16 uses vdpbf16ps: each fp32 lane adds the odd then the even
// product of its bf16 pair, which is by definition the order of matmul.h (8 lanes per 16
// elements), and vdpbf16ps applies DAZ/FTZ itself. A 512-bit register holds two rows at once:
// its low 256 bits carry row r's 8 lanes and its high 256 bits row r + 1's, against the same 16
// weights broadcast to both halves, so every row still sees exactly the 8-lane order while each
// instruction does twice the work. On CPUs with full-width AVX-512 that doubles the multiply-add
// rate of the 256-bit form (measured on such a host: 412 vs 206 GFLOP/s on one core); where the
// 512-bit unit is two 256-bit halves the two forms run at the same rate (measured on an EPYC
// host: 235 GFLOP/s on one core either way, bench/probe MeasureBf16DotPeakGflops). At m = 1
// MatmulEntry hands the call to the weight streams (StreamEntry). With kRows weights every m >= 2
// runs the row-pair tiles: a group of C weight rows is read from DRAM once and from L1 by each
// tile of row pairs. At decode sizes (no more tiles than rows in a group) the tiles of one group
// prefetch the next group's rows between them, so those DRAM reads overlap the group's
// multiply-adds; at prefill sizes each tile reads its own rows ahead (the shared prefetch cost
// prefill 3-8%) (measured, 2 threads, n = 4864, k = 896: m = 8 from 345 to 135-226 us, m = 32
// from 665-706 to 473-496 us; the kAvx512 kernels took m < 16 before). All give the same bits.
//
// Weights in WeightLayout::kGroups4 (matmul.h) take the same arithmetic. Up to kBatchGroupRows
// (8) rows of x they run the streams (StreamGroupColumnsFor); more rows run tiles of 6 rows of x
// against 4 pairs of weight rows (GroupTile): a pair's block is one 64-byte load and x's block is
// broadcast, the register layout of the m = 1 stream. Measured against kRows on 2 threads,
// alternated (k = 896): m = 8 and 32 within 0.9-1.2x, m = 1024 equal (m = 8 then ran these tiles;
// it now runs the streams, which read its weights faster).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/matmul_avx512_internal.h"
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
  avx512::MatmulEntry<false>(x, ldx, m, k, w, n, y, ldy, pool);
}

void MatmulBf16Avx512Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                             int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  avx512::MatmulEntry<true>(x, ldx, m, k, w, n, y, ldy, pool);
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma,f16c")
// GCC 12 reports the deliberately undefined upper lanes inside _mm512_broadcast_i64x4 once the
// tiles are inlined; the broadcast writes every lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine::internal {
namespace avx512bf16 {
namespace {

// Register tiles of 4 row pairs x 6 weight rows: 24 accumulators, 6 weight registers and the x
// operand fill 31 of the 32 vector registers, and each block costs 10 loads for 24 vdpbf16ps
// where 2 x 8 and 4 x 4 tiles (16 accumulators) cost 10 and 8 loads for 16. Measured at m = 32 on
// 2 threads, alternated with the former 2 x 8 (k <= 1024) and 4 x 4 (longer k) tiles, best of 30
// calls: n 9728 k 896 (gate/up) 852-990 against 986-1102 us, n 896 k 4864 (down) 464-492 against
// 592-685 us, lm_head 14.8-17.0 against 16.7-20.0 ms. A group's 6 rows of a long k (down: 58 KB)
// outgrow L1 and are read again from L2 by each tile; that still beat the 4 x 4 tile there.
constexpr int kTilePairs = 4;
constexpr int kTileCols = 6;
// With kGroups4 weights a tile is 6 rows of x x 4 pairs of weight rows (two groups): 24
// accumulators, 10 loads per block, and x read once per 8 weight rows.
constexpr int kGroupTileRows = 6;
// Row pairs of x (bf16) kept in L2 while the w tiles go through them: at most kPairChunk, and at
// most kPairChunkBytes of packed x, so a wide k (down_proj: 4864, 19 KB a pair) still fits L2
// instead of spilling to L3 (measured in prefill: down_proj from 26% to 22-24% of the time).
constexpr int64_t kPairChunk = 64;
constexpr int64_t kPairChunkBytes = 384 << 10;

// Packed x: for row pair p and block q, 32 bf16 at xp + (p * nb + q) * 32: row 2p's elements
// 16q..16q+15, then row 2p+1's (zeros past k and for the missing row of an odd m).
void PackPairs(const bf16* x, int64_t ldx, int64_t m, int64_t k, int64_t nb, bf16* xp) {
  const int64_t pairs = (m + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 2 * p + half;
      for (int64_t q = 0; q < nb; ++q) {
        bf16* dst = xp + (p * nb + q) * 32 + 16 * half;
        const int64_t begin = 16 * q;
        const int64_t n = i < m ? std::min<int64_t>(16, k - begin) : 0;
        if (n > 0) std::memcpy(dst, x + i * ldx + begin, static_cast<size_t>(n) * sizeof(bf16));
        if (n < 16) std::memset(dst + n, 0, static_cast<size_t>(16 - n) * sizeof(bf16));
      }
    }
  }
}

// y for P row pairs starting at pair `p0` (rows 2 p0 .. 2 p0 + 2P - 1, those below m) and C rows
// of w (kRows). Meanwhile it prefetches `pf_rows` whole rows of w from `pf` (rows a later tile
// reads from DRAM), a line every other block; with `row_ahead` it also prefetches its own rows
// 1 KB ahead (a tile whose rows nobody prefetched).
template <int P, int C>
void Tile(const bf16* xp, int64_t nb, int64_t p0, int64_t m, const bf16* w, int64_t k, float* y,
          int64_t ldy, const bf16* pf, int pf_rows, bool row_ahead) {
  const int64_t full = k / 16;
  const int tail = static_cast<int>(k % 16);
  __m512 acc[P][C];
#pragma GCC unroll 16
  for (int r = 0; r < P; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  __m512i v[C];
  const bf16* xrow = xp + p0 * nb * 32;
  for (int64_t q = 0; q < full; ++q) {
    if ((q & 1) == 0) {
      for (int r = 0; r < pf_rows; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + r * k + 16 * q), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const bf16* src = w + c * k + 16 * q;
      if (row_ahead) _mm_prefetch(reinterpret_cast<const char*>(src + 512), _MM_HINT_T0);
      v[c] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    }
#pragma GCC unroll 16
    for (int r = 0; r < P; ++r) {
      const __m512i xv = _mm512_loadu_si512(xrow + (r * nb + q) * 32);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], AsBh(xv), AsBh(v[c]));
    }
  }
  if (tail) {
    const __mmask16 mask = static_cast<__mmask16>((1u << tail) - 1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      v[c] = _mm512_broadcast_i64x4(_mm256_maskz_loadu_epi16(mask, w + c * k + 16 * full));
    }
#pragma GCC unroll 16
    for (int r = 0; r < P; ++r) {
      const __m512i xv = _mm512_loadu_si512(xrow + (r * nb + full) * 32);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], AsBh(xv), AsBh(v[c]));
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < P; ++r) {
    const int64_t i = 2 * (p0 + r);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      y[i * ldy + c] = ReduceLanes(_mm512_castps512_ps256(acc[r][c]));
      if (i + 1 < m) y[(i + 1) * ldy + c] = ReduceLanes(_mm512_extractf32x8_ps(acc[r][c], 1));
    }
  }
}

// The tiles of P pairs over pairs [p0, p1) and the C rows of w. With at most C tiles (decode
// batch sizes) they prefetch the C rows at `next` (the next group of columns, null for none)
// between them, a share of the rows each, so that group's DRAM reads overlap this group's
// multiply-adds from L1 instead of stalling the next group's first tile; `cold`: nobody
// prefetched these rows, so the first tile reads ahead itself. With more tiles (prefill) every
// tile reads its own rows ahead instead (measured: prefill 1024 at 625-640 tok/s against 578-618
// with the shared prefetch, batch 32 decode no slower).
// The last tile of Pairs, of `left` < Q + 1 pairs.
template <int Q, int C>
void LastTile(int64_t left, const bf16* xp, int64_t nb, int64_t p, int64_t m, const bf16* w,
              int64_t k, float* y, int64_t ldy, const bf16* pf, int rows, bool row_ahead) {
  if constexpr (Q >= 1) {
    if (left == Q) {
      Tile<Q, C>(xp, nb, p, m, w, k, y, ldy, pf, rows, row_ahead);
    } else {
      LastTile<Q - 1, C>(left, xp, nb, p, m, w, k, y, ldy, pf, rows, row_ahead);
    }
  }
}

template <int P, int C>
void Pairs(const bf16* xp, int64_t nb, int64_t p0, int64_t p1, int64_t m, const bf16* w, int64_t k,
           float* y, int64_t ldy, const bf16* next, bool cold) {
  const int64_t tiles = (p1 - p0 + P - 1) / P;
  const bool every = tiles > C;
  if (every) next = nullptr;
  int64_t t = 0;
  auto share = [&](int64_t tile, const bf16** pf, int* rows) {
    const int64_t r0 = tile * C / tiles, r1 = (tile + 1) * C / tiles;
    *pf = next == nullptr ? nullptr : next + r0 * k;
    *rows = next == nullptr ? 0 : static_cast<int>(r1 - r0);
  };
  const bf16* pf;
  int rows;
  int64_t p = p0;
  for (; p + P <= p1; p += P, ++t) {
    share(t, &pf, &rows);
    Tile<P, C>(xp, nb, p, m, w, k, y, ldy, pf, rows, every || (cold && t == 0));
  }
  share(t, &pf, &rows);
  LastTile<P - 1, C>(p1 - p, xp, nb, p, m, w, k, y, ldy, pf, rows, every || (cold && t == 0));
}

template <int P, int C>
void Columns(const bf16* xp, int64_t nb, int64_t m, const bf16* w, int64_t k, int64_t j0,
             int64_t j1, float* y, int64_t ldy) {
  const int64_t pairs = (m + 1) / 2;
  const int64_t chunk = std::clamp<int64_t>(kPairChunkBytes / (nb * 64), 4, kPairChunk);
  for (int64_t p0 = 0; p0 < pairs; p0 += chunk) {
    const int64_t p1 = std::min(pairs, p0 + chunk);
    int64_t j = j0;
    for (; j + C <= j1; j += C) {
      const bf16* next = j + 2 * C <= j1 ? w + (j + C) * k : nullptr;
      Pairs<P, C>(xp, nb, p0, p1, m, w + j * k, k, y + j, ldy, next, j == j0);
    }
    for (; j < j1; ++j) Pairs<P, 1>(xp, nb, p0, p1, m, w + j * k, k, y + j, ldy, nullptr, true);
  }
}

// kGroups4 weights, m >= 2: tiles of R rows of x against Cp pairs of weight rows (rows 2c and
// 2c + 1 of the tile's column group; Cp = 4 spans two groups). A register holds a pair's block
// q, one 64-byte load from its group, against x row i's block q broadcast to both halves, so each
// output's 8 lanes see matmul.h's order, as in StreamRows (matmul_avx512_stream.cc). x is read in
// place (k % 16 == 0: no tail). Meanwhile the tile prefetches `pf_lines` of the next column group's
// 2 Cp lines per block starting at line `pf_first` (line l: group l / 2, half l % 2 of its block)
// into L1, the same lines of the group after it (`far`, null for none) into L2, and with
// `row_ahead` its own pairs 32 blocks ahead.
template <int R, int Cp>
void GroupTile(const bf16* x, int64_t ldx, int64_t i0, const bf16* w, int64_t k, float* y,
               int64_t ldy, const bf16* pf, const bf16* far, int pf_first, int pf_lines,
               bool row_ahead) {
  const int64_t full = k / 16;
  __m512 acc[R][Cp];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < Cp; ++c) acc[r][c] = _mm512_setzero_ps();
  __m512i v[Cp];
  const bf16* xrow = x + i0 * ldx;
  for (int64_t q = 0; q < full; ++q) {
    for (int l = pf_first; l < pf_first + pf_lines; ++l) {
      const int64_t line = (l >> 1) * 4 * k + 64 * q + 32 * (l & 1);
      _mm_prefetch(reinterpret_cast<const char*>(pf + line), _MM_HINT_T0);
      if (far != nullptr) _mm_prefetch(reinterpret_cast<const char*>(far + line), _MM_HINT_T1);
    }
#pragma GCC unroll 16
    for (int c = 0; c < Cp; ++c) {
      const bf16* src = w + (c >> 1) * 4 * k + 64 * q + 32 * (c & 1);
      if (row_ahead) _mm_prefetch(reinterpret_cast<const char*>(src + 32 * 64), _MM_HINT_T0);
      v[c] = _mm512_loadu_si512(src);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xrow + r * ldx + 16 * q)));
#pragma GCC unroll 16
      for (int c = 0; c < Cp; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], AsBh(xv), AsBh(v[c]));
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* yr = y + (i0 + r) * ldy;
    if constexpr (Cp == 4) {
      // A row's 8 outputs at once (at m = 32, k = 896 one lane at a time took about a sixth of
      // the tile's instructions).
      _mm256_storeu_ps(yr, ReduceLanes8(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    } else {
#pragma GCC unroll 16
      for (int c = 0; c < Cp; ++c) {
        yr[2 * c] = ReduceLanes(_mm512_castps512_ps256(acc[r][c]));
        yr[2 * c + 1] = ReduceLanes(_mm512_extractf32x8_ps(acc[r][c], 1));
      }
    }
  }
}

// The last GroupTile of GroupRows, of `left` < Q + 1 rows.
template <int Q, int Cp>
void LastGroupTile(int64_t left, const bf16* x, int64_t ldx, int64_t i0, const bf16* w, int64_t k,
                   float* y, int64_t ldy, const bf16* pf, const bf16* far, int pf_first,
                   int pf_lines, bool row_ahead) {
  if constexpr (Q >= 1) {
    if (left == Q) {
      GroupTile<Q, Cp>(x, ldx, i0, w, k, y, ldy, pf, far, pf_first, pf_lines, row_ahead);
    } else {
      LastGroupTile<Q - 1, Cp>(left, x, ldx, i0, w, k, y, ldy, pf, far, pf_first, pf_lines,
                               row_ahead);
    }
  }
}

// The tiles of R rows over rows [i0, i1) of x and the 2 Cp weight rows at w, as Pairs: with at
// most kSharedPrefetchTiles tiles (decode batches up to 48) they prefetch the next column group
// (`next`, null for none) into L1 and the one after it (`far`) into L2 between them, their lines
// shared out (some tiles may get none); with more (prefill) each reads its own rows ahead.
// `cold`: nobody prefetched these rows. The L2 stage measured at m = 32 on lm_head (272 MB from
// DRAM, 2 threads, alternated): 345-368 without it, 388-394 GFLOP/s with it.
constexpr int64_t kSharedPrefetchTiles = 8;
template <int R, int Cp>
void GroupRows(const bf16* x, int64_t ldx, int64_t i0, int64_t i1, const bf16* w, int64_t k,
               float* y, int64_t ldy, const bf16* next, const bf16* far, bool cold) {
  constexpr int kLines = Cp;  // two lines per group and block, two pairs per group
  const int64_t tiles = (i1 - i0 + R - 1) / R;
  const bool every = tiles > kSharedPrefetchTiles;
  if (every) next = far = nullptr;
  if (next == nullptr) far = nullptr;
  int64_t t = 0;
  int64_t i = i0;
  auto lines = [&](int64_t tile, int* first, int* count) {
    const int64_t l0 = tile * kLines / tiles, l1 = (tile + 1) * kLines / tiles;
    *first = static_cast<int>(l0);
    *count = next == nullptr ? 0 : static_cast<int>(l1 - l0);
  };
  int first, count;
  for (; i + R <= i1; i += R, ++t) {
    lines(t, &first, &count);
    GroupTile<R, Cp>(x, ldx, i, w, k, y, ldy, next, far, first, count, every || (cold && t == 0));
  }
  lines(t, &first, &count);
  LastGroupTile<R - 1, Cp>(i1 - i, x, ldx, i, w, k, y, ldy, next, far, first, count,
                           every || (cold && t == 0));
}

// Rows of x per chunk kept in cache while the column groups go through them (as kPairChunk).
constexpr int64_t kGroupRowChunk = 2 * kPairChunk;

// kGroups4, m >= 2, over output columns [j0, j1) (multiples of 4): two groups per tile, then a
// last group alone.
void GroupColumns(const bf16* x, int64_t ldx, int64_t m, const bf16* w, int64_t k, int64_t j0,
                  int64_t j1, float* y, int64_t ldy) {
  const int64_t chunk = std::clamp<int64_t>(kPairChunkBytes / (k * 2), 8, kGroupRowChunk);
  for (int64_t i0 = 0; i0 < m; i0 += chunk) {
    const int64_t i1 = std::min(m, i0 + chunk);
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8) {
      const bf16* next = j + 16 <= j1 ? w + (j + 8) * k : nullptr;
      const bf16* far = j + 24 <= j1 ? w + (j + 16) * k : nullptr;
      GroupRows<kGroupTileRows, 4>(x, ldx, i0, i1, w + j * k, k, y + j, ldy, next, far, j == j0);
    }
    if (j < j1) {
      GroupRows<kGroupTileRows, 2>(x, ldx, i0, i1, w + j * k, k, y + j, ldy, nullptr, nullptr,
                                   true);
    }
  }
}

}  // namespace

template <bool kGrouped>
void MatmulEntry(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                 float* y, int64_t ldy, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  if (m == 1) {
    StreamEntry<kGrouped>(x, k, w, n, y, pool);
    return;
  }
  if constexpr (kGrouped) {
    const int64_t n_units = n / 4;  // groups
    auto body = [&](int64_t begin, int64_t end) {
      FlushDenormalsScope flush;
      if (m <= kBatchGroupRows) {
        StreamGroupColumnsFor(m, x, ldx, w, k, 4 * begin, 4 * end, y, ldy);
      } else {
        GroupColumns(x, ldx, m, w, k, 4 * begin, 4 * end, y, ldy);
      }
    };
    if (pool != nullptr) {
      pool->ParallelFor(n_units, m * n * k, body);
    } else {
      body(0, n_units);
    }
    return;
  }
  const int64_t nb = (k + 15) / 16;
  // 32 bf16 per (pair, block): (m + 1) / 2 * nb * 32 bf16 = that many / 2 floats.
  bf16* xp = reinterpret_cast<bf16*>(ScratchFloats((m + 1) / 2 * nb * 16, 0));
  PackPairs(x, ldx, m, k, nb, xp);
  const int64_t n_units = (n + kTileCols - 1) / kTileCols;
  auto body = [&](int64_t begin, int64_t end) {
    FlushDenormalsScope flush;
    const int64_t j0 = begin * kTileCols;
    const int64_t j1 = std::min(n, end * kTileCols);
    Columns<kTilePairs, kTileCols>(xp, nb, m, w, k, j0, j1, y, ldy);
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
  avx512bf16::MatmulEntry<false>(x, ldx, m, k, w, n, y, ldy, pool);
}

void MatmulBf16Avx512Bf16Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                                 int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  avx512bf16::MatmulEntry<true>(x, ldx, m, k, w, n, y, ldy, pool);
}

}  // namespace tandem::engine::internal

#pragma GCC diagnostic pop
#pragma GCC pop_options
