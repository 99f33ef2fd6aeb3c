#include "engine/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/ops.h"

// GCC 12 reports the deliberately undefined lanes inside AVX-512 intrinsics (their
// _mm512_undefined_* operands, e.g. in _mm512_reduce_max_ps) once the loops are inlined; every
// such lane is overwritten.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine {
namespace {

// Heads of one GQA group processed together (each key row is loaded once for all of them): up to
// 8 (a whole Qwen2.5 group of 7 in one pass, so each K/V row is read from memory once per token).
// The AVX2 output loop keeps two accumulators per head in its 16 registers, so it walks the keys
// for at most kNarrowHeadsPerPass heads at a time; the score loop takes the heads one by one.
constexpr int kMaxHeadsPerPass = 8;
constexpr int kNarrowHeadsPerPass = 4;

// Keys ahead of the score loop whose K rows are prefetched, and of the output loop whose V rows
// are. At decode the cache rows of a layer were evicted by the weight stream since the previous
// step, so each load would otherwise wait on DRAM. V rows used to be prefetched by the score
// loop, for the output pass; by then a long context's rows had left L1 and most of the output
// loop's time was spent waiting for them (measured, Qwen2.5-0.5B shape, 32 sequences of 270
// keys, 24 layers, 2 threads: 14.6 ms, now 10.1-11.7 ms).
constexpr int64_t kPrefetchKeys = 32;
constexpr int64_t kOutputPrefetchKeys = 16;

struct GroupTask {
  int64_t head_dim;
  int64_t n_keys;  // pos + 1
  // Key j's K row of this KV head (head_dim elements); its V row is v_offset elements further.
  // Resolved once per task from the block table, so the loops over keys do no block arithmetic
  // (a division and a remainder by the block size per row and pass cost about a third of the
  // decode attention time).
  const bf16* const* k_rows;
  int64_t v_offset;
  const float* q[kMaxHeadsPerPass];
  float* out[kMaxHeadsPerPass];
  int n_heads;  // heads in this pass, <= kMaxHeadsPerPass
  float scale;
  float* scores;  // [kMaxHeadsPerPass, n_keys] scratch
};

// Prefetches the K rows of keys [j0, j1) of the task's KV head into L1.
void PrefetchKeys(const GroupTask& t, int64_t j0, int64_t j1) {
  const int64_t row_bytes = t.head_dim * static_cast<int64_t>(sizeof(bf16));
  j1 = std::min(j1, t.n_keys);
  for (int64_t j = j0; j < j1; ++j) {
    const char* p = reinterpret_cast<const char*>(t.k_rows[j]);
    for (int64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
  }
}

// Softmax over each head's scores in place (max subtraction, 8-lane sum in a fixed order), then
// probabilities = e / sum.
void Softmax(float* s, int64_t n) {
  float m = s[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
  for (int64_t j = 0; j < n; ++j) s[j] -= m;
  ExpInPlace(s, n);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += s[j + l];
  }
  for (int l = 0; j < n; ++j, ++l) acc[l] += s[j];
  const float sum =
      ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (int64_t i = 0; i < n; ++i) s[i] /= sum;
}

// Portable path: the same lane structure as the AVX2 path, with fused multiply-adds.
void GroupScalar(const GroupTask& t) {
  const int64_t hd = t.head_dim;
  for (int64_t j = 0; j < t.n_keys; ++j) {
    const bf16* k = t.k_rows[j];
    for (int h = 0; h < t.n_heads; ++h) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t d = 0; d < hd; d += 8) {
        for (int l = 0; l < 8 && d + l < hd; ++l) {
          acc[l] = std::fma(t.q[h][d + l], Bf16ToF32(k[d + l]), acc[l]);
        }
      }
      const float dot =
          ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
      t.scores[h * t.n_keys + j] = dot * t.scale;
    }
  }
  for (int h = 0; h < t.n_heads; ++h) Softmax(t.scores + h * t.n_keys, t.n_keys);
  for (int h = 0; h < t.n_heads; ++h) std::fill(t.out[h], t.out[h] + hd, 0.0f);
  for (int64_t j = 0; j < t.n_keys; ++j) {
    const bf16* v = t.k_rows[j] + t.v_offset;
    for (int h = 0; h < t.n_heads; ++h) {
      const float p = t.scores[h * t.n_keys + j];
      for (int64_t d = 0; d < hd; ++d) t.out[h][d] = std::fma(p, Bf16ToF32(v[d]), t.out[h][d]);
    }
  }
}

__attribute__((target("avx2,fma"))) inline __m256 LoadBf16x8(const bf16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

// Lane sum in the order ((0+4)+(2+6))+((1+5)+(3+7)), as the scalar path.
__attribute__((target("avx2,fma"))) inline float HSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  const __m128 a = _mm_add_ps(lo, hi);                      // (0+4) (1+5) (2+6) (3+7)
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));      // (0+4)+(2+6), (1+5)+(3+7)
  const __m128 c = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));  // sum
  return _mm_cvtss_f32(c);
}

// HSum of eight vectors at once: lane u of the result is HSum(a[u]), bit for bit (the same
// pairs are added in the same order; only the shuffles that line them up differ).
__attribute__((target("avx2,fma"))) inline __m256 HSum8(const __m256 (&a)[8]) {
  __m256 u[4];  // per 128-bit half: (0+4) (1+5) (2+6) (3+7) of a[2i] | of a[2i + 1]
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
  }
  // ((0+4)+(2+6)), ((1+5)+(3+7)) of a[0], a[2] | a[1], a[3]; then of a[4], a[6] | a[5], a[7].
  const __m256 v0 = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 v1 = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Sums of a[0], a[2], a[4], a[6] | a[1], a[3], a[5], a[7].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Widest head_dim the 8-key score loop handles (its widened keys live on the stack).
constexpr int64_t kMaxKeyBlockHeadDim = 256;

// Scores of keys j.. one key at a time, then `softmax` of every head's scores. AVX2; head_dim
// must be a multiple of 8.
__attribute__((target("avx2,fma"))) void ScoresFromAvx2(const GroupTask& t, int64_t j,
                                                        void (*softmax)(float*, int64_t)) {
  const int64_t hd = t.head_dim;
  const int nh = t.n_heads;
  for (; j < t.n_keys; ++j) {
    const bf16* k = t.k_rows[j];
    __m256 acc[kMaxHeadsPerPass];
    for (int h = 0; h < nh; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
      const __m256 kv = LoadBf16x8(k + d);
      for (int h = 0; h < nh; ++h)
        acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(t.q[h] + d), kv, acc[h]);
    }
    for (int h = 0; h < nh; ++h) t.scores[h * t.n_keys + j] = HSum(acc[h]) * t.scale;
  }
  for (int h = 0; h < nh; ++h) softmax(t.scores + h * t.n_keys, t.n_keys);
}

// Softmax's sum of s[0, n): key j in lane j % 8 (the tail's missing lanes add +0 to sums of
// non-negative terms), the lanes reduced in HSum's order, as Softmax does.
__attribute__((target("avx2,fma"))) inline float LaneSum8(const float* s, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(s + j));
  if (j < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)), lane);
    acc = _mm256_add_ps(acc, _mm256_maskload_ps(s + j, tail));
  }
  return HSum(acc);
}

// Softmax with the same results as Softmax, 8 lanes wide (the portable loops stay scalar on AVX2):
// the maximum is exact in any order (scores hold no NaN; a zero maximum's sign changes no
// difference s - m), each element's subtraction, exp and division are the same operations, and
// the sum is LaneSum8.
__attribute__((target("avx2,fma"))) void SoftmaxAvx2(float* s, int64_t n) {
  __m256 mv = _mm256_set1_ps(s[0]);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = std::max(m, lanes[l]);
  for (; j < n; ++j) m = std::max(m, s[j]);
  const __m256 m8 = _mm256_set1_ps(m);
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(s + j, _mm256_sub_ps(_mm256_loadu_ps(s + j), m8));
  for (; j < n; ++j) s[j] -= m;
  ExpInPlace(s, n);
  const float sum = LaneSum8(s, n);
  const __m256 sum8 = _mm256_set1_ps(sum);
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(s + j, _mm256_div_ps(_mm256_loadu_ps(s + j), sum8));
  for (; j < n; ++j) s[j] /= sum;
}

// Scores and softmax, AVX2; head_dim must be a multiple of 8 (the caller falls back otherwise).
__attribute__((target("avx2,fma"))) void ScoresAvx2(const GroupTask& t) {
  const int64_t hd = t.head_dim;
  const int nh = t.n_heads;
  int64_t j = 0;
  if (hd <= kMaxKeyBlockHeadDim) {
    // Eight keys at a time: their rows are widened once into L1 and shared by the heads, each
    // head keeps eight independent FMA chains (one per key) and reduces them with one HSum8.
    // Every score is the same sum in the same order as the one-key loop below.
    alignas(32) float keys[8 * kMaxKeyBlockHeadDim];
    PrefetchKeys(t, 0, kPrefetchKeys);
    for (; j + 8 <= t.n_keys; j += 8) {
      PrefetchKeys(t, j + kPrefetchKeys, j + kPrefetchKeys + 8);
      for (int u = 0; u < 8; ++u) {
        const int64_t p = j + u;
        const bf16* k = t.k_rows[p];
        for (int64_t d = 0; d < hd; d += 8) _mm256_store_ps(keys + u * hd + d, LoadBf16x8(k + d));
      }
      for (int h = 0; h < nh; ++h) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
        for (int64_t d = 0; d < hd; d += 8) {
          const __m256 q = _mm256_loadu_ps(t.q[h] + d);
#pragma GCC unroll 8
          for (int u = 0; u < 8; ++u)
            acc[u] = _mm256_fmadd_ps(q, _mm256_load_ps(keys + u * hd + d), acc[u]);
        }
        _mm256_storeu_ps(t.scores + h * t.n_keys + j,
                         _mm256_mul_ps(HSum8(acc), _mm256_set1_ps(t.scale)));
      }
    }
  }
  ScoresFromAvx2(t, j, SoftmaxAvx2);
}

// One walk of OutputAvx2 over the keys: heads h0 .. h0 + NH - 1, columns d .. d + 15 (d .. d + 7
// when fewer are left). NH is a constant so that the 2 * NH accumulators stay in registers (with
// a run-time head count GCC kept them on the stack: a store and a reload on every FMA's chain,
// most of the AVX2 output loop's time in a prefill profile). `prefetch`: this is the first walk.
template <int NH>
__attribute__((target("avx2,fma"))) void OutputWalkAvx2(const GroupTask& t, int h0, int64_t d,
                                                        bool prefetch) {
  const int64_t row_bytes = t.head_dim * static_cast<int64_t>(sizeof(bf16));
  const float* scores = t.scores + h0 * t.n_keys;
  float* const* out = t.out + h0;
  const bool two = d + 16 <= t.head_dim;
  __m256 o0[NH], o1[NH];
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) o0[h] = o1[h] = _mm256_setzero_ps();
  for (int64_t j = 0; j < t.n_keys; ++j) {
    if (prefetch && j + kOutputPrefetchKeys < t.n_keys) {
      const char* ahead =
          reinterpret_cast<const char*>(t.k_rows[j + kOutputPrefetchKeys] + t.v_offset);
      for (int64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    const bf16* v = t.k_rows[j] + t.v_offset + d;
    const __m256 v0 = LoadBf16x8(v);
    const __m256 v1 = two ? LoadBf16x8(v + 8) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m256 p = _mm256_broadcast_ss(scores + h * t.n_keys + j);
      o0[h] = _mm256_fmadd_ps(p, v0, o0[h]);
      o1[h] = _mm256_fmadd_ps(p, v1, o1[h]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    _mm256_storeu_ps(out[h] + d, o0[h]);
    if (two) _mm256_storeu_ps(out[h] + d + 8, o1[h]);
  }
}

// out[h] = sum over keys in key order of p_hj * v_j, one fp32 FMA per element (the scalar path's
// order). In chunks of 16 columns for at most kNarrowHeadsPerPass heads: 2 accumulators per head
// stay in registers over all keys. The first walk over the keys prefetches whole V rows
// kOutputPrefetchKeys keys ahead, so the later walks (the other column chunks) find them in cache.
__attribute__((target("avx2,fma"))) void OutputAvx2(const GroupTask& t) {
  static_assert(kNarrowHeadsPerPass == 4, "OutputAvx2 has walks for 1 to 4 heads");
  for (int h0 = 0; h0 < t.n_heads; h0 += kNarrowHeadsPerPass) {
    const int nh = std::min(kNarrowHeadsPerPass, t.n_heads - h0);
    for (int64_t d = 0; d < t.head_dim; d += 16) {
      const bool prefetch = h0 == 0 && d == 0;
      switch (nh) {
        case 1:
          OutputWalkAvx2<1>(t, h0, d, prefetch);
          break;
        case 2:
          OutputWalkAvx2<2>(t, h0, d, prefetch);
          break;
        case 3:
          OutputWalkAvx2<3>(t, h0, d, prefetch);
          break;
        default:
          OutputWalkAvx2<4>(t, h0, d, prefetch);
          break;
      }
    }
  }
}

// SoftmaxAvx2 with 16 lanes for the maximum, the subtractions and the divisions (the same
// results, for the same reasons); the sum is LaneSum8.
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void SoftmaxAvx512(float* s, int64_t n) {
  __m512 mv = _mm512_set1_ps(s[0]);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + j));
  float m = _mm512_reduce_max_ps(mv);
  for (; j < n; ++j) m = std::max(m, s[j]);
  const __m512 m16 = _mm512_set1_ps(m);
  for (j = 0; j + 16 <= n; j += 16)
    _mm512_storeu_ps(s + j, _mm512_sub_ps(_mm512_loadu_ps(s + j), m16));
  for (; j < n; ++j) s[j] -= m;
  ExpInPlace(s, n);
  const __m512 sum16 = _mm512_set1_ps(LaneSum8(s, n));
  for (j = 0; j + 16 <= n; j += 16)
    _mm512_storeu_ps(s + j, _mm512_div_ps(_mm512_loadu_ps(s + j), sum16));
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(s + j, tail, _mm512_div_ps(_mm512_maskz_loadu_ps(tail, s + j), sum16));
  }
}

// The same scores as ScoresAvx2, two keys per 512-bit register: its low half carries key u's 8
// lanes and its high half key u + 1's, against the same 8 query elements in both halves, so each
// key's lanes see exactly the FMAs of the AVX2 loop and HSum8 reduces them in the same order.
// kHd: head_dim as a constant (64 or 128: the loops over it unroll), or 0 for any multiple of 8.
template <int64_t kHd>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) void ScoresAvx512(
    const GroupTask& t) {
  const int64_t hd = kHd > 0 ? kHd : t.head_dim;
  const int nh = t.n_heads;
  int64_t j = 0;
  if (hd <= kMaxKeyBlockHeadDim) {
    // Pair p (keys j + 2p, j + 2p + 1), elements d..d+7: 16 floats at keys + (p * hd + d) * 2.
    alignas(64) float keys[8 * kMaxKeyBlockHeadDim];
    PrefetchKeys(t, 0, kPrefetchKeys);
    for (; j + 8 <= t.n_keys; j += 8) {
      PrefetchKeys(t, j + kPrefetchKeys, j + kPrefetchKeys + 8);
      for (int p = 0; p < 4; ++p) {
        const int64_t p0 = j + 2 * p, p1 = p0 + 1;
        const bf16* k0 = t.k_rows[p0];
        const bf16* k1 = t.k_rows[p1];
#pragma GCC unroll 16
        for (int64_t d = 0; d < hd; d += 8) {
          const __m256i raw = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k0 + d))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(k1 + d)), 1);
          _mm512_store_ps(keys + (p * hd + d) * 2,
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16)));
        }
      }
      for (int h = 0; h < nh; ++h) {
        __m512 acc[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) acc[p] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int64_t d = 0; d < hd; d += 8) {
          const __m512 q = _mm512_broadcast_f32x8(_mm256_loadu_ps(t.q[h] + d));
#pragma GCC unroll 4
          for (int p = 0; p < 4; ++p)
            acc[p] = _mm512_fmadd_ps(q, _mm512_load_ps(keys + (p * hd + d) * 2), acc[p]);
        }
        const __m256 a[8] = {_mm512_castps512_ps256(acc[0]), _mm512_extractf32x8_ps(acc[0], 1),
                             _mm512_castps512_ps256(acc[1]), _mm512_extractf32x8_ps(acc[1], 1),
                             _mm512_castps512_ps256(acc[2]), _mm512_extractf32x8_ps(acc[2], 1),
                             _mm512_castps512_ps256(acc[3]), _mm512_extractf32x8_ps(acc[3], 1)};
        _mm256_storeu_ps(t.scores + h * t.n_keys + j,
                         _mm256_mul_ps(HSum8(a), _mm256_set1_ps(t.scale)));
      }
    }
  }
  ScoresFromAvx2(t, j, SoftmaxAvx512);
}

// The same as OutputAvx2 with 16 columns per register: up to H heads and 16 * C columns per walk
// over the keys (for head_dim 64 and 4 heads, one walk instead of four). H and C are constants so
// that the H * C accumulators stay in registers. Each output element gets the same FMA per key in
// the same key order, so the same bits.
template <int H, int C>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void OutputAvx512(
    const GroupTask& t) {
  constexpr int64_t kCols = 16 * C;
  const int64_t hd = t.head_dim;
  const int nh = t.n_heads;
  for (int64_t d = 0; d < hd; d += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, hd - d);
    const bool full = cols == kCols;
    __mmask16 mask[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const int64_t left = cols - 16 * c;
      mask[c] = left >= 16 ? 0xffff : left > 0 ? static_cast<__mmask16>((1u << left) - 1) : 0;
    }
    __m512 o[H][C];
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) o[h][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < t.n_keys; ++j) {
      if (j + kOutputPrefetchKeys < t.n_keys) {
        const char* ahead =
            reinterpret_cast<const char*>(t.k_rows[j + kOutputPrefetchKeys] + t.v_offset + d);
        for (int64_t off = 0; off < cols * 2; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      }
      const bf16* v = t.k_rows[j] + t.v_offset + d;
      __m512 vf[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        // A masked load costs far more than a plain one here (measured: most of the loop's
        // time), so only a partial vector uses one.
        const __m256i raw = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 16 * c))
                                 : _mm256_maskz_loadu_epi16(mask[c], v + 16 * c);
        vf[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
      }
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) {
        if (h >= nh) break;
        const __m512 p = _mm512_set1_ps(t.scores[h * t.n_keys + j]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) o[h][c] = _mm512_fmadd_ps(p, vf[c], o[h][c]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      if (h >= nh) break;
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(t.out[h] + d + 16 * c, mask[c], o[h][c]);
    }
  }
}

}  // namespace

void PagedAttention(const KvCacheStorage& cache, int64_t layer, int64_t n_heads,
                    const AttentionBatch& batch, ThreadPool* pool) {
  const int64_t n_kv = cache.num_kv_heads();
  const int64_t hd = cache.head_dim();
  const int64_t group = n_heads / n_kv;
  const bool avx2 = DetectSimd() >= SimdLevel::kAvx2 && hd % 8 == 0;
  const bool avx512 = DetectSimd() >= SimdLevel::kAvx512 && hd % 8 == 0;
  const int64_t passes = (group + kMaxHeadsPerPass - 1) / kMaxHeadsPerPass;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t bs = cache.block_size();
  const int64_t row_stride = n_kv * hd;  // elements between a block's slots
  const int64_t v_offset = cache.V(layer, 0, 0) - cache.K(layer, 0, 0);
  const int64_t n_items = batch.n_tokens * n_kv * passes;
  auto run = [&](int64_t begin, int64_t end) {
    // Scratch grows to the longest context seen by this thread and is then reused.
    thread_local std::vector<float> scores;
    thread_local std::vector<const bf16*> rows;
    const int64_t q_stride = batch.q_stride > 0 ? batch.q_stride : n_heads * hd;
    for (int64_t slot = begin; slot < end; ++slot) {
      // Slots alternate between the front and the back of the items: a prefill's later tokens
      // attend over more keys, so contiguous ranges of slots carry similar work (which thread
      // computes an item never changes its result).
      const int64_t item = slot % 2 == 0 ? slot / 2 : n_items - 1 - slot / 2;
      const int64_t tok = item / (n_kv * passes);
      const int64_t g = (item / passes) % n_kv;
      const int64_t pass = item % passes;
      GroupTask t;
      t.head_dim = hd;
      t.n_keys = batch.positions[tok] + 1;
      if (rows.size() < static_cast<size_t>(t.n_keys)) rows.resize(t.n_keys);
      const int32_t* blocks = batch.block_tables[tok];
      for (int64_t j = 0, b = 0; j < t.n_keys; ++b) {
        const bf16* row = cache.K(layer, blocks[b], 0) + g * hd;
        for (int64_t s = 0; s < bs && j < t.n_keys; ++s, ++j) rows[j] = row + s * row_stride;
      }
      t.k_rows = rows.data();
      t.v_offset = v_offset;
      t.scale = scale;
      const int64_t h0 = g * group + pass * kMaxHeadsPerPass;
      t.n_heads = static_cast<int>(std::min<int64_t>(kMaxHeadsPerPass, (g + 1) * group - h0));
      for (int h = 0; h < t.n_heads; ++h) {
        t.q[h] = batch.q + tok * q_stride + (h0 + h) * hd;
        t.out[h] = batch.out + (tok * n_heads + h0 + h) * hd;
      }
      const size_t need = static_cast<size_t>(kMaxHeadsPerPass * t.n_keys);
      if (scores.size() < need) scores.resize(need);
      t.scores = scores.data();
      if (avx512) {
        if (hd == 64) {
          ScoresAvx512<64>(t);
        } else if (hd == 128) {
          ScoresAvx512<128>(t);
        } else {
          ScoresAvx512<0>(t);
        }
        if (t.n_heads <= 4) {
          OutputAvx512<4, 4>(t);
        } else {
          OutputAvx512<8, 2>(t);
        }
      } else if (avx2) {
        ScoresAvx2(t);
        OutputAvx2(t);
      } else {
        GroupScalar(t);
      }
    }
  };
  if (pool != nullptr) {
    // Multiply-adds of the whole call (scores and weighted values), so that a short decode
    // context runs on the calling thread instead of paying a handoff.
    int64_t work = 0;
    for (int64_t t = 0; t < batch.n_tokens; ++t)
      work += 2 * (batch.positions[t] + 1) * n_heads * hd;
    pool->ParallelFor(n_items, work, run);
  } else {
    run(0, n_items);
  }
}

}  // namespace tandem::engine

#pragma GCC diagnostic pop
