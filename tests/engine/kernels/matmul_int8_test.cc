#include "engine/kernels/matmul_int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/bf16.h"
#include "engine/kernels/matmul_int8_internal.h"
#include "engine/kernels/thread_pool.h"

namespace tandem::engine {
namespace {

std::vector<Int8Path> AvailablePaths() {
  std::vector<Int8Path> paths;
  for (Int8Path p :
       {Int8Path::kScalar, Int8Path::kAvx2, Int8Path::kAvxVnni, Int8Path::kAvx512Vnni}) {
    if (Int8PathSupported(p)) paths.push_back(p);
  }
  return paths;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// An [n, k] int8 matrix in rows, its scales, and its packed form.
struct TestMatrix {
  std::vector<int8_t> rows;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  std::vector<int8_t> packed;
  Int8Matrix view;

  TestMatrix(std::vector<int8_t> q, std::vector<float> s, int64_t n, int64_t k)
      : rows(std::move(q)), scales(std::move(s)), sums(n), packed(Int8PackedBytes(n, k), 99) {
    PackInt8Rows(rows.data(), 0, n, n, k, packed.data(), sums.data());
    view = {packed.data(), scales.data(), sums.data(), n, k};
  }
};

TestMatrix RandomMatrix(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-128, 127);
  std::uniform_real_distribution<float> s(0.001f, 0.02f);
  std::vector<int8_t> rows(n * k);
  for (auto& e : rows) e = static_cast<int8_t>(q(rng));
  std::vector<float> scales(n);
  for (auto& e : scales) e = s(rng);
  return TestMatrix(std::move(rows), std::move(scales), n, k);
}

std::vector<bf16> RandomActivations(int64_t m, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<bf16> x(m * ld);
  for (auto& e : x) e = F32ToBf16(d(rng));
  for (int64_t i = 0; i < m; ++i) x[i * ld + (i * 7) % ld] = F32ToBf16(20.0f);  // an outlier
  return x;
}

// The arithmetic of matmul_int8.h, written out over the unpacked rows.
std::vector<float> Reference(const std::vector<bf16>& x, int64_t ldx, int64_t m, int64_t k,
                             const TestMatrix& w, int64_t n, std::vector<int32_t>* acc_out) {
  std::vector<float> y(m * n);
  std::vector<int8_t> qx(k);
  acc_out->assign(m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    const float sx = QuantizeActivationRow(x.data() + i * ldx, k, qx.data());
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += int64_t{qx[p]} * w.rows[j * k + p];
      (*acc_out)[i * n + j] = static_cast<int32_t>(acc);
      y[i * n + j] = (static_cast<float>(acc) * sx) * w.scales[j];
    }
  }
  return y;
}

TEST(QuantizeInt8Test, ActivationRowRoundsHalfToEven) {
  // max|x| = 2: q = round(x * 63.5); 1 -> 63.5 -> 64 (even), 0.5 -> 31.75 -> 32, -1 -> -64.
  const std::vector<float> v = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f, -2.0f, 0.015625f};
  std::vector<bf16> x;
  for (float f : v) x.push_back(F32ToBf16(f));
  std::vector<int8_t> q(v.size());
  const float sx = QuantizeActivationRow(x.data(), static_cast<int64_t>(x.size()), q.data());
  EXPECT_EQ(Bits(sx), Bits(2.0f / 127.0f));
  EXPECT_EQ(q, (std::vector<int8_t>{127, 64, 32, -64, 0, -127, 1}));
  std::vector<bf16> zeros(5, F32ToBf16(0.0f));
  EXPECT_EQ(QuantizeActivationRow(zeros.data(), 5, q.data()), 0.0f);
  for (int p = 0; p < 5; ++p) EXPECT_EQ(q[p], 0);
}

// The matmul paths quantize x with the vector versions of QuantizeActivationRow: the same bytes
// (with the padding, and offset by 128 for the VNNI paths) and sx, on tails of every length, ties,
// denormal, zero, infinite and NaN inputs.
TEST(QuantizeInt8Test, VectorRowsMatchScalar) {
  std::vector<internal::QuantizeRowFn> fns;
  if (Int8PathSupported(Int8Path::kAvx2)) fns.push_back(internal::QuantizeRowAvx2);
  if (SimdLevelSupported(SimdLevel::kAvx512)) fns.push_back(internal::QuantizeRowAvx512);
  if (fns.empty()) GTEST_SKIP() << "no vector path";
  std::mt19937 rng(17);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int64_t k : {1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 896, 4864}) {
    const int64_t kp = (k + 63) / 64 * 64;
    for (int variant = 0; variant < 6; ++variant) {
      std::vector<bf16> x(k);
      for (auto& e : x) e = F32ToBf16(d(rng));
      if (variant == 1) {  // ties: max|x| = 127 leaves x * 1 exact, halves included
        for (int64_t p = 0; p < k; ++p) x[p] = F32ToBf16(static_cast<float>(p % 9) * 0.5f - 2.0f);
        x[k / 2] = F32ToBf16(127.0f);
      }
      if (variant == 2) std::fill(x.begin(), x.end(), F32ToBf16(0.0f));
      if (variant == 3) x[k - 1] = 0x7fc1;  // NaN, last
      if (variant == 4) x[k / 3] = 0xff80;  // -infinity
      if (variant == 5) x[0] = 0x0003;      // a denormal
      std::vector<int8_t> ref(k);
      const float sx_ref = QuantizeActivationRow(x.data(), k, ref.data());
      for (internal::QuantizeRowFn fn : fns) {
        for (bool offset : {false, true}) {
          std::vector<uint8_t> q(kp + 1, 77);
          const float sx = fn(x.data(), k, kp, offset, q.data());
          ASSERT_EQ(Bits(sx), Bits(sx_ref)) << "k=" << k << " variant=" << variant;
          for (int64_t p = 0; p < kp; ++p) {
            const uint8_t want = static_cast<uint8_t>((p < k ? ref[p] : 0) + (offset ? 128 : 0));
            ASSERT_EQ(q[p], want) << "k=" << k << " variant=" << variant << " p=" << p;
          }
          ASSERT_EQ(q[kp], 77) << "wrote past kp";
        }
      }
    }
  }
}

TEST(QuantizeInt8Test, WeightRowIsSymmetricPerChannel) {
  const std::vector<float> w = {-0.5f, 0.25f, 0.125f, 0.001f};
  std::vector<int8_t> q(w.size());
  const float s = QuantizeWeightRow(w.data(), 4, q.data());
  EXPECT_EQ(Bits(s), Bits(0.5f / 127.0f));
  EXPECT_EQ(q, (std::vector<int8_t>{-127, 64, 32, 0}));  // 63.5 -> 64, 31.75 -> 32, 0.254 -> 0
  const std::vector<float> zero(4, 0.0f);
  EXPECT_EQ(QuantizeWeightRow(zero.data(), 4, q.data()), 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>(4, 0)));
}

TEST(PackInt8Test, LayoutPaddingAndRowSums) {
  const int64_t n = 5, k = 70;  // one padding row, 58 padding columns
  std::vector<int8_t> q(n * k);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p)
      q[j * k + p] = static_cast<int8_t>((j * 31 + p * 7) % 255 - 127);
  }
  std::vector<int8_t> packed(Int8PackedBytes(n, k), 99);
  ASSERT_EQ(packed.size(), 8u * 128u);
  std::vector<int32_t> sums(n);
  PackInt8Rows(q.data(), 0, 4, n, k, packed.data(), sums.data());
  PackInt8Rows(q.data() + 4 * k, 4, 1, n, k, packed.data(), sums.data());
  for (int64_t j = 0; j < 8; ++j) {
    int32_t sum = 0;
    for (int64_t p = 0; p < 128; ++p) {
      const int8_t want = j < n && p < k ? q[j * k + p] : 0;
      sum += want;
      ASSERT_EQ(packed[(j / 4) * 4 * 128 + (p / 64) * 256 + (j % 4) * 64 + p % 64], want)
          << "j=" << j << " p=" << p;
    }
    if (j < n) {
      EXPECT_EQ(sums[j], sum) << j;
    }
  }
}

class MatmulInt8PathTest : public ::testing::TestWithParam<Int8Path> {};

TEST_P(MatmulInt8PathTest, MatchesReferenceBitForBit) {
  const Int8Path path = GetParam();
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape s : {Shape{1, 64, 4}, Shape{1, 896, 36}, Shape{2, 100, 7}, Shape{3, 1000, 9},
                        Shape{5, 128, 13}, Shape{17, 320, 8}, Shape{70, 192, 6}}) {
    const int64_t ldx = s.k + 3;
    const auto x = RandomActivations(s.m, ldx, 11 + static_cast<uint32_t>(s.k));
    const TestMatrix w = RandomMatrix(s.n, s.k, 5 + static_cast<uint32_t>(s.n));
    std::vector<int32_t> acc;
    const auto ref = Reference(x, ldx, s.m, s.k, w, s.n, &acc);
    const int64_t ldy = s.n + 2;
    std::vector<float> y(s.m * ldy, -7.0f);
    MatmulInt8ForPath(path, x.data(), ldx, s.m, w.view, y.data(), ldy, nullptr);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_EQ(Bits(y[i * ldy + j]), Bits(ref[i * s.n + j]))
            << Int8PathName(path) << " m=" << s.m << " k=" << s.k << " n=" << s.n << " i=" << i
            << " j=" << j;
      }
      for (int64_t j = s.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], -7.0f) << "wrote padding";
    }
  }
}

// Rows of x with max|x| = 127 quantize to themselves with sx = 1, and unit weight scales leave
// y = float(acc): the integer part is checked exactly, at the extremes (qw = -128 against
// qx = -127, the largest products, which would saturate a careless vpmaddubsw).
TEST_P(MatmulInt8PathTest, IntegerPartIsExact) {
  const Int8Path path = GetParam();
  const int64_t m = 3, k = 1024, n = 8;
  std::vector<bf16> x(m * k);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-127, 127);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const int v = i == 0 ? -127 : (i == 1 ? 127 : d(rng));
      x[i * k + p] = F32ToBf16(static_cast<float>(p == 0 ? 127 : v));
    }
  }
  std::vector<int8_t> q(n * k);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      q[j * k + p] = static_cast<int8_t>(j == 0 ? -128 : (j == 1 ? 127 : d(rng)));
    }
  }
  const TestMatrix w(q, std::vector<float>(n, 1.0f), n, k);
  std::vector<float> y(m * n);
  MatmulInt8ForPath(path, x.data(), k, m, w.view, y.data(), n, nullptr);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc += static_cast<int64_t>(Bf16ToF32(x[i * k + p])) * q[j * k + p];
      }
      ASSERT_LT(std::llabs(acc), 1 << 24);  // exact in fp32
      ASSERT_EQ(static_cast<int64_t>(y[i * n + j]), acc) << Int8PathName(path) << " " << i << j;
    }
  }
}

// A row's result never depends on the other rows of the call, the row blocking or the threads.
TEST_P(MatmulInt8PathTest, RowsIndependentOfBatchAndThreads) {
  const Int8Path path = GetParam();
  const int64_t k = 448, n = 52;
  const TestMatrix w = RandomMatrix(n, k, 9);
  const auto x = RandomActivations(131, k, 21);
  std::vector<float> alone(n);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    pool.set_min_parallel_work(0);  // split even these small calls (m = 1 quantizes per thread)
    for (int64_t m : {1, 2, 5, 64, 65, 131}) {
      std::vector<float> y(m * n);
      MatmulInt8ForPath(path, x.data(), k, m, w.view, y.data(), n, &pool);
      for (int64_t i = 0; i < m; i += 13) {
        MatmulInt8ForPath(path, x.data() + i * k, k, 1, w.view, alone.data(), n, nullptr);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(Bits(y[i * n + j]), Bits(alone[j]))
              << Int8PathName(path) << " threads=" << threads << " m=" << m << " i=" << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, MatmulInt8PathTest, ::testing::ValuesIn(AvailablePaths()),
                         [](const auto& info) { return std::string(Int8PathName(info.param)); });

TEST(MatmulInt8Test, DetectedPathIsSupportedAndCapped) {
  const Int8Path path = DetectInt8Path();
  EXPECT_TRUE(Int8PathSupported(path));
  if (DetectSimd() == SimdLevel::kScalar) {
    EXPECT_EQ(path, Int8Path::kScalar);
  }
  if (DetectSimd() < SimdLevel::kAvx512) {
    EXPECT_NE(path, Int8Path::kAvx512Vnni);
  }
}

}  // namespace
}  // namespace tandem::engine
