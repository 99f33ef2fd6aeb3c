// AVX-512 matmul paths.
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
// instruction does twice the work. On CPUs with full-width AVX-512 (Zen 5 here) that doubles the
// multiply-add rate of the 256-bit form (measured: 412 vs 206 GFLOP/s on one core). At m = 1 a
// call is a stream of weights from DRAM, and a register instead carries two
// weight rows against x in both halves (StreamRows): one vdpbf16ps per 64 bytes read, where the
// kAvx512 kernel widens every weight to fp32 first; measured at Qwen2.5-0.5B shapes on 2 threads,
// 0.84-0.91 of a plain read of the same bytes against 0.77-0.84. Every m >= 2 runs the row-pair
// tiles: a group of C weight rows is read from DRAM once and from L1 by each tile of row pairs.
// At decode sizes (no more tiles than rows in a group) the tiles of one group prefetch the next
// group's rows between them, so those DRAM reads overlap the group's multiply-adds; at prefill
// sizes each tile reads its own rows ahead (the shared prefetch cost prefill 3-8%) (measured, 2
// threads, n = 4864, k = 896: m = 8 from 345 to 135-226 us, m = 32 from 665-706 to 473-496 us; the
// kAvx512 kernels took m < 16 before). All give the same bits.
//
// Weights in WeightLayout::kGroups4 (matmul.h) take the same arithmetic. At m = 1 a group of four
// rows is one contiguous run, and four groups are read from four places at once (StreamGroups;
// batch-1 decode 46-48 tok/s with one group at a time, 52-63 with four, alternated). For m >= 2
// they run tiles of 6 rows of x against 4 pairs of weight rows (GroupTile): a pair's block is one
// 64-byte load and x's block is broadcast, the register layout of the m = 1 stream. Measured
// against kRows on 2 threads, alternated (k = 896, one group at a time at m = 1): m = 1 1.2-1.7x
// faster, m = 8 and 32 within 0.9-1.2x, m = 1024 equal. Since, m = 2..8 on kGroups4 runs
// StreamGroups instead of the tiles: the m = 1 stream with every row of x against each block
// (kernels_bench, m = 8, 2 threads, alternated, share of a plain read of the same bytes: gate/up
// 0.69-0.77 against 0.58-0.59, down 0.59-0.62 against 0.51-0.52, lm_head 0.68-0.69 against
// 0.57-0.58; engine_bench batch 8: 271-282 against 245-249 tok/s. While the host's bandwidth
// sat near 40 GB/s the gap shrank to noise except lm_head, 7.9-8.0 against 8.3-9.2 ms, and batch
// 8 at 235-237 against 215-234 tok/s).
#include <immintrin.h>

#include <algorithm>
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

// m = 1, kRows: y[0 .. 2G) for the 2G weight rows at w (k apart), as G pairs. A 512-bit
// register carries a pair's block q, row 2g's in its low half and row 2g + 1's in its high half,
// against x's block q in both halves, so each row's 8 lanes see the order of matmul.h; one
// vdpbf16ps per 64 bytes of weights instead of widening them to fp32. Each pair's sum is one
// chain of dependent vdpbf16ps, so a pair alone runs at one block per vdpbf16ps latency: G = 2
// interleaved chains (kStreamPairs) read L2-resident weights at 84 against 46 GB/s on one thread
// at k = 896, and 68 against 33 at k = 4864 (G = 3 and 4 measured below G = 2), which leaves DRAM
// as the limit at decode. kLone (G = 1): a single row, read into both halves; only the low half's
// sum is kept.
// Prefetch, kStreamAhead bytes ahead: rows short enough are followed linearly (the rows after
// them are next in memory); longer ones row by row, wrapping into the next rows (a linear
// prefetch would run ahead inside the rows, in the wrong order).
constexpr int64_t kStreamAhead = 16384;
constexpr int kStreamPairs = 2;

template <int G, bool kLone = false>
void StreamRows(const bf16* x, const bf16* w, int64_t k, float* y) {
  static_assert(G >= 1 && (!kLone || G == 1));
  const int64_t second = kLone ? 0 : k;  // offset of a high half's row from its low half's
  const int64_t full = k / 16;
  const int tail = static_cast<int>(k % 16);
  __m512 acc[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  const bool linear = 2 * G * k * 2 <= kStreamAhead;
  const char* ahead = reinterpret_cast<const char*>(w) + kStreamAhead;
  // Per-row prefetch position: block `pq` of the rows starting at `pw`.
  const int64_t distance = kStreamAhead / (64 * G);  // blocks: the rows read 64 G bytes a block
  const bf16* pw = w + (full > 0 ? distance / full : 0) * 2 * G * k;
  int64_t pq = full > 0 ? distance % full : 0;
  for (int64_t q = 0; q < full; ++q) {
    const __m512i xv =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16 * q)));
    if (linear) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) _mm_prefetch(ahead + (q * G + g) * 64, _MM_HINT_T0);
    } else {
      if ((pq & 1) == 0) {  // a 64-byte line holds two blocks
#pragma GCC unroll 16
        for (int r = 0; r < 2 * G; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(pw + r * k + 16 * pq), _MM_HINT_T0);
        }
      }
      if (++pq == full) {
        pq = 0;
        pw += 2 * G * k;
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const bf16* r0 = w + 2 * g * k + 16 * q;
      const __m512i v = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + second)), 1);
      acc[g] = _mm512_dpbf16_ps(acc[g], AsBh(xv), AsBh(v));
    }
  }
  if (tail) {
    const __mmask16 mask = static_cast<__mmask16>((1u << tail) - 1);
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_maskz_loadu_epi16(mask, x + 16 * full));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const bf16* r0 = w + 2 * g * k + 16 * full;
      const __m512i v =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, r0)),
                             _mm256_maskz_loadu_epi16(mask, r0 + second), 1);
      acc[g] = _mm512_dpbf16_ps(acc[g], AsBh(xv), AsBh(v));
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    y[2 * g] = ReduceLanes(_mm512_castps512_ps256(acc[g]));
    if (!kLone) y[2 * g + 1] = ReduceLanes(_mm512_extractf32x8_ps(acc[g], 1));
  }
}

// m = 1, kRows, over output columns [j0, j1): groups of kStreamPairs pairs of rows, then a pair,
// then a last row alone.
void StreamColumns(const bf16* x, const bf16* w, int64_t k, int64_t j0, int64_t j1, float* y) {
  constexpr int64_t kGroup = 2 * kStreamPairs;
  int64_t j = j0;
  for (; j + kGroup <= j1; j += kGroup) StreamRows<kStreamPairs>(x, w + j * k, k, y + j);
  for (; j + 2 <= j1; j += 2) StreamRows<1>(x, w + j * k, k, y + j);
  if (j < j1) StreamRows<1, true>(x, w + j * k, k, y + j);
}

// kGroups4, m = 1 .. kBatchGroupRows: y for R rows of x (ldx, ldy apart) and S groups of four
// weight rows (w[s], y[s]), each one contiguous run read in memory order, straight from DRAM into
// registers. A pair's block q (rows 2h and 2h + 1 of a group) is one 64-byte load against each
// row's block q in both halves: the registers and order of StreamRows (and GroupTile), so the
// same bits. StreamGroupColumns reads S groups from as many separate places at once (equal parts
// of a thread's columns): several DRAM streams per thread keep more line fills in flight than
// one, as a plain read shows (bench/probe: 70-77 against 63-67 GB/s, 2 threads). Software
// prefetch kGroupStreamAhead bytes ahead in each. Measured at batch 1 on Qwen2.5-0.5B shapes, 2
// threads, alternated in one session, as a share of the bound (a plain read of the weights, the
// better of one run and four side by side): two streams 0.70-0.73, three 0.76-0.82, four
// 0.79-0.81, eight 33-36 against 49-57 tok/s; with four, the prefetch 4 KiB ahead 0.80-0.83,
// 8 KiB 0.81-0.84, 12 KiB 0.78-0.79, 16 KiB 0.79-0.81, 32 KiB 0.80, none 0.76-0.86. With more
// rows the R S 2 accumulators take the registers, so S falls to 2 and then 1 (StreamsFor). At
// m = 8 the prefetch 4 KiB ahead read at 0.59-0.64 of a plain read, 8 KiB 0.60-0.83, 16 KiB
// 0.51-0.82, 32 KiB 0.50-0.72 (kernels_bench shapes, alternated).
constexpr int kStreamGroups = 4;
constexpr int64_t kGroupStreamAhead = 8192;
constexpr int kBatchGroupRows = 8;
constexpr int StreamsFor(int rows) { return rows <= 3 ? kStreamGroups : rows <= 6 ? 2 : 1; }

template <int R, int S>
void StreamGroups(const bf16* x, int64_t ldx, const bf16* const* w, int64_t k, float* const* y,
                  int64_t ldy) {
  const int64_t blocks = k / 16;  // k % 16 == 0 in this layout
  __m512 acc[R][S][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) acc[r][s][0] = acc[r][s][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < blocks; ++q) {
    // One row: each block is multiplied as it is loaded (measured faster at batch 1 than loading
    // all S blocks first); more rows: all S blocks are loaded, then every row takes them (the
    // other way round measured slower at batch 8).
    constexpr int kFirst = R == 1 ? 1 : 0;
    const __m512i x0 =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16 * q)));
    __m512i v[S][2];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const char* ahead = reinterpret_cast<const char*>(w[s] + 64 * q) + kGroupStreamAhead;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        v[s][h] = _mm512_loadu_si512(w[s] + 64 * q + 32 * h);
        if constexpr (R == 1)
          acc[0][s][h] = _mm512_dpbf16_ps(acc[0][s][h], AsBh(x0), AsBh(v[s][h]));
      }
    }
#pragma GCC unroll 8
    for (int r = kFirst; r < R; ++r) {
      const __m512i xv = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * ldx + 16 * q)));
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        acc[r][s][0] = _mm512_dpbf16_ps(acc[r][s][0], AsBh(xv), AsBh(v[s][0]));
        acc[r][s][1] = _mm512_dpbf16_ps(acc[r][s][1], AsBh(xv), AsBh(v[s][1]));
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      float* yr = y[s] + r * ldy;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        yr[2 * h] = ReduceLanes(_mm512_castps512_ps256(acc[r][s][h]));
        yr[2 * h + 1] = ReduceLanes(_mm512_extractf32x8_ps(acc[r][s][h], 1));
      }
    }
  }
}

// StreamGroups over output columns [j0, j1) (multiples of 4): group g of each of S equal parts
// together, then the groups left over one by one.
template <int R>
void StreamGroupColumns(const bf16* x, int64_t ldx, const bf16* w, int64_t k, int64_t j0,
                        int64_t j1, float* y, int64_t ldy) {
  constexpr int S = StreamsFor(R);
  const int64_t groups = (j1 - j0) / 4;
  const int64_t part = groups / S;
  for (int64_t g = 0; g < part; ++g) {
    const bf16* ws[S];
    float* ys[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const int64_t a = j0 + 4 * (g + s * part);
      ws[s] = w + a * k;
      ys[s] = y + a;
    }
    StreamGroups<R, S>(x, ldx, ws, k, ys, ldy);
  }
  for (int64_t g = S * part; g < groups; ++g) {
    const int64_t last = j0 + 4 * g;
    const bf16* const ws[1] = {w + last * k};
    float* const ys[1] = {y + last};
    StreamGroups<R, 1>(x, ldx, ws, k, ys, ldy);
  }
}

// StreamGroupColumns for m rows, 1 <= m <= kBatchGroupRows.
template <int R = kBatchGroupRows>
void StreamGroupColumnsFor(int64_t m, const bf16* x, int64_t ldx, const bf16* w, int64_t k,
                           int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if constexpr (R >= 1) {
    if (m == R) {
      StreamGroupColumns<R>(x, ldx, w, k, j0, j1, y, ldy);
    } else {
      StreamGroupColumnsFor<R - 1>(m, x, ldx, w, k, j0, j1, y, ldy);
    }
  }
}

// m = 1 on the pool, in units of four output columns (a group in kGroups4).
template <bool kGrouped>
void StreamEntry(const bf16* x, int64_t k, const bf16* w, int64_t n, float* y, ThreadPool* pool) {
  constexpr int64_t kUnit = 4;
  const int64_t units = (n + kUnit - 1) / kUnit;
  auto body = [&](int64_t begin, int64_t end) {
    FlushDenormalsScope flush;
    const int64_t j0 = kUnit * begin;
    const int64_t j1 = std::min(n, kUnit * end);
    if constexpr (kGrouped) {
      StreamGroupColumns<1>(x, 0, w, k, j0, j1, y, 0);
    } else {
      StreamColumns(x, w, k, j0, j1, y);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(units, n * k, body);
  } else {
    body(0, units);
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
// output's 8 lanes see matmul.h's order, as in StreamRows. x is read in place (k % 16 == 0: no
// tail). Meanwhile the tile prefetches `pf_lines` of the next column group's 2 Cp lines per block
// starting at line `pf_first` (line l: group l / 2, half l % 2 of its block), and with
// `row_ahead` its own pairs 32 blocks ahead.
template <int R, int Cp>
void GroupTile(const bf16* x, int64_t ldx, int64_t i0, const bf16* w, int64_t k, float* y,
               int64_t ldy, const bf16* pf, int pf_first, int pf_lines, bool row_ahead) {
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
      _mm_prefetch(reinterpret_cast<const char*>(pf + (l >> 1) * 4 * k + 64 * q + 32 * (l & 1)),
                   _MM_HINT_T0);
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
#pragma GCC unroll 16
    for (int c = 0; c < Cp; ++c) {
      yr[2 * c] = ReduceLanes(_mm512_castps512_ps256(acc[r][c]));
      yr[2 * c + 1] = ReduceLanes(_mm512_extractf32x8_ps(acc[r][c], 1));
    }
  }
}

// The last GroupTile of GroupRows, of `left` < Q + 1 rows.
template <int Q, int Cp>
void LastGroupTile(int64_t left, const bf16* x, int64_t ldx, int64_t i0, const bf16* w, int64_t k,
                   float* y, int64_t ldy, const bf16* pf, int pf_first, int pf_lines,
                   bool row_ahead) {
  if constexpr (Q >= 1) {
    if (left == Q) {
      GroupTile<Q, Cp>(x, ldx, i0, w, k, y, ldy, pf, pf_first, pf_lines, row_ahead);
    } else {
      LastGroupTile<Q - 1, Cp>(left, x, ldx, i0, w, k, y, ldy, pf, pf_first, pf_lines, row_ahead);
    }
  }
}

// The tiles of R rows over rows [i0, i1) of x and the 2 Cp weight rows at w, as Pairs: with at
// most kSharedPrefetchTiles tiles (decode batches up to 48) they prefetch the next column group
// (`next`, null for none) between them, its lines shared out (some tiles may get none); with more
// (prefill) each reads its own rows ahead. `cold`: nobody prefetched these rows.
constexpr int64_t kSharedPrefetchTiles = 8;
template <int R, int Cp>
void GroupRows(const bf16* x, int64_t ldx, int64_t i0, int64_t i1, const bf16* w, int64_t k,
               float* y, int64_t ldy, const bf16* next, bool cold) {
  constexpr int kLines = Cp;  // two lines per group and block, two pairs per group
  const int64_t tiles = (i1 - i0 + R - 1) / R;
  const bool every = tiles > kSharedPrefetchTiles;
  if (every) next = nullptr;
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
    GroupTile<R, Cp>(x, ldx, i, w, k, y, ldy, next, first, count, every || (cold && t == 0));
  }
  lines(t, &first, &count);
  LastGroupTile<R - 1, Cp>(i1 - i, x, ldx, i, w, k, y, ldy, next, first, count,
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
      GroupRows<kGroupTileRows, 4>(x, ldx, i0, i1, w + j * k, k, y + j, ldy, next, j == j0);
    }
    if (j < j1)
      GroupRows<kGroupTileRows, 2>(x, ldx, i0, i1, w + j * k, k, y + j, ldy, nullptr, true);
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
