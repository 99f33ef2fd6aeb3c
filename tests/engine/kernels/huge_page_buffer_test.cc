#include "engine/kernels/huge_page_buffer.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(HugePageBufferTest, AlignedZeroedWholeHugePages) {
  auto b = HugePageBuffer::Allocate(3 * 1000 * 1000);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->size(), 2 * HugePageBuffer::kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % HugePageBuffer::kHugePageBytes, 0u);
  uint64_t sum = 0;
  for (size_t i = 0; i < b->size(); i += 4096) sum += b->data()[i];
  EXPECT_EQ(sum, 0u);
  for (size_t i = 0; i < b->size(); ++i) b->data()[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(b->data()[b->size() - 1], static_cast<uint8_t>(b->size() - 1));
  // Whether huge pages were granted depends on the kernel; the figure is bounded either way.
  EXPECT_GE(b->huge_page_bytes(), 0);
  EXPECT_LE(b->huge_page_bytes(), static_cast<int64_t>(b->size()));
}

TEST(HugePageBufferTest, EmptyAndMoves) {
  auto empty = HugePageBuffer::Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_EQ(empty->huge_page_bytes(), 0);

  auto a = HugePageBuffer::Allocate(1);
  ASSERT_TRUE(a.ok());
  a->data()[0] = 42;
  uint8_t* p = a->data();
  HugePageBuffer moved(std::move(*a));
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(a->data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  HugePageBuffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), p);
  EXPECT_EQ(assigned.data()[0], 42);
}

TEST(HugePageBufferTest, ImpossibleSizeIsAnError) {
  auto b = HugePageBuffer::Allocate(SIZE_MAX - 10);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem::engine
