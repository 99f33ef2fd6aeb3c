// The generators behind bench_serving's datasets, against values numpy and CPython print.
#include "bench/tandem_bench/upstream_random.h"

#include <vector>

#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

TEST(UpstreamRandomTest, MersenneTwisterReference) {
  Mt19937 mt;
  mt.InitGenrand(5489U);  // std::mt19937's default seed: its 10000th output is 4123659995
  uint32_t value = 0;
  for (int i = 0; i < 10000; ++i) value = mt.NextUint32();
  EXPECT_EQ(value, 4123659995U);
}

TEST(UpstreamRandomTest, NumpyLegacySeeding) {
  // np.random.seed(0); np.random.random_sample() -> 0.5488135039273248
  NumpyRandomState numpy(0);
  EXPECT_EQ(numpy.RandomSample(), 0.5488135039273248);
  // np.random.seed(1); np.random.randint(0, 10, size=5) -> [5, 8, 9, 5, 0]
  NumpyRandomState one(1);
  EXPECT_EQ(one.RandInt(0, 10, 5), (std::vector<int64_t>{5, 8, 9, 5, 0}));
  // A range of one value draws nothing: the next draw is the first.
  NumpyRandomState a(1), b(1);
  EXPECT_EQ(a.RandInt(7, 8, 3), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_EQ(a.RandInt(0, 10, 5), b.RandInt(0, 10, 5));
}

TEST(UpstreamRandomTest, PythonSeedingShuffleAndChoices) {
  PythonRandom py(1);  // random.seed(1); random.random() -> 0.13436424411240122
  EXPECT_EQ(py.Random(), 0.13436424411240122);
  PythonRandom shuffler(1);  // random.seed(1); x = list(range(10)); random.shuffle(x)
  std::vector<int> items = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  shuffler.Shuffle(items);
  EXPECT_EQ(items, (std::vector<int>{6, 8, 9, 7, 5, 3, 0, 4, 1, 2}));
  PythonRandom big((uint64_t{1} << 40) | 5);  // random.seed(2**40 + 5); random.random()
  EXPECT_EQ(big.Random(), 0.5043802970418443);
}

}  // namespace
}  // namespace tandem::bench
