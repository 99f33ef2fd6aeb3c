// Helpers shared by the kvtransfer tests: options, deterministic buffers, waiting.
#ifndef TANDEM_TESTS_KVTRANSFER_TEST_UTIL_H_
#define TANDEM_TESTS_KVTRANSFER_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvtransfer/transfer_engine.h"

namespace tandem::kv::testing {

inline CompatibilityRecord TestCompat() {
  CompatibilityRecord c;
  c.model_id = "qwen2.5-0.5b";
  c.layer_count = 24;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.dtype = "bf16";
  c.block_size = 16;
  c.layout = "layer/kv/block/head/dim";
  return c;
}

inline EngineOptions TestOptions(const std::string& name,
                                 const std::string& secret = "0123456789abcdef-secret") {
  EngineOptions o;
  o.name = name;
  o.cluster_secret = secret;
  o.compat = TestCompat();
  o.listen_host = "127.0.0.1";
  o.lanes = 2;
  o.slice_bytes = 256 * 1024;
  o.heartbeat_interval = absl::Milliseconds(200);
  return o;
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) v[i + j] = static_cast<uint8_t>(x >> (8 * j));
  }
  return v;
}

// Random non-overlapping ops: cuts [0, size) into pieces and maps each to a random place.
inline std::vector<WriteOp> RandomOps(std::mt19937_64& rng, uint64_t size, int count,
                                      RegionId local, RegionId remote) {
  std::vector<WriteOp> ops;
  uint64_t piece = size / count;
  std::vector<uint64_t> dst(count);
  for (int i = 0; i < count; ++i) dst[i] = i * piece;
  std::shuffle(dst.begin(), dst.end(), rng);
  for (int i = 0; i < count; ++i) {
    uint64_t len = 1 + rng() % piece;
    ops.push_back(WriteOp{local, i * piece, remote, dst[i], len});
  }
  return ops;
}

inline uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace tandem::kv::testing

#endif  // TANDEM_TESTS_KVTRANSFER_TEST_UTIL_H_
