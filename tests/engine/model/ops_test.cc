#include "engine/ops.h"

#include <cmath>
#include <limits>

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
