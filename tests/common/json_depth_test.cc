// common/json_depth.h: the nesting and parsed-size scans that run before any JSON parser, checked
// against what nlohmann::json holds for the shapes that cost most per byte.
#include "common/json_depth.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JsonNestingDepthTest, CountsBracketsOutsideStringsAndStopsEarly) {
  EXPECT_EQ(JsonNestingDepth(R"({"a":[1,{"b":[]}]})", 64), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[[\"[["})", 64), 1);  // brackets in a string
  EXPECT_EQ(JsonNestingDepth(Repeat("[", 1000), 64), 65);
  EXPECT_EQ(JsonNestingDepth("", 64), 0);
}

TEST(JsonParsedBytesTest, GrowsWithValuesNotWithTheirSpelling) {
  // A long string costs its bytes; the same bytes as numbers cost a value each.
  const std::string text = absl::StrCat("[\"", std::string(1 << 20, 'a'), "\"]");
  const std::string numbers = absl::StrCat("[", Repeat("1,", 1 << 19), "1]");
  EXPECT_LT(JsonParsedBytes(text), (1u << 20) + 1024);
  EXPECT_GE(JsonParsedBytes(numbers), (1u << 19) * 48u);
  // Each element of the costliest shapes is counted at what nlohmann::json holds for it at the
  // parse's peak: a 16-byte value in a vector grown by doubling (up to 48 bytes), plus an empty
  // object's std::map (64) or a string's std::string (48).
  EXPECT_GE(JsonParsedBytes(absl::StrCat("[", Repeat("{},", 1000), "{}]")), 1000u * (48 + 64 + 48));
  EXPECT_GE(JsonParsedBytes(absl::StrCat("[", Repeat("\"\",", 1000), "\"\"]")), 1000u * (48 + 48));
  // An object member is a map node (96 bytes allocated) besides its key and value.
  EXPECT_GE(JsonParsedBytes("{\"k1\":0,\"k2\":0}"), 2u * 96);
  // Brackets, commas and colons inside strings are text, not values.
  EXPECT_EQ(JsonParsedBytes(R"(["{},{},{}:::"])"), JsonParsedBytes(R"(["abcdefghijk"])"));
  EXPECT_EQ(JsonParsedBytes(R"(["\"{},{}"])"), JsonParsedBytes(R"(["abcdefg"])"));
}

}  // namespace
}  // namespace tandem
