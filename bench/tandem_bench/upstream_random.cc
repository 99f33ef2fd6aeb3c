#include "bench/tandem_bench/upstream_random.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace tandem::bench {
namespace {

constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;

// The smallest all-ones mask covering `max` (numpy's gen_mask).
uint64_t GenMask(uint64_t max) {
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  return mask;
}

}  // namespace

void Mt19937::InitGenrand(uint32_t seed) {
  mt_[0] = seed;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  index_ = kN;
}

void Mt19937::InitByArray(const std::vector<uint32_t>& key) {
  InitGenrand(19650218U);
  int i = 1;
  size_t j = 0;
  const size_t key_length = key.empty() ? 1 : key.size();
  for (size_t k = std::max<size_t>(kN, key_length); k > 0; --k) {
    const uint32_t word = key.empty() ? 0 : key[j];
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + word + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;  // non-zero initial array
  index_ = kN;
}

uint32_t Mt19937::NextUint32() {
  if (index_ >= kN) {
    if (index_ == kN + 1) InitGenrand(5489U);  // as mt19937ar.c when never seeded
    int k = 0;
    for (; k < kN - 397; ++k) {
      const uint32_t y = (mt_[k] & kUpperMask) | (mt_[k + 1] & kLowerMask);
      mt_[k] = mt_[k + 397] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    for (; k < kN - 1; ++k) {
      const uint32_t y = (mt_[k] & kUpperMask) | (mt_[k + 1] & kLowerMask);
      mt_[k] = mt_[k + (397 - kN)] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    const uint32_t y = (mt_[kN - 1] & kUpperMask) | (mt_[0] & kLowerMask);
    mt_[kN - 1] = mt_[396] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

double Mt19937::NextDouble() {
  const uint32_t a = NextUint32() >> 5;
  const uint32_t b = NextUint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t NumpyRandomState::NextUint64() {
  const uint64_t high = mt_.NextUint32();
  return (high << 32) | mt_.NextUint32();
}

std::vector<int64_t> NumpyRandomState::RandInt(int64_t low, int64_t high, size_t count) {
  // numpy: rng = (high - 1) - low, then random_bounded_uint64_fill with use_masked=true.
  const uint64_t rng = static_cast<uint64_t>(high - 1) - static_cast<uint64_t>(low);
  std::vector<int64_t> out(count, low);
  if (rng == 0) return out;
  const uint64_t mask = GenMask(rng);
  for (auto& value : out) {
    uint64_t drawn;
    if (rng <= 0xFFFFFFFFULL) {
      if (rng == 0xFFFFFFFFULL) {
        drawn = mt_.NextUint32();
      } else {
        do {
          drawn = mt_.NextUint32() & mask;
        } while (drawn > rng);
      }
    } else if (rng == ~0ULL) {
      drawn = NextUint64();
    } else {
      do {
        drawn = NextUint64() & mask;
      } while (drawn > rng);
    }
    value = static_cast<int64_t>(static_cast<uint64_t>(low) + drawn);
  }
  return out;
}

double NumpyRandomState::Exponential(double scale) {
  return scale * -std::log(1.0 - mt_.NextDouble());
}

PythonRandom::PythonRandom(uint64_t seed) {
  std::vector<uint32_t> key;
  for (uint64_t rest = seed; rest != 0; rest >>= 32) {
    key.push_back(static_cast<uint32_t>(rest & 0xFFFFFFFFU));
  }
  if (key.empty()) key.push_back(0);
  mt_.InitByArray(key);
}

uint32_t PythonRandom::GetRandBits(int k) { return mt_.NextUint32() >> (32 - k); }

uint32_t PythonRandom::RandBelow(uint32_t n) {
  const int k = std::bit_width(n);
  uint32_t r = GetRandBits(k);
  while (r >= n) r = GetRandBits(k);
  return r;
}

}  // namespace tandem::bench
