#include "engine/request_seeds.h"

namespace tandem::engine {
namespace {

uint64_t DeviceSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

RequestSeeds::RequestSeeds(std::optional<uint64_t> seed) : rng_(seed ? *seed : DeviceSeed()) {}

uint64_t RequestSeeds::Next() {
  absl::MutexLock lock(&mu_);
  return rng_();
}

}  // namespace tandem::engine
