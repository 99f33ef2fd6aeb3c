// Retry schedule and bootstrap rooms for the dispatcher: how long to wait before the n-th retry of
// a request (exponential backoff with a cap and random jitter, as sglang_router's --retry-* flags),
// and the random 63-bit room that names one KV handoff. Pure functions plus a thread-safe random
// source; no I/O.
#ifndef TANDEM_ROUTER_RETRY_H_
#define TANDEM_ROUTER_RETRY_H_

#include <cstdint>

#include "absl/time/time.h"

namespace tandem::router {

struct BackoffOptions {
  int max_retries = 5;  // retries after the first attempt; 0 = never retry
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Milliseconds(30000);
  double multiplier = 1.5;     // >= 1
  double jitter_factor = 0.2;  // in [0, 1]: each delay is scaled by 1 + u*jitter, u in [-1, 1]
};

// The delay before retry number `retry` (1 = the first retry) for a given jitter draw `u` in
// [-1, 1] (clamped): min(initial * multiplier^(retry-1), max) * (1 + u * jitter_factor), never
// negative. Deterministic, for tests and for BackoffDelay.
absl::Duration BackoffDelayFor(const BackoffOptions& options, int retry, double u);

// BackoffDelayFor with u drawn uniformly from [-1, 1]. Thread-safe.
absl::Duration BackoffDelay(const BackoffOptions& options, int retry);

// A room from 64 random bits: the low 63 bits, and never 0 (workers treat 0 as "no room").
uint64_t RoomFromBits(uint64_t bits);
// A new random room in [1, 2^63). Thread-safe.
uint64_t NewBootstrapRoom();

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_RETRY_H_
