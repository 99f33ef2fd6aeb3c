#include "common/byte_size.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr int64_t kRam = 24LL << 30;

TEST(ByteSizeTest, PlainBytesAndUnits) {
  EXPECT_EQ(*ParseByteSize("1073741824", kRam), 1073741824);
  EXPECT_EQ(*ParseByteSize("4GiB", kRam), 4LL << 30);
  EXPECT_EQ(*ParseByteSize("4 GiB", kRam), 4LL << 30);
  EXPECT_EQ(*ParseByteSize("4g", kRam), 4LL << 30);
  EXPECT_EQ(*ParseByteSize("512MiB", kRam), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("512MB", kRam), 512000000);
  EXPECT_EQ(*ParseByteSize("1.5GiB", kRam), 3LL << 29);
  EXPECT_EQ(*ParseByteSize("64KiB", kRam), 65536);
  EXPECT_EQ(*ParseByteSize("2TB", kRam), 2000000000000LL);
}

TEST(ByteSizeTest, FractionOfRam) {
  EXPECT_EQ(*ParseByteSize("0.25", kRam), 6LL << 30);
  EXPECT_EQ(*ParseByteSize(".5", kRam), 12LL << 30);
  EXPECT_FALSE(ParseByteSize("1.0", kRam).ok());
  EXPECT_FALSE(ParseByteSize("0.25", 0).ok());
}

TEST(ByteSizeTest, ErrorsNameTheValue) {
  for (const char* bad :
       {"", "abc", "-1", "0", "0GiB", "4XB", "1.2.3", "4GiBs", "1e30", "9999999TiB"}) {
    auto r = ParseByteSize(bad, kRam);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(ByteSizeTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3LL << 29), "1.50 GiB");
  EXPECT_GT(TotalRamBytes(), 0);
}

}  // namespace
}  // namespace tandem
