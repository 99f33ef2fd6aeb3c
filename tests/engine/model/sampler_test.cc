// The model tests use the sampler only for greedy decoding; the sampler, the sampling
// parameters and the output stream are tested in tests/engine/sampling.
#include "engine/sampler.h"

#include <vector>

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(SamplerTest, GreedyAgreesWithArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> logits(257);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>((i * 37) % 101) * 0.01f;
  }
  auto s = Sampler::Create(p, static_cast<int32_t>(logits.size()), {});
  ASSERT_TRUE(s.ok()) << s.status();
  auto r = s->Sample(logits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, Argmax(logits));
  EXPECT_EQ(Argmax(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);
  EXPECT_EQ(Argmax({}), -1);
}

}  // namespace
}  // namespace tandem::engine
