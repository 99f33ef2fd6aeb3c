#include "engine/kernels/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tandem::engine {
namespace {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

TEST(Bf16Test, WideningIsExact) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
  EXPECT_EQ(Bf16ToF32(0x0001), FromBits(0x00010000));  // denormal kept
  EXPECT_TRUE(std::isinf(Bf16ToF32(0x7f80)));
  EXPECT_TRUE(std::isnan(Bf16ToF32(0x7fc0)));
}

TEST(Bf16Test, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (0x3f80) and 1.0078125 (0x3f81): even wins.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000)), 0x3f80);
  // 0x3f81 + half: halfway between 0x3f81 and 0x3f82: rounds to the even 0x3f82.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000)), 0x3f82);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001)), 0x3f81);  // just above half
  EXPECT_EQ(F32ToBf16(FromBits(0x3f807fff)), 0x3f80);  // just below half
  EXPECT_EQ(F32ToBf16(FromBits(0xbf808000)), 0xbf80);  // negative tie
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
}

TEST(Bf16Test, InfinityNanAndOverflow) {
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // The largest finite floats round up to infinity, as RNE demands.
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);
  // NaNs stay NaN, including one whose payload lives only in the dropped low bits.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const bf16 b = F32ToBf16(FromBits(nan));
    EXPECT_TRUE(std::isnan(Bf16ToF32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000);
  }
}

TEST(Bf16Test, DenormalsRoundLikeNormals) {
  EXPECT_EQ(F32ToBf16(FromBits(0x00008000)), 0x0000);  // tie to even (0)
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000)), 0x0002);  // tie to even (2)
  EXPECT_EQ(F32ToBf16(FromBits(0x00010000)), 0x0001);
  EXPECT_EQ(F32ToBf16(FromBits(0x007fffff)), 0x0080);  // rounds up into the normal range
}

TEST(Bf16Test, VectorConversionMatchesScalar) {
  std::mt19937 rng(7);
  std::vector<float> src;
  for (uint32_t special :
       {0x3f808000u, 0x3f818000u, 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f800000u, 0xff800000u,
        0x00008000u, 0x00018000u, 0x7f7fffffu, 0x80000000u, 0x00000000u}) {
    src.push_back(FromBits(special));
  }
  for (int i = 0; i < 5000; ++i) src.push_back(FromBits(rng()));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17},
                    static_cast<int64_t>(src.size())}) {
    std::vector<bf16> dst(n + 1, 0xabcd);
    ConvertF32ToBf16(src.data(), dst.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], F32ToBf16(src[i])) << i;
    EXPECT_EQ(dst[n], 0xabcd);  // nothing written past n
    std::vector<float> back(n);
    ConvertBf16ToF32(dst.data(), back.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &back[i], sizeof(bits));
      ASSERT_EQ(bits, static_cast<uint32_t>(dst[i]) << 16);
    }
  }
}

}  // namespace
}  // namespace tandem::engine
