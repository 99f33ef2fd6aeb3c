#include "engine/sampler.h"

#include <map>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(SamplerTest, GreedyPicksLowestIndexOfMax) {
  SamplingParams p;
  p.temperature = 0.0f;
  auto s = Sampler::Create(p);
  ASSERT_TRUE(s.ok());
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(*s->Sample(logits), 1);
}

TEST(SamplerTest, OutOfRangeParametersNameTheParameter) {
  auto expect = [](SamplingParams p, const std::string& name) {
    auto s = Sampler::Create(p);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.status().message()).find(name), std::string::npos) << s.status();
  };
  SamplingParams p;
  p.temperature = -0.1f;
  expect(p, "temperature");
  p = SamplingParams();
  p.temperature = std::numeric_limits<float>::infinity();
  expect(p, "temperature");
  p = SamplingParams();
  p.top_p = 0.0f;
  expect(p, "top_p");
  p = SamplingParams();
  p.top_p = 1.5f;
  expect(p, "top_p");
  p = SamplingParams();
  p.top_k = -5;
  expect(p, "top_k");
  p = SamplingParams();
  p.min_p = 1.1f;
  expect(p, "min_p");
  p = SamplingParams();
  p.min_p = std::nanf("");
  expect(p, "min_p");
}

std::map<int32_t, int> Histogram(SamplingParams p, const std::vector<float>& logits, int n) {
  auto s = Sampler::Create(p);
  EXPECT_TRUE(s.ok());
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[*s->Sample(logits)];
  return h;
}

TEST(SamplerTest, TemperatureSamplingFollowsTheDistribution) {
  // probabilities 0.1, 0.2, 0.3, 0.4
  std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SamplingParams p;
  p.seed = 7;
  auto h = Histogram(p, logits, 20000);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / 20000.0, 0.1 * (i + 1), 0.015) << i;
}

TEST(SamplerTest, TopKTopPMinPRestrictTheSupport) {
  std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SamplingParams p;
  p.seed = 3;
  p.top_k = 2;
  auto h = Histogram(p, logits, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[3] / 5000.0, 4.0 / 7.0, 0.03);

  p = SamplingParams();
  p.top_p = 0.5f;  // 0.4 alone < 0.5; 0.4 + 0.3 reaches it
  h = Histogram(p, logits, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_GT(h[2], 0);

  p = SamplingParams();
  p.min_p = 0.6f;  // keeps p >= 0.24: tokens 2 and 3
  h = Histogram(p, logits, 5000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_GT(h[2], 0);
  EXPECT_GT(h[3], 0);
}

TEST(SamplerTest, SeedMakesSamplingReproducible) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  p.seed = 42;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  auto a = Sampler::Create(p);
  auto b = Sampler::Create(p);
  p.seed = 43;
  auto c = Sampler::Create(p);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const int32_t x = *a->Sample(logits);
    EXPECT_EQ(x, *b->Sample(logits));
    differ += x != *c->Sample(logits);
  }
  EXPECT_GT(differ, 0);
}

TEST(SamplerTest, RejectsEmptyAndNaN) {
  auto s = Sampler::Create(SamplingParams());
  EXPECT_FALSE(s->Sample({}).ok());
  std::vector<float> bad = {1.0f, std::nanf("")};
  EXPECT_FALSE(s->Sample(bad).ok());
}

}  // namespace
}  // namespace tandem::engine
