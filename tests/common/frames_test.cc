// Length-prefixed frames (common/frames.h): round trips whatever the read sizes, a frame split
// across reads, empty frames, and a header above the limit refused naming both sizes.
#include "common/frames.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace tandem {
namespace {

// Feeds `bytes` to `reader` `chunk` bytes at a time, collecting every frame.
std::vector<std::string> Feed(FrameReader& reader, const std::string& bytes, size_t chunk) {
  std::vector<std::string> frames;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const size_t n = std::min(chunk, bytes.size() - at);
    std::memcpy(reader.Prepare(n), bytes.data() + at, n);
    reader.Commit(n);
    for (;;) {
      auto frame = reader.Next();
      EXPECT_TRUE(frame.ok()) << frame.status();
      if (!frame.ok() || !frame->has_value()) break;
      frames.emplace_back(**frame);
    }
  }
  return frames;
}

TEST(FramesTest, RoundTripsWhateverTheReadSizes) {
  const std::vector<std::string> sent = {"a", "", std::string(70000, 'x'), "last frame"};
  std::string wire;
  for (const std::string& s : sent) AppendFrame(&wire, s);
  EXPECT_EQ(wire.size(), 4 * kFrameHeaderBytes + 1 + 70000 + 10);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{4096}, wire.size()}) {
    FrameReader reader(1 << 20);
    EXPECT_EQ(Feed(reader, wire, chunk), sent) << "chunk " << chunk;
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(FramesTest, TheHeaderIsBigEndian) {
  std::string wire;
  AppendFrameHeader(&wire, 0x01020304);
  EXPECT_EQ(wire, std::string("\x01\x02\x03\x04", 4));
}

TEST(FramesTest, AFrameAboveTheLimitIsRefusedNamingBothSizes) {
  FrameReader reader(100);
  std::string wire;
  AppendFrame(&wire, std::string(101, 'y'));
  std::memcpy(reader.Prepare(wire.size()), wire.data(), wire.size());
  reader.Commit(wire.size());
  auto frame = reader.Next();
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().message(), "a frame of 101 bytes is larger than the limit of 100 bytes");
}

TEST(FramesTest, AnIncompleteFrameWaitsForItsBytes) {
  FrameReader reader(100);
  std::string wire;
  AppendFrame(&wire, "hello");
  std::memcpy(reader.Prepare(6), wire.data(), 6);
  reader.Commit(6);
  auto frame = reader.Next();
  ASSERT_TRUE(frame.ok());
  EXPECT_FALSE(frame->has_value());
  std::memcpy(reader.Prepare(3), wire.data() + 6, 3);
  reader.Commit(3);
  frame = reader.Next();
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(frame->has_value());
  EXPECT_EQ(**frame, "hello");
}

}  // namespace
}  // namespace tandem
