// The two random generators `python -m sglang.bench_serving` draws its datasets and arrival times
// from, reproduced bit for bit so tandem-bench draws the same dataset for the same --seed:
//
//   NumpyRandomState  numpy's legacy `np.random` (RandomState on MT19937) after
//                     `np.random.seed(seed)`: randint(low, high, size) with numpy's masked
//                     rejection sampler (the 32-bit path for ranges below 2^32, the 64-bit one
//                     above), random_sample() and exponential(scale).
//   PythonRandom      CPython's `random` module after `random.seed(seed)`: random(),
//                     getrandbits(k), shuffle(list) and choices(population, k).
//
// Both are MT19937 but seeded differently: numpy seeds an integer with init_genrand, CPython
// with init_by_array of the integer's 32-bit words. tests/bench/bench_serving_golden.py draws
// the same sequences with numpy and CPython; tests/bench/upstream_random_test.cc compares.
//
// Value types; not thread-safe (one generator per thread).
#ifndef TANDEM_BENCH_TANDEM_BENCH_UPSTREAM_RANDOM_H_
#define TANDEM_BENCH_TANDEM_BENCH_UPSTREAM_RANDOM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tandem::bench {

// The Mersenne Twister of Matsumoto and Nishimura (mt19937ar.c), as numpy and CPython embed it.
class Mt19937 {
 public:
  void InitGenrand(uint32_t seed);
  void InitByArray(const std::vector<uint32_t>& key);
  uint32_t NextUint32();
  // 53 random bits as a double in [0, 1): genrand_res53, shared by numpy and CPython.
  double NextDouble();

 private:
  static constexpr int kN = 624;
  std::array<uint32_t, kN> mt_{};
  int index_ = kN + 1;  // not seeded
};

class NumpyRandomState {
 public:
  // np.random.seed(seed) for an integer seed (numpy accepts 0 .. 2^32 - 1).
  explicit NumpyRandomState(uint32_t seed) { mt_.InitGenrand(seed); }

  // np.random.randint(low, high, size=count): uniform in [low, high). high > low.
  std::vector<int64_t> RandInt(int64_t low, int64_t high, size_t count);
  double RandomSample() { return mt_.NextDouble(); }
  // np.random.exponential(scale): scale * -log(1 - random_sample()).
  double Exponential(double scale);

 private:
  uint64_t NextUint64();
  Mt19937 mt_;
};

class PythonRandom {
 public:
  // random.seed(seed) for a non-negative integer seed.
  explicit PythonRandom(uint64_t seed);

  double Random() { return mt_.NextDouble(); }
  // random.getrandbits(k) for 0 < k <= 32.
  uint32_t GetRandBits(int k);
  // random._randbelow(n) for 0 < n < 2^32: getrandbits(n.bit_length()) until below n.
  uint32_t RandBelow(uint32_t n);
  // random.shuffle(items): Fisher-Yates from the back.
  template <typename T>
  void Shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i-- > 1;) {
      const size_t j = RandBelow(static_cast<uint32_t>(i + 1));
      std::swap(items[i], items[j]);
    }
  }
  // random.choices(population, k=count) without weights: population[floor(random() * n)].
  template <typename T>
  std::vector<T> Choices(const std::vector<T>& population, size_t count) {
    std::vector<T> picked;
    picked.reserve(count);
    const auto n = static_cast<double>(population.size());
    for (size_t i = 0; i < count; ++i) {
      picked.push_back(population[static_cast<size_t>(Random() * n)]);
    }
    return picked;
  }

 private:
  Mt19937 mt_;
};

// bench_serving's two generators after `random.seed(seed); np.random.seed(seed)`.
struct BenchRandom {
  explicit BenchRandom(uint32_t seed) : numpy(seed), python(seed) {}
  NumpyRandomState numpy;
  PythonRandom python;
};

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_UPSTREAM_RANDOM_H_
