#include "router/retry.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace tandem::router {
namespace {

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng([] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }());
  return rng;
}

}  // namespace

absl::Duration BackoffDelayFor(const BackoffOptions& options, int retry, double u) {
  if (retry < 1) retry = 1;
  u = std::clamp(u, -1.0, 1.0);
  const double cap = std::max(0.0, absl::ToDoubleMilliseconds(options.max_backoff));
  double base = std::max(0.0, absl::ToDoubleMilliseconds(options.initial_backoff)) *
                std::pow(std::max(1.0, options.multiplier), retry - 1);
  if (!std::isfinite(base) || base > cap) base = cap;
  const double jitter = std::clamp(options.jitter_factor, 0.0, 1.0);
  const double ms = std::max(0.0, base * (1.0 + u * jitter));
  return absl::Microseconds(static_cast<int64_t>(ms * 1000.0));
}

absl::Duration BackoffDelay(const BackoffOptions& options, int retry) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  return BackoffDelayFor(options, retry, dist(Rng()));
}

uint64_t RoomFromBits(uint64_t bits) {
  const uint64_t room = bits & ((uint64_t{1} << 63) - 1);
  return room == 0 ? 1 : room;
}

uint64_t NewBootstrapRoom() { return RoomFromBits(Rng()()); }

}  // namespace tandem::router
