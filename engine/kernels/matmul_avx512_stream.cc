// The kAvx512Bf16 weight streams: m = 1 in either layout (StreamEntry) and m = 2..kBatchGroupRows
// (8) in WeightLayout::kGroups4 (StreamGroupColumnsFor), called by MatmulEntry in
// matmul_avx512.cc, which holds the tiles of larger m. The arithmetic is the tiles'
// (vdpbf16ps, each output's 8 lanes in matmul.h's order), so every result bit is the same.
//
// At m = 1 a call is a stream of weights from DRAM, and a register carries two weight rows
// against x in both halves (StreamRows) where the tiles carry two rows of x: one vdpbf16ps per 64
// bytes read, where the kAvx512 kernel widens every weight to fp32 first; measured at
// Qwen2.5-0.5B shapes on 2 threads, 0.84-0.91 of a plain read of the same bytes against
// 0.77-0.84.
//
// In kGroups4 a group of four rows is one contiguous run, and at m = 1 two groups are read from
// two places at once (StreamGroups; see StreamsFor for the count and why there is no prefetch).
// Measured against kRows on 2 threads, alternated (k = 896, one group at a time): 1.2-1.7x faster.
// m = 2..8 run StreamGroups too, instead of the tiles: the m = 1 stream with every row of x against
// each block (kernels_bench, m = 8, 2 threads, alternated, share of a plain read of the same bytes,
// against the tiles: gate/up 0.69-0.77 against 0.58-0.59, down 0.59-0.62 against 0.51-0.52, lm_head
// 0.68-0.69 against 0.57-0.58; engine_bench batch 8: 271-282 against 245-249 tok/s. While the
// host's bandwidth sat near 40 GB/s the gap shrank to noise except lm_head, 7.9-8.0 against 8.3-9.2
// ms, and batch 8 at 235-237 against 215-234 tok/s).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/kernels/matmul_avx512_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma,f16c")
// GCC 12 reports the deliberately undefined upper lanes inside _mm512_broadcast_i64x4 once the
// streams are inlined; the broadcast writes every lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine::internal::avx512bf16 {
namespace {

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
// one, as a plain read shows (bench/probe: 70-77 against 63-67 GB/s, 2 threads).
//
// At m = 1 (R = 1) two streams and no software prefetch. The host's DRAM bandwidth swings
// between two states (2-thread plain read near 35 or near 62-68 GB/s); in the fast one each
// thread must stream ~32 GB/s, and there the former four streams with a prefetch 8 KiB ahead
// topped out near 25 GB/s a thread (one thread, k = 896: 24-27 GB/s against 34-36 with no
// prefetch; a plain loop of the same loads: 25.7 against 30.5 GB/s). engine_bench batch 1,
// alternated, share of the between-runs read, fast state: four streams with prefetch 0.65-0.74,
// four without 0.82-0.84, two without 0.85-0.90, one or three without 0.88-0.93; slow state all
// 0.88-0.98 (the earlier tuning, all with prefetch and in whichever state the host was: two
// streams 0.70-0.73, four 0.79-0.81, eight 33-36 against 49-57 tok/s).
//
// More rows keep the prefetch, kGroupStreamAhead bytes ahead in each stream (at m = 8, down_proj
// k = 4864: 23 against 19 GB/s without), and the R S 2 accumulators take the registers, so S
// falls to 2 and then 1 (StreamsFor). At m = 8 the prefetch 4 KiB ahead read at 0.59-0.64 of a
// plain read, 8 KiB 0.60-0.83, 16 KiB 0.51-0.82, 32 KiB 0.50-0.72 (kernels_bench shapes,
// alternated).
constexpr int kStreamGroups = 4;
constexpr int64_t kGroupStreamAhead = 8192;
constexpr int StreamsFor(int rows) {
  return rows == 1 ? 2 : rows <= 3 ? kStreamGroups : rows <= 6 ? 2 : 1;
}

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
      if constexpr (R > 1) {  // at R = 1 the loads alone stream faster (above)
        const char* ahead = reinterpret_cast<const char*>(w[s] + 64 * q) + kGroupStreamAhead;
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
      }
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

}  // namespace

// StreamGroupColumns for m rows, 1 <= m <= kBatchGroupRows.
template <int R>
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

template void StreamGroupColumnsFor<kBatchGroupRows>(int64_t m, const bf16* x, int64_t ldx,
                                                     const bf16* w, int64_t k, int64_t j0,
                                                     int64_t j1, float* y, int64_t ldy);

// m = 1 on the pool, in units of four output columns (a group in kGroups4). The last quarter of
// the units is shared out in chunks (ThreadPool::ParallelForStreaming): each output is still one
// thread's, computed the same way whichever thread runs it.
template <bool kGrouped>
void StreamEntry(const bf16* x, int64_t k, const bf16* w, int64_t n, float* y, ThreadPool* pool) {
  constexpr int64_t kUnit = 4;
  const int64_t units = (n + kUnit - 1) / kUnit;
  auto body = [&](ThreadPool::Claim& claim) {
    FlushDenormalsScope flush;
    int64_t begin, end;
    while (claim.Next(&begin, &end)) {
      const int64_t j0 = kUnit * begin;
      const int64_t j1 = std::min(n, kUnit * end);
      if constexpr (kGrouped) {
        StreamGroupColumns<1>(x, 0, w, k, j0, j1, y, 0);
      } else {
        StreamColumns(x, w, k, j0, j1, y);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelForStreaming(units, n * k, kUnit * k * 2, body);
  } else {
    ThreadPool::Claim all = ThreadPool::Claim::Whole(units);
    body(all);
  }
}

template void StreamEntry<false>(const bf16* x, int64_t k, const bf16* w, int64_t n, float* y,
                                 ThreadPool* pool);
template void StreamEntry<true>(const bf16* x, int64_t k, const bf16* w, int64_t n, float* y,
                                ThreadPool* pool);

}  // namespace tandem::engine::internal::avx512bf16

#pragma GCC diagnostic pop
#pragma GCC pop_options
