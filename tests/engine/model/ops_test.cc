#include "engine/ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(OpsTest, ExpIsAccurateAndSafeAtTheLimits) {
  for (float x = -87.0f; x <= 88.0f; x += 0.01171875f) {
    const double want = std::exp(static_cast<double>(x));
    ASSERT_NEAR(ExpF(x) / want, 1.0, 4e-7) << x;
  }
  EXPECT_TRUE(std::isnan(ExpF(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isfinite(ExpF(1000.0f)));
  EXPECT_GT(ExpF(1000.0f), 1e38f);
  EXPECT_GE(ExpF(-1000.0f), 0.0f);
  EXPECT_LT(ExpF(-1000.0f), 1e-37f);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// ExpInPlace and SiluMulToBf16 run 8 lanes wide on AVX2 CPUs and 16 on AVX-512 ones: every output
// must equal the portable ExpF (compiled here for the baseline) bit for bit, specials included.
TEST(OpsTest, VectorLoopsEqualThePortableFunctionBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-100.0f, 100.0f);
  std::vector<float> x;
  for (int i = 0; i < 100003; ++i) x.push_back(wide(rng));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1e-40f, -1e-40f, 88.0f, 88.5f, -87.3f, -87.5f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest(), 1e-30f, -16.635532f}) {
    x.push_back(v);
  }
  std::vector<float> e = x;
  ExpInPlace(e.data(), static_cast<int64_t>(e.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(Bits(e[i]), Bits(ExpF(x[i]))) << "exp(" << x[i] << ")";
  }
  std::vector<float> up(x.size());
  for (float& u : up) u = wide(rng) / 10.0f;
  std::vector<bf16> out(x.size());
  SiluMulToBf16(x.data(), up.data(), static_cast<int64_t>(x.size()), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = x[i] / (1.0f + ExpF(-x[i])) * up[i];
    ASSERT_EQ(out[i], F32ToBf16(want)) << "silu(" << x[i] << ") * " << up[i];
  }
}

TEST(OpsTest, RmsNormAndRope) {
  const float x[4] = {1, -2, 3, -4};
  const float w[4] = {1, 1, 2, 0.5f};
  float y[4];
  RmsNorm(x, 4, 1, 4, w, 0.0f, y, 4);
  const float inv = 1.0f / std::sqrt(30.0f / 4.0f);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y[i], w[i] * x[i] * inv);

  // Position 0 is the identity; a quarter turn rotates the (i, i + half) pair.
  float head[4] = {1, 2, 3, 4};
  const float inv_freq[2] = {1.0f, 0.5f};
  float cs[2], sn[2];
  RopeCosSin(0, inv_freq, 2, cs, sn);
  ApplyRope(head, 4, cs, sn);
  EXPECT_FLOAT_EQ(head[0], 1);
  EXPECT_FLOAT_EQ(head[3], 4);
  float h2[4] = {1, 0, 0, 0};
  const float quarter[2] = {static_cast<float>(M_PI / 2), 0.0f};
  RopeCosSin(1, quarter, 2, cs, sn);
  ApplyRope(h2, 4, cs, sn);
  EXPECT_NEAR(h2[0], 0.0f, 1e-7f);
  EXPECT_NEAR(h2[2], 1.0f, 1e-7f);  // x_{i+h}' = x_{i+h} cos + x_i sin
}

TEST(OpsTest, SiluMul) {
  const float gate[3] = {0.0f, 2.0f, -100.0f};
  const float up[3] = {5.0f, 3.0f, 1.0f};
  bf16 out[3];
  SiluMulToBf16(gate, up, 3, out);
  EXPECT_EQ(Bf16ToF32(out[0]), 0.0f);
  EXPECT_NEAR(Bf16ToF32(out[1]), 2.0 / (1 + std::exp(-2.0)) * 3.0, 0.02);
  EXPECT_NEAR(Bf16ToF32(out[2]), 0.0f, 1e-30f);
}

}  // namespace
}  // namespace tandem::engine
