#include "engine/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "engine/kernels/bf16.h"
#include "engine/kernels/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/ops.h"

namespace tandem::engine {
namespace {

constexpr int64_t kLayers = 2, kBlocks = 9, kBlockSize = 5, kKvHeads = 2;
constexpr int64_t kTokens = 43;  // keys 1..43: whole 8-key groups and every remainder
const int32_t kTable[kBlocks] = {3, 0, 6, 1, 8, 7, 2, 5, 4};

struct Fixture {
  std::unique_ptr<KvCacheStorage> cache;
  std::vector<float> q;  // [kTokens, heads * head_dim]
  int64_t hd = 0;
  int64_t heads = 0;  // query heads; kKvHeads of them share each KV head
};

Fixture Make(int64_t head_dim, int64_t heads) {
  Fixture f;
  f.hd = head_dim;
  f.heads = heads;
  auto cache = KvCacheStorage::Create(kLayers, kBlocks, kBlockSize, kKvHeads, head_dim);
  EXPECT_TRUE(cache.ok()) << cache.status();
  f.cache = std::move(*cache);
  std::mt19937 rng(7 + static_cast<uint32_t>(head_dim));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    for (int64_t b = 0; b < kBlocks; ++b) {
      for (int64_t s = 0; s < kBlockSize; ++s) {
        bf16* k = f.cache->K(layer, b, s);
        bf16* v = f.cache->V(layer, b, s);
        for (int64_t e = 0; e < kKvHeads * head_dim; ++e) {
          k[e] = F32ToBf16(dist(rng));
          v[e] = F32ToBf16(dist(rng));
        }
      }
    }
  }
  f.q.resize(kTokens * heads * head_dim);
  for (float& e : f.q) e = 2.0f * dist(rng);
  return f;
}

// Tokens [t0, t0 + n) of the sequence whose block table is kTable (token t at position t).
std::vector<float> RunAttention(const Fixture& f, int64_t t0, int64_t n, ThreadPool* pool) {
  const int64_t row = f.heads * f.hd;
  std::vector<int64_t> positions(n);
  std::vector<const int32_t*> tables(n, kTable);
  for (int64_t i = 0; i < n; ++i) positions[i] = t0 + i;
  std::vector<float> out(n * row, -7.0f);
  AttentionBatch batch;
  batch.n_tokens = n;
  batch.q = f.q.data() + t0 * row;
  batch.positions = positions.data();
  batch.block_tables = tables.data();
  batch.out = out.data();
  PagedAttention(*f.cache, /*layer=*/1, f.heads, batch, pool);
  return out;
}

// float64 softmax(q k / sqrt(d)) v over keys 0..t of head h (GQA: kv head h / group).
std::vector<double> Reference(const Fixture& f, int64_t t, int64_t h) {
  const int64_t hd = f.hd, g = h / (f.heads / kKvHeads);
  const float* q = f.q.data() + (t * f.heads + h) * hd;
  std::vector<double> s(t + 1);
  double mx = -1e300;
  for (int64_t j = 0; j <= t; ++j) {
    const bf16* k = f.cache->K(1, kTable[j / kBlockSize], j % kBlockSize) + g * hd;
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * Bf16ToF32(k[d]);
    s[j] = dot / std::sqrt(static_cast<double>(hd));
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  std::vector<double> o(hd, 0.0);
  for (int64_t j = 0; j <= t; ++j) {
    const bf16* v = f.cache->V(1, kTable[j / kBlockSize], j % kBlockSize) + g * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += s[j] / sum * Bf16ToF32(v[d]);
  }
  return o;
}

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// head_dim 64 and 128: the 8-key score loop; 24: 16-column output chunks with a remainder; 12:
// not a multiple of 8 (portable path). Query heads 14 (GQA groups of 7: one pass per group on
// AVX-512, 4 + 3 elsewhere), 8 (groups of 4) and 2 (no sharing).
class AttentionTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {
 protected:
  static Fixture MakeParam() { return Make(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  const Fixture f = MakeParam();
  const std::vector<float> out = RunAttention(f, 0, kTokens, nullptr);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < f.heads; ++h) {
      const std::vector<double> ref = Reference(f, t, h);
      for (int64_t d = 0; d < f.hd; ++d) {
        ASSERT_NEAR(out[(t * f.heads + h) * f.hd + d], ref[d], 2e-5)
            << "head_dim=" << f.hd << " token=" << t << " head=" << h << " d=" << d;
      }
    }
  }
}

// A token's output is the same bits alone, inside a prefill-like batch and on 1, 2 or 3 threads.
TEST_P(AttentionTest, TokenResultIndependentOfBatchAndThreads) {
  const Fixture f = MakeParam();
  const int64_t row = f.heads * f.hd;
  const std::vector<float> all = RunAttention(f, 0, kTokens, nullptr);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    pool.set_min_parallel_work(0);  // split even these small calls across the threads
    for (int64_t t0 : {int64_t{0}, int64_t{8}, int64_t{37}}) {
      for (int64_t n : {int64_t{1}, int64_t{3}, kTokens - t0}) {
        if (t0 + n > kTokens) continue;
        const std::vector<float> part = RunAttention(f, t0, n, &pool);
        for (int64_t e = 0; e < n * row; ++e) {
          ASSERT_EQ(Bits(part[e]), Bits(all[t0 * row + e]))
              << "head_dim=" << f.hd << " threads=" << threads << " t0=" << t0 << " n=" << n
              << " e=" << e;
        }
      }
    }
  }
}

// The documented order (attention.h), written out in plain fp32: every path this CPU runs (the
// portable one, AVX2, or AVX2 scores with AVX-512 outputs) must give exactly these bits.
std::vector<float> DocumentedOrder(const Fixture& f, int64_t t, int64_t h) {
  const int64_t hd = f.hd, g = h / (f.heads / kKvHeads);
  const float* q = f.q.data() + (t * f.heads + h) * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n = t + 1;
  std::vector<float> s(n);
  for (int64_t j = 0; j < n; ++j) {
    const bf16* k = f.cache->K(1, kTable[j / kBlockSize], j % kBlockSize) + g * hd;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t d = 0; d < hd; d += 8) {
      for (int l = 0; l < 8 && d + l < hd; ++l) {
        acc[l] = std::fma(q[d + l], Bf16ToF32(k[d + l]), acc[l]);
      }
    }
    s[j] =
        (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) * scale;
  }
  float m = s[0];
  for (float e : s) m = std::max(m, e);
  for (float& e : s) e = ExpF(e - m);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < n; ++j) acc[j % 8] += s[j];
  const float sum =
      ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (float& e : s) e /= sum;
  std::vector<float> o(hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const bf16* v = f.cache->V(1, kTable[j / kBlockSize], j % kBlockSize) + g * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = std::fma(s[j], Bf16ToF32(v[d]), o[d]);
  }
  return o;
}

TEST_P(AttentionTest, EveryPathGivesTheDocumentedOrderBitForBit) {
  const Fixture f = MakeParam();
  const std::vector<float> out = RunAttention(f, 0, kTokens, nullptr);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < f.heads; ++h) {
      const std::vector<float> want = DocumentedOrder(f, t, h);
      for (int64_t d = 0; d < f.hd; ++d) {
        ASSERT_EQ(Bits(out[(t * f.heads + h) * f.hd + d]), Bits(want[d]))
            << "head_dim=" << f.hd << " token=" << t << " head=" << h << " d=" << d;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndHeads, AttentionTest,
                         ::testing::Combine(::testing::Values(64, 128, 24, 12),
                                            ::testing::Values(14, 8, 2)));

}  // namespace
}  // namespace tandem::engine
