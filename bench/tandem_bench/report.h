// The "Serving Benchmark Result" table, character for character as the current
// `python -m sglang.bench_serving` prints it (rows "{:<40} {:<10}", section rules 50 wide), and
// the JSON record --output-file appends per run. Pure functions; thread-compatible.
#ifndef TANDEM_BENCH_TANDEM_BENCH_REPORT_H_
#define TANDEM_BENCH_TANDEM_BENCH_REPORT_H_

#include <string>

#include "bench/tandem_bench/metrics.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

// What the run was asked to do, as echoed in the table and the JSON record.
struct RunDescription {
  std::string backend = "sglang";
  double request_rate = 0.0;  // requests/s; +inf sends everything at once
  int max_concurrency = 0;    // 0: not set
  std::string dataset_name = "random";
  int num_prompts = 0;
  int random_input_len = 0;
  int random_output_len = 0;
  double random_range_ratio = 0.0;
};

// The table, starting with a newline (as bench_serving's print does) and ending with the
// closing rule and a newline.
std::string FormatResultTable(const RunDescription& run, const BenchmarkMetrics& metrics);

// One JSON object with the run's arguments and every metric (bench_serving's result keys plus
// p90_e2e_latency_ms, max_output_tokens_per_s and max_concurrent_requests). An infinite
// request rate is written as the string "inf" (JSON has no infinity).
nlohmann::json ResultRecord(const RunDescription& run, const BenchmarkMetrics& metrics);

// A float as Python's str() prints it for the values a rate takes: "inf", "2.0", "0.5", "1.25".
std::string PythonFloat(double value);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_REPORT_H_
