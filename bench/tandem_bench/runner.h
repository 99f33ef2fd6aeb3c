// The request loop of tandem-bench: warm-up, then every dataset row sent at its arrival time
// (a Poisson process of the given rate, or all at once for an infinite rate) by a bounded pool
// of client threads, each running one blocking request at a time.
//
// Concurrency: the pool has max_concurrency threads (when set), so exactly that many requests
// are in flight while work is queued; otherwise one thread per request up to `max_threads`
// (a request that arrives while all are busy waits, and the table's peak shows it). As in
// bench_serving, a request's clock starts when a thread sends it, not when it arrived.
//
// Thread-safety: RunBenchmark is called from one thread and owns its pool; it returns after
// every request finished (or passed its deadline).
#ifndef TANDEM_BENCH_TANDEM_BENCH_RUNNER_H_
#define TANDEM_BENCH_TANDEM_BENCH_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/metrics.h"
#include "bench/tandem_bench/request.h"
#include "bench/tandem_bench/upstream_random.h"
#include "common/http_client.h"

namespace tandem::bench {

struct RunOptions {
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s, > 0
  int max_concurrency = 0;                                        // 0: not set
  int warmup_requests = 1;  // copies of the first row (output capped at 32 tokens), in parallel
  std::chrono::milliseconds settle_after_warmup{1000};  // pause before the timed run
  int max_threads = 2048;                          // pool bound when max_concurrency is not set
  std::chrono::seconds request_timeout{6 * 3600};  // per request, as bench_serving's session
  bool show_progress = false;                      // a progress bar on `progress`
  std::ostream* progress = nullptr;
  std::ostream* log = nullptr;  // warm-up messages; none when null
};

struct RunResult {
  std::vector<RequestOutput> outputs;  // in dataset order
  double duration_s = 0.0;             // first send to last answer
};

// Arrival times in seconds from the start: 0 for the first request, then gaps drawn as
// bench_serving draws them, np.random.exponential(1 / rate) after each request (all 0 for an
// infinite rate, with no draw). Deterministic for a given generator state.
std::vector<double> PoissonArrivals(int count, double rate, NumpyRandomState& numpy);

// Runs the warm-up, calls `after_warmup` (e.g. --flush-cache; may be empty), then the timed
// benchmark. FailedPrecondition when every warm-up request failed (with the first one's error);
// InvalidArgument for bad options or an empty dataset.
absl::StatusOr<RunResult> RunBenchmark(const HttpClient& client, const RequestSettings& settings,
                                       const std::vector<DatasetRow>& rows,
                                       const RunOptions& options,
                                       const std::function<void()>& after_warmup,
                                       NumpyRandomState& numpy);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_RUNNER_H_
