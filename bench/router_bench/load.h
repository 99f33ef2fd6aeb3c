// Closed-loop load for router_bench: `concurrency` threads, each with one keep-alive connection,
// send requests back to back until `requests` (in total) have been sent; per-request latency is
// recorded. Connections are spread round robin over `ports`. The whole phase is bounded by
// `timeout`: connections still blocked then are shut down and their requests count as errors.
// Thread-safe to call from one thread at a time (each call owns its threads).
#ifndef TANDEM_BENCH_ROUTER_BENCH_LOAD_H_
#define TANDEM_BENCH_ROUTER_BENCH_LOAD_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

struct LoadResult {
  int64_t ok = 0;
  int64_t errors = 0;  // transport errors, timeouts and non-200 answers
  std::string first_error;
  double wall_s = 0;
  double rps = 0;  // ok / wall_s
  double p50_s = 0;
  double p99_s = 0;
  double mean_s = 0;
  std::string last_body;  // with keep_last_body
};

// POST /generate with a JSON body over HTTP/1.1 keep-alive.
struct LoadSpec {
  std::vector<int> ports;  // 127.0.0.1
  std::string body;
  int requests = 1;
  int concurrency = 1;
  std::chrono::seconds timeout{60};
  bool keep_last_body = false;
};
LoadResult RunHttpLoad(const LoadSpec& spec);

// proto::Worker Decode (non-streaming, colocated) over one gRPC channel per connection.
struct GrpcLoadSpec {
  std::vector<int> ports;
  int prompt_len = 32;
  int tokens = 4;
  int requests = 1;
  int concurrency = 1;
  std::chrono::seconds timeout{60};
};
LoadResult RunGrpcDecodeLoad(const GrpcLoadSpec& spec);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_ROUTER_BENCH_LOAD_H_
