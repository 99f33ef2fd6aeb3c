// What one benchmark request measured, and the run's metrics computed from all of them, with the
// definitions of `python -m sglang.bench_serving`:
//   TTFT        time from sending the request to the first SSE event with new content;
//   ITL         times between content events (an event carrying k > 1 new tokens counts as k
//               gaps of 1/k each, as bench_serving does for the SGLang backend);
//   E2E         time from sending to the last event;
//   TPOT        (E2E - TTFT) / (output_len - 1), for requests with more than one output token;
//   concurrency sum of E2E latencies / benchmark duration;
//   peak output throughput  the most output tokens timed in one 1-second bucket of the run
//               (first token at start + TTFT, then each ITL after it);
//   peak concurrent requests the most requests active in one 1-second bucket (a request counts
//               in every bucket from its start's to its end's, inclusive).
// Percentiles interpolate linearly between order statistics (numpy's default). Empty sets give 0.
// Value types and pure functions; thread-compatible.
#ifndef TANDEM_BENCH_TANDEM_BENCH_METRICS_H_
#define TANDEM_BENCH_TANDEM_BENCH_METRICS_H_

#include <functional>
#include <string>
#include <vector>

namespace tandem::bench {

struct RequestOutput {
  bool success = false;
  std::string error;           // why it failed (empty on success)
  std::string generated_text;  // the whole text received
  int prompt_len = 0;          // tokens, from the dataset
  int output_len = 0;          // tokens the server reported (or the text re-tokenized)
  double start_s = 0.0;        // when it was sent, seconds since the benchmark started
  double ttft_s = 0.0;
  double latency_s = 0.0;     // E2E
  std::vector<double> itl_s;  // inter-token latencies
};

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  long long total_input = 0;
  long long total_output = 0;
  long long total_output_retokenized = 0;
  double duration_s = 0.0;
  double request_throughput = 0.0;
  double input_throughput = 0.0;
  double output_throughput = 0.0;
  double total_throughput = 0.0;
  double max_output_tokens_per_s = 0.0;
  int max_concurrent_requests = 0;
  double concurrency = 0.0;
  double mean_e2e_latency_ms = 0.0, median_e2e_latency_ms = 0.0, std_e2e_latency_ms = 0.0;
  double p90_e2e_latency_ms = 0.0, p99_e2e_latency_ms = 0.0;
  double mean_ttft_ms = 0.0, median_ttft_ms = 0.0, std_ttft_ms = 0.0, p99_ttft_ms = 0.0;
  double mean_tpot_ms = 0.0, median_tpot_ms = 0.0, std_tpot_ms = 0.0, p99_tpot_ms = 0.0;
  double mean_itl_ms = 0.0, median_itl_ms = 0.0, std_itl_ms = 0.0;
  double p95_itl_ms = 0.0, p99_itl_ms = 0.0, max_itl_ms = 0.0;
};

// Counts tokens of generated text (the "retokenized" total).
using TokenCounter = std::function<int(const std::string& text)>;

// `duration_s` is the wall time of the whole run (first send to last answer).
BenchmarkMetrics ComputeMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                const TokenCounter& count_tokens);

// Per 1-second bucket of the run (bucket k covers [k, k+1) s after the earliest start among
// successful requests): output tokens timed in it and requests active in it. Empty when no
// request succeeded. ComputeMetrics' peaks are the maxima of these.
struct Timeline {
  std::vector<double> output_tokens;
  std::vector<int> running_requests;
};
Timeline ComputeTimeline(const std::vector<RequestOutput>& outputs);

// Goodput under service-level objectives (no bench_serving counterpart): a request is good when
// it succeeded, its TTFT is at most `ttft_ms` and the 99th percentile of its own inter-token
// latencies (Percentile below; a request with no ITL meets it) is at most `itl_p99_ms`. A bound
// of 0 or less is not checked. Goodput is good requests per second of the run (`duration_s`);
// the fraction is good requests over all requests sent (failed ones count as not good).
struct GoodputSlo {
  double ttft_ms = 0.0;
  double itl_p99_ms = 0.0;
};
struct Goodput {
  int good = 0;
  double request_throughput = 0.0;  // good requests / duration_s (0 when duration_s <= 0)
  double fraction = 0.0;            // good / outputs.size() (0 for no request)
};
Goodput ComputeGoodput(const std::vector<RequestOutput>& outputs, double duration_s,
                       const GoodputSlo& slo);

// numpy.percentile(values, q) with linear interpolation; 0 for an empty set.
double Percentile(std::vector<double> values, double q);
double Mean(const std::vector<double>& values);
double StdDev(const std::vector<double>& values);  // population (numpy.std)

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_METRICS_H_
