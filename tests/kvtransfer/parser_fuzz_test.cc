// Thousands of seeded random and mutated inputs through every network-facing parser: nothing
// may crash (ASan/UBSan watch the unit run), and mutations of valid inputs keep being rejected
// or accepted cleanly.
#include <gtest/gtest.h>

#include <random>

#include "kvtransfer/auth.h"
#include "kvtransfer/fuzz/parse_all.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

std::vector<std::string> Seeds() {
  Descriptor d;
  d.backend = "tcp";
  d.engine_name = "decode-0";
  d.endpoints = {"tcp://127.0.0.1:4000", "tcp://127.0.0.1:4001"};
  for (RegionId i = 0; i < 5; ++i) d.regions.push_back({i, 1ull << (20 + i), i % 2 == 0, i, i});
  d.compat = testing::TestCompat();
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.flags = kFlagAck;
  h.length = 16;
  auto header = EncodeHeader(h);
  std::string write(header.data(), header.size());
  write += std::string(16, 'x');
  std::string hello_frame(header.data(), header.size());
  hello_frame += EncodeHello(HelloBody{MakeNonce(), "prefill-0", testing::TestCompat()});
  std::string compat;
  EncodeCompat(testing::TestCompat(), &compat);
  return {EncodeDescriptor(d), write, hello_frame,
          EncodeChallenge(ChallengeBody{MakeNonce(), std::string(32, 'p'), "d"}), compat};
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  int edits = 1 + rng() % 8;
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 5) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
        break;
      case 2:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3:  // insert bytes
        s.insert(rng() % (s.size() + 1), std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 4:  // a length field set to something huge
        if (s.size() >= 4) {
          size_t at = rng() % (s.size() - 3);
          uint32_t v = rng() % 2 ? 0xffffffffu : static_cast<uint32_t>(rng());
          std::memcpy(&s[at], &v, 4);
        }
        break;
    }
  }
  return s;
}

TEST(ParserFuzzTest, SeedsParse) {
  auto seeds = Seeds();
  for (const std::string& s : seeds) {
    EXPECT_GT(ParseAllForFuzzing(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0);
  }
}

TEST(ParserFuzzTest, RandomAndMutatedInputsNeverCrash) {
  std::mt19937_64 rng(20240611);
  auto seeds = Seeds();
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string input;
    if (i % 4 == 0) {
      input.resize(rng() % 512);
      for (char& c : input) c = static_cast<char>(rng());
    } else {
      input = Mutate(seeds[rng() % seeds.size()], rng);
    }
    accepted += ParseAllForFuzzing(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  // Mutations keep some inputs valid: the parsers are exercised past their first check.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace tandem::kv
