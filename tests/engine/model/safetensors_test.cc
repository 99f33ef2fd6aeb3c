#include "engine/safetensors.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/engine/model/test_util.h"

namespace tandem::engine {
namespace {

using testing::RawTensor;
using testing::SafetensorsBytes;

std::string HeaderFile(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

absl::StatusOr<SafetensorsHeader> Parse(const std::string& bytes) {
  return ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                "t.safetensors");
}

void ExpectError(const std::string& bytes, const std::string& needle) {
  auto h = Parse(bytes);
  ASSERT_FALSE(h.ok());
  const std::string msg(h.status().message());
  EXPECT_NE(msg.find(needle), std::string::npos) << msg << " should mention " << needle;
  EXPECT_NE(msg.find("t.safetensors"), std::string::npos) << msg;
}

TEST(SafetensorsTest, ParsesValidFile) {
  std::map<std::string, RawTensor> t;
  t["a"] = {"BF16", {2, 3}, std::string(12, 'x')};
  t["b"] = {"F32", {4}, std::string(16, 'y')};
  t["empty"] = {"F16", {0, 5}, ""};
  const std::string bytes = SafetensorsBytes(t);
  auto h = Parse(bytes);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors.at("a").dtype, DType::kBF16);
  EXPECT_EQ(h->tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->tensors.at("b").begin, 12u);
  EXPECT_EQ(h->tensors.at("b").end, 28u);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->data_offset % 8, 0u);
}

TEST(SafetensorsTest, RejectsBadHeaders) {
  ExpectError("abc", "shorter than the 8-byte header length");
  ExpectError(HeaderFile("{}", 0).substr(0, 9), "exceeds the file size");
  std::string huge(8, '\xff');
  ExpectError(huge + "{}", "exceeds the");
  ExpectError(HeaderFile("{not json", 0), "not valid JSON");
  ExpectError(HeaderFile("[]", 0), "not a JSON object");
  ExpectError(HeaderFile(R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", 1),
              "unknown dtype 'Q4'");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
              "tensor 'w'");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
              "truncated");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
              "bad dimension");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
              "begin > end");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
              "data_offsets");
  ExpectError(HeaderFile(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), "shape");
  ExpectError(HeaderFile(R"({"w": 5})", 4), "not an object");
  ExpectError(HeaderFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         12),
              "overlap");
  ExpectError(HeaderFile(R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296, 4294967296],
                             "data_offsets": [0, 1]}})",
                         1),
              "too large");
  ExpectError(HeaderFile(R"({"__metadata__": 3})", 0), "__metadata__");
}

TEST(SafetensorsTest, OpenReportsMissingFileAndTensor) {
  auto missing = SafetensorsFile::Open("/nonexistent/x.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("/nonexistent/x.safetensors"),
            std::string::npos);
  const std::string dir = testing::MakeTempDir("open");
  std::map<std::string, RawTensor> t;
  t["a"] = {"BF16", {2}, std::string("\x01\x02\x03\x04", 4)};
  testing::WriteFile(dir + "/m.safetensors", SafetensorsBytes(t));
  auto f = SafetensorsFile::Open(dir + "/m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  auto a = (*f)->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->data[0], 1);
  EXPECT_EQ(a->data[3], 4);
  auto b = (*f)->Get("b");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("'b'"), std::string::npos);
  EXPECT_NE(std::string(b.status().message()).find("m.safetensors"), std::string::npos);
}

// Thousands of seeded random and mutated headers: the parser must only ever return a Status, and
// anything it accepts must be internally consistent (spans within the data, sizes matching).
TEST(SafetensorsTest, SurvivesRandomAndMutatedHeaders) {
  std::map<std::string, RawTensor> t;
  t["model.layers.0.weight"] = {"BF16", {3, 4}, std::string(24, 'a')};
  t["bias"] = {"F32", {3}, std::string(12, 'b')};
  t["n"] = {"F16", {2, 1}, std::string(4, 'c')};
  const std::string valid = SafetensorsBytes(t);
  std::mt19937 rng(1234);
  const char* tokens[] = {"{",           "}",         "[",
                          "]",           ",",         ":",
                          "\"dtype\"",   "\"shape\"", "\"data_offsets\"",
                          "\"F32\"",     "\"BF16\"",  "0",
                          "-1",          "1e400",     "18446744073709551615",
                          "\"\\u0000\"", "null",      "true",
                          "3.5",         "\"x\""};
  int accepted = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string bytes = valid;
    const int mode = iter % 4;
    if (mode == 0) {  // flip random bytes anywhere (header length included)
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    } else if (mode == 1) {  // truncate
      bytes.resize(rng() % bytes.size());
    } else if (mode == 2) {  // splice JSON tokens into the header text
      const size_t header_len = bytes.size() - 40;
      const size_t pos = 8 + rng() % (header_len - 8);
      const std::string tok = tokens[rng() % std::size(tokens)];
      bytes.replace(pos, std::min<size_t>(tok.size(), header_len - pos), tok);
    } else {  // random JSON-ish header of random length
      std::string json;
      const int n = static_cast<int>(rng() % 30);
      for (int k = 0; k < n; ++k) json += tokens[rng() % std::size(tokens)];
      bytes = HeaderFile(json, rng() % 64);
    }
    auto h = Parse(bytes);
    if (!h.ok()) {
      EXPECT_FALSE(h.status().message().empty());
      continue;
    }
    ++accepted;
    const uint64_t data_size = bytes.size() - h->data_offset;
    for (const auto& [name, info] : h->tensors) {
      EXPECT_LE(info.end, data_size) << name;
      EXPECT_EQ(info.end - info.begin,
                static_cast<uint64_t>(info.num_elements()) * DTypeSize(info.dtype));
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations (e.g. in data bytes) keep the file valid
}

}  // namespace
}  // namespace tandem::engine
