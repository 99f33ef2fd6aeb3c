#include "engine/kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/bf16.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/thread_pool.h"

namespace tandem::engine {
namespace {

std::vector<SimdLevel> AvailableLevels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16}) {
    if (SimdLevelSupported(level)) levels.push_back(level);
  }
  return levels;
}

std::vector<bf16> RandomBf16(int64_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<bf16> v(count);
  for (auto& e : v) e = F32ToBf16(dist(rng));
  return v;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Exact-ish reference: double accumulation of exact products, and the bound on the fp32 error of
// any summation order: |error| <= gamma_k * sum |x w| with gamma_k = k u / (1 - k u), u = 2^-24.
void Reference(const std::vector<bf16>& x, int64_t ldx, int64_t m, int64_t k,
               const std::vector<bf16>& w, int64_t n, std::vector<double>* y,
               std::vector<double>* abs_sum) {
  y->assign(m * n, 0.0);
  abs_sum->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod =
            static_cast<double>(Bf16ToF32(x[i * ldx + p])) * Bf16ToF32(w[j * k + p]);
        s += prod;
        a += std::fabs(prod);
      }
      (*y)[i * n + j] = s;
      (*abs_sum)[i * n + j] = a;
    }
  }
}

struct Shape {
  int64_t m, k, n;
};

class MatmulLevelTest : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(MatmulLevelTest, MatchesDoubleReferenceWithinFp32Bound) {
  const SimdLevel level = GetParam();
  for (const Shape& s : {Shape{1, 16, 4}, Shape{1, 1, 1}, Shape{3, 37, 5}, Shape{7, 131, 9},
                         Shape{13, 64, 17}, Shape{33, 896, 19}, Shape{5, 15, 3}}) {
    const int64_t ldx = s.k + 3, ldy = s.n + 2;
    const auto x = RandomBf16(s.m * ldx, 1 + s.k);
    const auto w = RandomBf16(s.n * s.k, 2 + s.n);
    std::vector<float> y(s.m * ldy, -12345.0f);
    MatmulBf16ForLevel(level, x.data(), ldx, s.m, s.k, w.data(), s.n, y.data(), ldy, nullptr);
    std::vector<double> ref, abs_sum;
    Reference(x, ldx, s.m, s.k, w, s.n, &ref, &abs_sum);
    const double u = std::ldexp(1.0, -24);
    const double gamma = (s.k + 2) * u / (1 - (s.k + 2) * u);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const double bound = gamma * abs_sum[i * s.n + j] + 1e-30;
        EXPECT_NEAR(y[i * ldy + j], ref[i * s.n + j], bound)
            << SimdLevelName(level) << " m=" << s.m << " k=" << s.k << " n=" << s.n << " i=" << i
            << " j=" << j;
      }
      // The padding columns of y between rows are untouched.
      for (int64_t j = s.n; j < ldy && i + 1 < s.m; ++j) EXPECT_EQ(y[i * ldy + j], -12345.0f);
    }
  }
}

// A row's result must not depend on the batch it is in, on tile remainders or on threads.
TEST_P(MatmulLevelTest, RowResultIndependentOfBatchAndThreads) {
  const SimdLevel level = GetParam();
  for (const Shape& s : {Shape{129, 203, 23}, Shape{129, 896, 66}}) {
    const auto x = RandomBf16(s.m * s.k, 11);
    const auto w = RandomBf16(s.n * s.k, 12);
    // Row i alone (m = 1, single thread) is the baseline.
    std::vector<float> alone(s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      MatmulBf16ForLevel(level, x.data() + i * s.k, s.k, 1, s.k, w.data(), s.n,
                         alone.data() + i * s.n, s.n, nullptr);
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      pool.set_min_parallel_work(0);  // small shapes must still be split across the threads
      for (int64_t m : {int64_t{7}, int64_t{32}, int64_t{129}, int64_t{2}, int64_t{12}}) {
        for (int64_t start : {int64_t{0}, s.m - m}) {
          std::vector<float> y(m * s.n);
          MatmulBf16ForLevel(level, x.data() + start * s.k, s.k, m, s.k, w.data(), s.n, y.data(),
                             s.n, &pool);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              ASSERT_EQ(Bits(y[i * s.n + j]), Bits(alone[(start + i) * s.n + j]))
                  << SimdLevelName(level) << " threads=" << threads << " m=" << m
                  << " row=" << start + i << " col=" << j << " k=" << s.k;
            }
          }
        }
      }
    }
  }
}

// Batched decode through a wide-k matrix (down_proj's shape class) takes the blocked path, which
// parks partial lane sums between passes over k: a row's bits must still equal the row alone, for
// every batch size around the register-tile and path boundaries, with column groups split
// unevenly across 1, 2 and 3 threads, and match float64 within the fp32 error bound.
TEST_P(MatmulLevelTest, WideKBatchesMatchRowsAloneAndReference) {
  const SimdLevel level = GetParam();
  if (level == SimdLevel::kScalar) GTEST_SKIP() << "the scalar path has one loop for every shape";
  const Shape s{50, 4100, 139};  // k: 256 full blocks and a 4-element tail
  const auto x = RandomBf16(s.m * s.k, 41);
  const auto w = RandomBf16(s.n * s.k, 42, 0.05f);
  std::vector<float> alone(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i) {
    MatmulBf16ForLevel(level, x.data() + i * s.k, s.k, 1, s.k, w.data(), s.n,
                       alone.data() + i * s.n, s.n, nullptr);
  }
  std::vector<double> ref, abs_sum;
  Reference(x, s.k, s.m, s.k, w, s.n, &ref, &abs_sum);
  const double u = std::ldexp(1.0, -24);
  const double gamma = (s.k + 2) * u / (1 - (s.k + 2) * u);
  for (int64_t e = 0; e < s.m * s.n; ++e) {
    ASSERT_NEAR(alone[e], ref[e], gamma * abs_sum[e] + 1e-30) << SimdLevelName(level) << " e=" << e;
  }
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    pool.set_min_parallel_work(0);
    for (int64_t m : {2, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 50}) {
      const int64_t start = s.m - m;
      std::vector<float> y(m * s.n);
      MatmulBf16ForLevel(level, x.data() + start * s.k, s.k, m, s.k, w.data(), s.n, y.data(), s.n,
                         &pool);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          ASSERT_EQ(Bits(y[i * s.n + j]), Bits(alone[(start + i) * s.n + j]))
              << SimdLevelName(level) << " threads=" << threads << " m=" << m
              << " row=" << start + i << " col=" << j;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, MatmulLevelTest, ::testing::ValuesIn(AvailableLevels()),
                         [](const auto& info) { return std::string(SimdLevelName(info.param)); });

// Every path computes the same bits (the order of matmul.h), including near-cancellation.
TEST(MatmulTest, BitIdenticalAcrossSimdLevels) {
  const auto levels = AvailableLevels();
  // m = 1: whole blocks and an odd n (runs of pairs read side by side, leftover pairs, then a row
  // alone), a 5-element tail, k = 1, a k whose pairs outrun a linear prefetch of one run, and a k
  // too long for the stream.
  for (const Shape& s :
       {Shape{1, 896, 37}, Shape{1, 37, 9}, Shape{1, 1, 3}, Shape{1, 2000, 37}, Shape{1, 4864, 5},
        Shape{5, 77, 13}, Shape{40, 300, 21}, Shape{16, 4864, 8}, Shape{3, 1, 2}}) {
    const auto x = RandomBf16(s.m * s.k, 21, 3.0f);
    const auto w = RandomBf16(s.n * s.k, 22, 0.02f);
    std::vector<float> base(s.m * s.n);
    MatmulBf16ForLevel(SimdLevel::kScalar, x.data(), s.k, s.m, s.k, w.data(), s.n, base.data(), s.n,
                       nullptr);
    for (SimdLevel level : levels) {
      std::vector<float> y(s.m * s.n);
      ThreadPool pool(2);
      pool.set_min_parallel_work(0);
      MatmulBf16ForLevel(level, x.data(), s.k, s.m, s.k, w.data(), s.n, y.data(), s.n, &pool);
      for (int64_t e = 0; e < s.m * s.n; ++e) {
        ASSERT_EQ(Bits(y[e]), Bits(base[e]))
            << SimdLevelName(level) << " m=" << s.m << " k=" << s.k << " n=" << s.n << " e=" << e;
      }
    }
  }
}

// Denormal inputs count as zero and denormal results flush to zero on every path (vdpbf16ps).
TEST(MatmulTest, DenormalsAreFlushedOnEveryPath) {
  const int64_t k = 40, n = 3;
  std::vector<bf16> x(k, F32ToBf16(1.0f));
  std::vector<bf16> w(n * k, 0);
  w[0 * k + 5] = 0x0001;             // smallest bf16 denormal: treated as 0
  w[1 * k + 7] = F32ToBf16(1e-30f);  // normal, product normal
  w[1 * k + 8] = F32ToBf16(-1e-30f);
  w[2 * k + 3] = F32ToBf16(std::ldexp(1.0f, -100));
  x[3] = F32ToBf16(std::ldexp(1.0f, -30));  // product 2^-130: a denormal result, flushed
  for (SimdLevel level : AvailableLevels()) {
    std::vector<float> y(n, 7.0f);
    MatmulBf16ForLevel(level, x.data(), k, 1, k, w.data(), n, y.data(), n, nullptr);
    EXPECT_EQ(Bits(y[0]), 0u) << SimdLevelName(level);
    EXPECT_EQ(Bits(y[1]), 0u) << SimdLevelName(level);
    EXPECT_EQ(std::fabs(y[2]), 0.0f) << SimdLevelName(level);
  }
}

TEST(MatmulTest, InfAndNanPropagate) {
  const int64_t k = 33, n = 2;
  std::vector<bf16> x(k, F32ToBf16(1.0f));
  std::vector<bf16> w(n * k, F32ToBf16(0.5f));
  w[0 * k + 32] = F32ToBf16(INFINITY);  // in the k tail block
  w[1 * k + 4] = F32ToBf16(NAN);
  for (SimdLevel level : AvailableLevels()) {
    std::vector<float> y(n);
    MatmulBf16ForLevel(level, x.data(), k, 1, k, w.data(), n, y.data(), n, nullptr);
    EXPECT_TRUE(std::isinf(y[0]) && y[0] > 0) << SimdLevelName(level);
    EXPECT_TRUE(std::isnan(y[1])) << SimdLevelName(level);
  }
}

TEST(MatmulTest, DefaultDispatchMatchesItsLevel) {
  const int64_t m = 9, k = 100, n = 11;
  const auto x = RandomBf16(m * k, 31);
  const auto w = RandomBf16(n * k, 32);
  std::vector<float> a(m * n), b(m * n);
  MatmulBf16(x.data(), k, m, k, w.data(), n, a.data(), n, nullptr);
  MatmulBf16ForLevel(DetectSimd(), x.data(), k, m, k, w.data(), n, b.data(), n, nullptr);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(WeightLayoutTest, PackedRowsReadBackAndOffsetsMatch) {
  const int64_t n = 12, k = 48;
  const auto w = RandomBf16(n * k, 41);
  for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kGroups4}) {
    std::vector<bf16> packed(n * k);
    PackWeights(w.data(), n, k, layout, packed.data());
    std::vector<bf16> row(k);
    for (int64_t j = 0; j < n; ++j) {
      CopyWeightRow(packed.data(), n, k, layout, j, row.data());
      for (int64_t p = 0; p < k; ++p) {
        ASSERT_EQ(row[p], w[j * k + p]) << j << " " << p;
        ASSERT_EQ(packed[WeightOffset(j, p, k, layout)], w[j * k + p]) << j << " " << p;
      }
    }
  }
  // Groups of four rows, interleaved by 16-element blocks: row 1's first block follows row 0's.
  std::vector<bf16> packed(n * k);
  PackWeights(w.data(), n, k, WeightLayout::kGroups4, packed.data());
  EXPECT_EQ(packed[16], w[k]);
  EXPECT_EQ(packed[64], w[16]);
  EXPECT_EQ(packed[4 * k], w[4 * k]);
}

TEST(WeightLayoutTest, GroupsOnlyWhereTheShapeAndPathAllow) {
  EXPECT_EQ(PreferredWeightLayout(6, 32), WeightLayout::kRows);  // n % 4
  EXPECT_EQ(PreferredWeightLayout(8, 40), WeightLayout::kRows);  // k % 16
  const WeightLayout groups =
      DetectSimd() != SimdLevel::kScalar ? WeightLayout::kGroups4 : WeightLayout::kRows;
  EXPECT_EQ(PreferredWeightLayout(8, 32), groups);
  EXPECT_EQ(PreferredWeightLayout(896, 4864), groups);  // long rows too (an MLP's down matrix)
}

// MatmulBf16 on kGroups4 weights gives the bits of the kRows call on every vector path this CPU
// runs, for one row (the streams), every batch of 2-8 rows (the batch streams, the direct tiles)
// and more (the packed and blocked tiles, with partial last tiles), on one thread and two, with
// strided x and y. The default dispatch is checked too.
TEST(WeightLayoutTest, GroupsGiveTheSameBitsAsRows) {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : AvailableLevels()) {
    if (level != SimdLevel::kScalar) levels.push_back(level);
  }
  if (levels.empty()) GTEST_SKIP() << "kGroups4 needs a vector path; this CPU has none";
  ThreadPool pool(2);
  pool.set_min_parallel_work(0);
  struct Case {
    int64_t n, k;
  };
  // {136, 2048}: at m >= 16 x outgrows the blocked path's threshold (the blocked tiles).
  for (const Case& c : {Case{4, 16}, Case{8, 32}, Case{12, 896}, Case{36, 64}, Case{20, 4864},
                        Case{76, 64}, Case{136, 2048}}) {
    const auto w = RandomBf16(c.n * c.k, 51 + static_cast<uint32_t>(c.n));
    std::vector<bf16> packed(c.n * c.k);
    PackWeights(w.data(), c.n, c.k, WeightLayout::kGroups4, packed.data());
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 32, 33}) {
      const int64_t ldx = c.k + 16, ldy = c.n + 3;
      const auto x = RandomBf16(m * ldx, 61 + static_cast<uint32_t>(m));
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> rows(m * ldy, -1.0f), groups(m * ldy, -1.0f);
        MatmulBf16(x.data(), ldx, m, c.k, w.data(), c.n, rows.data(), ldy, p);
        MatmulBf16(x.data(), ldx, m, c.k, packed.data(), c.n, groups.data(), ldy, p,
                   WeightLayout::kGroups4);
        for (int64_t i = 0; i < m * ldy; ++i) {
          ASSERT_EQ(Bits(groups[i]), Bits(rows[i]))
              << "n " << c.n << " k " << c.k << " m " << m << " at " << i
              << (p ? " (2 threads)" : " (1 thread)");
        }
        for (SimdLevel level : levels) {
          std::vector<float> on_level(m * ldy, -1.0f);
          MatmulBf16ForLevel(level, x.data(), ldx, m, c.k, packed.data(), c.n, on_level.data(), ldy,
                             p, WeightLayout::kGroups4);
          for (int64_t i = 0; i < m * ldy; ++i) {
            ASSERT_EQ(Bits(on_level[i]), Bits(rows[i]))
                << SimdLevelName(level) << " n " << c.n << " k " << c.k << " m " << m << " at " << i
                << (p ? " (2 threads)" : " (1 thread)");
          }
        }
      }
    }
  }
}

TEST(MatmulTest, EmptyShapesWriteNothing) {
  std::vector<bf16> x(16, F32ToBf16(1.0f)), w(16, F32ToBf16(1.0f));
  for (SimdLevel level : AvailableLevels()) {
    std::vector<float> y(4, 3.0f);
    MatmulBf16ForLevel(level, x.data(), 16, 0, 16, w.data(), 1, y.data(), 1, nullptr);
    MatmulBf16ForLevel(level, x.data(), 16, 1, 16, w.data(), 0, y.data(), 1, nullptr);
    EXPECT_EQ(y[0], 3.0f);
    // k = 0: an empty sum is +0.
    MatmulBf16ForLevel(level, x.data(), 16, 1, 0, w.data(), 1, y.data(), 1, nullptr);
    EXPECT_EQ(Bits(y[0]), 0u) << SimdLevelName(level);
  }
}

// The oneDNN backend (matmul.h "GEMM backends"), exercised on whatever implementation oneDNN picks
// on this host (brgemm on AVX-512-BF16 or AMX); skipped where OnednnGemmAvailable() is false.
class OnednnMatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnednnGemmAvailable()) GTEST_SKIP() << "oneDNN has no usable bf16 matmul here";
  }
  static std::vector<bf16> Pack(const std::vector<bf16>& w, int64_t n, int64_t k) {
    std::vector<bf16> packed(PackedWeightBytes(n, k, WeightLayout::kOnednn) / 2);
    PackWeights(w.data(), n, k, WeightLayout::kOnednn, packed.data());
    return packed;
  }
};

TEST_F(OnednnMatmulTest, PackedRowsReadBackAndPackInWholeBlocks) {
  // One block, a partial one, several with a short last block.
  for (int64_t n : {int64_t{12}, kOnednnBlockColumns, 2 * kOnednnBlockColumns + 44}) {
    const int64_t k = 96;
    const auto w = RandomBf16(n * k, 43);
    const auto packed = Pack(w, n, k);
    std::vector<bf16> row(k);
    for (int64_t j = 0; j < n; ++j) {
      CopyWeightRow(packed.data(), n, k, WeightLayout::kOnednn, j, row.data());
      for (int64_t p = 0; p < k; ++p) ASSERT_EQ(row[p], w[j * k + p]) << n << " " << j << " " << p;
    }
    // Packing block by block gives the same bytes as packing the whole.
    std::vector<bf16> pieces(packed.size());
    for (int64_t r = 0; r < n; r += kOnednnBlockColumns) {
      const int64_t cols = std::min(kOnednnBlockColumns, n - r);
      PackWeights(w.data() + r * k, cols, k, WeightLayout::kOnednn,
                  pieces.data() + PackedWeightBytes(r, k, WeightLayout::kOnednn) / 2);
    }
    EXPECT_EQ(std::memcmp(pieces.data(), packed.data(), packed.size() * sizeof(bf16)), 0) << n;
  }
}

TEST_F(OnednnMatmulTest, MatchesDoubleReferenceWithinFp32Bound) {
  // k not a multiple of 16 or 32, n with a short last block, m across a row block boundary.
  const int64_t m = kOnednnBlockRows + 5, n = kOnednnBlockColumns + 20, k = 200;
  const auto x = RandomBf16(m * k, 44);
  const auto w = RandomBf16(n * k, 45);
  const auto packed = Pack(w, n, k);
  std::vector<float> y(m * n), own(m * n);
  ThreadPool pool(2);
  MatmulBf16(x.data(), k, m, k, packed.data(), n, y.data(), n, &pool, WeightLayout::kOnednn);
  MatmulBf16(x.data(), k, m, k, w.data(), n, own.data(), n, &pool);
  std::vector<double> ref, abs_sum;
  Reference(x, k, m, k, w, n, &ref, &abs_sum);
  // Any fp32 summation order of the exact products is within gamma_k sum |x w| of the exact sum,
  // so oneDNN and the own kernels are within twice that of each other.
  const double u = std::ldexp(1.0, -24);
  const double gamma = (k + 2) * u / (1 - (k + 2) * u);
  int64_t differing = 0;
  for (int64_t e = 0; e < m * n; ++e) {
    ASSERT_NEAR(y[e], ref[e], gamma * abs_sum[e] + 1e-30) << "e=" << e;
    ASSERT_NEAR(y[e], own[e], 2 * gamma * abs_sum[e] + 1e-30) << "e=" << e;
    differing += Bits(y[e]) != Bits(own[e]);
  }
  RecordProperty("bits_differing_from_own", std::to_string(differing));
}

TEST_F(OnednnMatmulTest, RowResultIndependentOfBatchOrderAndThreads) {
  // Every m from 1 to past two row blocks, rows drawn in a shuffled order from a fixed set, on
  // 1, 2 and 3 threads (split forced), against each row computed alone on the calling thread.
  const int64_t n = 2 * kOnednnBlockColumns + 44, k = 136, distinct = 80;
  const auto rows = RandomBf16(distinct * k, 46);
  const auto packed = Pack(RandomBf16(n * k, 47), n, k);
  std::vector<float> alone(distinct * n);
  for (int64_t r = 0; r < distinct; ++r) {
    MatmulBf16(rows.data() + r * k, k, 1, k, packed.data(), n, alone.data() + r * n, n, nullptr,
               WeightLayout::kOnednn);
  }
  std::mt19937 rng(48);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    pool.set_min_parallel_work(0);
    for (int64_t m = 1; m <= 70; ++m) {
      std::vector<int64_t> pick(m);
      for (auto& p : pick) p = static_cast<int64_t>(rng() % distinct);
      // x rows ldx apart, wider than k, so the primitives also see a strided x.
      const int64_t ldx = k + 8;
      std::vector<bf16> x(m * ldx);
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(&x[i * ldx], &rows[pick[i] * k], k * sizeof(bf16));
      }
      std::vector<float> y(m * n);
      MatmulBf16(x.data(), ldx, m, k, packed.data(), n, y.data(), n, &pool, WeightLayout::kOnednn);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(std::memcmp(&y[i * n], &alone[pick[i] * n], n * sizeof(float)), 0)
            << "threads " << threads << " m " << m << " row " << i;
      }
    }
  }
}

TEST_F(OnednnMatmulTest, ExplicitLevelRefusesOnednnWeights) {
  const int64_t n = 8, k = 32;
  const auto packed = Pack(RandomBf16(n * k, 49), n, k);
  std::vector<bf16> x(k);
  std::vector<float> y(n);
  EXPECT_DEATH(MatmulBf16ForLevel(AvailableLevels().back(), x.data(), k, 1, k, packed.data(), n,
                                  y.data(), n, nullptr, WeightLayout::kOnednn),
               "oneDNN");
}

TEST(GemmBackendTest, SelectionFollowsTheEnvironmentAndAvailability) {
  // The process's choice (TANDEM_GEMM as ctest sets it) and what it implies.
  const char* env = std::getenv("TANDEM_GEMM");
  const bool want_onednn = env != nullptr && std::strcmp(env, "onednn") == 0;
  const GemmBackend backend = SelectedGemmBackend();
  EXPECT_EQ(backend,
            want_onednn && OnednnGemmAvailable() ? GemmBackend::kOnednn : GemmBackend::kOwn);
  EXPECT_EQ(PreferredWeightLayout(64, 64) == WeightLayout::kOnednn,
            backend == GemmBackend::kOnednn);
  const std::string description = GemmBackendDescription();
  EXPECT_EQ(description.rfind(GemmBackendName(backend), 0), 0u) << description;
}

}  // namespace
}  // namespace tandem::engine
