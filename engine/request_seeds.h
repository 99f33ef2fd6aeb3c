// The sampling seeds of requests that carry none (SGLang's --random-seed). Seeded, the k-th
// seed drawn is the same in every process started with that seed, so a worker restarted with it
// and given the same requests in the same order samples the same tokens; unseeded, each process
// draws from std::random_device. A request with its own `seed` never draws from here.
//
// Thread-safe: draws are serialised, so concurrent requests get distinct positions of the
// sequence (which one gets which follows their arrival order).
#ifndef TANDEM_ENGINE_REQUEST_SEEDS_H_
#define TANDEM_ENGINE_REQUEST_SEEDS_H_

#include <cstdint>
#include <optional>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::engine {

class RequestSeeds {
 public:
  // `seed`: the sequence's seed; none: one from std::random_device.
  explicit RequestSeeds(std::optional<uint64_t> seed = std::nullopt);
  RequestSeeds(const RequestSeeds&) = delete;
  RequestSeeds& operator=(const RequestSeeds&) = delete;

  // The next seed of the sequence.
  uint64_t Next();

 private:
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_REQUEST_SEEDS_H_
