#include "engine/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/ops.h"

namespace tandem::engine {
namespace {

// Heads of one GQA group processed together (each key row is loaded once for all of them).
constexpr int kMaxHeadsPerPass = 4;

struct GroupTask {
  const KvCacheStorage* cache;
  int64_t layer;
  int64_t head_dim;
  int64_t kv_head;
  int64_t n_keys;         // pos + 1
  const int32_t* blocks;  // block table
  const float* q[kMaxHeadsPerPass];
  float* out[kMaxHeadsPerPass];
  int n_heads;  // heads in this pass, <= kMaxHeadsPerPass
  float scale;
  float* scores;  // [kMaxHeadsPerPass, n_keys] scratch
};

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
  const int64_t bs = t.cache->block_size();
  const int64_t hd = t.head_dim;
  for (int64_t j = 0; j < t.n_keys; ++j) {
    const bf16* k = t.cache->K(t.layer, t.blocks[j / bs], j % bs) + t.kv_head * hd;
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
    const bf16* v = t.cache->V(t.layer, t.blocks[j / bs], j % bs) + t.kv_head * hd;
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

// AVX2 path; head_dim must be a multiple of 8 (the caller falls back otherwise).
__attribute__((target("avx2,fma"))) void GroupAvx2(const GroupTask& t) {
  const int64_t bs = t.cache->block_size();
  const int64_t hd = t.head_dim;
  const int nh = t.n_heads;
  for (int64_t j = 0; j < t.n_keys; ++j) {
    const bf16* k = t.cache->K(t.layer, t.blocks[j / bs], j % bs) + t.kv_head * hd;
    __m256 acc[kMaxHeadsPerPass];
    for (int h = 0; h < nh; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
      const __m256 kv = LoadBf16x8(k + d);
      for (int h = 0; h < nh; ++h)
        acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(t.q[h] + d), kv, acc[h]);
    }
    for (int h = 0; h < nh; ++h) t.scores[h * t.n_keys + j] = HSum(acc[h]) * t.scale;
  }
  for (int h = 0; h < nh; ++h) Softmax(t.scores + h * t.n_keys, t.n_keys);
  // Output in chunks of 16 columns: 2 accumulators per head stay in registers over all keys.
  for (int64_t d = 0; d < hd; d += 16) {
    const bool two = d + 16 <= hd;
    __m256 o0[kMaxHeadsPerPass], o1[kMaxHeadsPerPass];
    for (int h = 0; h < nh; ++h) o0[h] = o1[h] = _mm256_setzero_ps();
    for (int64_t j = 0; j < t.n_keys; ++j) {
      const bf16* v = t.cache->V(t.layer, t.blocks[j / bs], j % bs) + t.kv_head * hd + d;
      const __m256 v0 = LoadBf16x8(v);
      const __m256 v1 = two ? LoadBf16x8(v + 8) : _mm256_setzero_ps();
      for (int h = 0; h < nh; ++h) {
        const __m256 p = _mm256_broadcast_ss(t.scores + h * t.n_keys + j);
        o0[h] = _mm256_fmadd_ps(p, v0, o0[h]);
        o1[h] = _mm256_fmadd_ps(p, v1, o1[h]);
      }
    }
    for (int h = 0; h < nh; ++h) {
      _mm256_storeu_ps(t.out[h] + d, o0[h]);
      if (two) _mm256_storeu_ps(t.out[h] + d + 8, o1[h]);
    }
  }
}

}  // namespace

void PagedAttention(const KvCacheStorage& cache, int64_t layer, int64_t n_heads,
                    const AttentionBatch& batch, ThreadPool* pool) {
  const int64_t n_kv = cache.num_kv_heads();
  const int64_t hd = cache.head_dim();
  const int64_t group = n_heads / n_kv;
  const int64_t passes = (group + kMaxHeadsPerPass - 1) / kMaxHeadsPerPass;
  const bool avx2 = DetectSimd() >= SimdLevel::kAvx2 && hd % 8 == 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_items = batch.n_tokens * n_kv * passes;
  auto run = [&](int64_t begin, int64_t end) {
    // Scratch grows to the longest context seen by this thread and is then reused.
    thread_local std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t tok = item / (n_kv * passes);
      const int64_t g = (item / passes) % n_kv;
      const int64_t pass = item % passes;
      GroupTask t;
      t.cache = &cache;
      t.layer = layer;
      t.head_dim = hd;
      t.kv_head = g;
      t.n_keys = batch.positions[tok] + 1;
      t.blocks = batch.block_tables[tok];
      t.scale = scale;
      const int64_t h0 = g * group + pass * kMaxHeadsPerPass;
      t.n_heads = static_cast<int>(std::min<int64_t>(kMaxHeadsPerPass, (g + 1) * group - h0));
      for (int h = 0; h < t.n_heads; ++h) {
        t.q[h] = batch.q + (tok * n_heads + h0 + h) * hd;
        t.out[h] = batch.out + (tok * n_heads + h0 + h) * hd;
      }
      const size_t need = static_cast<size_t>(kMaxHeadsPerPass * t.n_keys);
      if (scores.size() < need) scores.resize(need);
      t.scores = scores.data();
      if (avx2) {
        GroupAvx2(t);
      } else {
        GroupScalar(t);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_items, run);
  } else {
    run(0, n_items);
  }
}

}  // namespace tandem::engine
