#include "bench/tandem_bench/report.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::bench {
namespace {

constexpr int kWidth = 50;

// Python's "{s:{c}^{n}}".format: centred, the extra fill character (odd padding) on the right.
std::string Centered(const std::string& text, char fill) {
  if (static_cast<int>(text.size()) >= kWidth) return text;
  const int pad = kWidth - static_cast<int>(text.size());
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill);
}

std::string Row(const std::string& name, const std::string& value) {
  return absl::StrFormat("%-40s %-10s\n", name, value);
}
std::string Row(const std::string& name, long long value) {
  return absl::StrFormat("%-40s %-10d\n", name, value);
}
std::string Row2f(const std::string& name, double value) {
  return absl::StrFormat("%-40s %-10.2f\n", name, value);
}

}  // namespace

std::string PythonFloat(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  if (value == std::floor(value) && std::fabs(value) < 1e16) {
    return absl::StrFormat("%.1f", value);
  }
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest round-trip
  return std::string(buffer, end);
}

std::string FormatResultTable(const RunDescription& run, const BenchmarkMetrics& m) {
  std::string out = absl::StrCat("\n", Centered(" Serving Benchmark Result ", '='), "\n");
  out += Row("Backend:", run.backend);
  out += Row("Traffic request rate:", PythonFloat(run.request_rate));
  out += run.max_concurrency > 0 ? Row("Max request concurrency:", run.max_concurrency)
                                 : Row("Max request concurrency:", "not set");
  out += Row("Successful requests:", m.completed);
  out += Row2f("Benchmark duration (s):", m.duration_s);
  out += Row("Total input tokens:", m.total_input);
  out += Row("Total input text tokens:", m.total_input);
  out += Row("Total generated tokens:", m.total_output);
  out += Row("Total generated tokens (retokenized):", m.total_output_retokenized);
  out += Row2f("Request throughput (req/s):", m.request_throughput);
  out += Row2f("Input token throughput (tok/s):", m.input_throughput);
  out += Row2f("Output token throughput (tok/s):", m.output_throughput);
  out += Row2f("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += Row("Peak concurrent requests:", m.max_concurrent_requests);
  out += Row2f("Total token throughput (tok/s):", m.total_throughput);
  out += Row2f("Concurrency:", m.concurrency);
  out += Centered("End-to-End Latency", '-') + "\n";
  out += Row2f("Mean E2E Latency (ms):", m.mean_e2e_latency_ms);
  out += Row2f("Median E2E Latency (ms):", m.median_e2e_latency_ms);
  out += Row2f("P90 E2E Latency (ms):", m.p90_e2e_latency_ms);
  out += Row2f("P99 E2E Latency (ms):", m.p99_e2e_latency_ms);
  out += Centered("Time to First Token", '-') + "\n";
  out += Row2f("Mean TTFT (ms):", m.mean_ttft_ms);
  out += Row2f("Median TTFT (ms):", m.median_ttft_ms);
  out += Row2f("P99 TTFT (ms):", m.p99_ttft_ms);
  out += Centered("Time per Output Token (excl. 1st token)", '-') + "\n";
  out += Row2f("Mean TPOT (ms):", m.mean_tpot_ms);
  out += Row2f("Median TPOT (ms):", m.median_tpot_ms);
  out += Row2f("P99 TPOT (ms):", m.p99_tpot_ms);
  out += Centered("Inter-Token Latency", '-') + "\n";
  out += Row2f("Mean ITL (ms):", m.mean_itl_ms);
  out += Row2f("Median ITL (ms):", m.median_itl_ms);
  out += Row2f("P95 ITL (ms):", m.p95_itl_ms);
  out += Row2f("P99 ITL (ms):", m.p99_itl_ms);
  out += Row2f("Max ITL (ms):", m.max_itl_ms);
  out += std::string(kWidth, '=') + "\n";
  return out;
}

nlohmann::json ResultRecord(const RunDescription& run, const BenchmarkMetrics& m) {
  nlohmann::json record;
  record["backend"] = run.backend;
  record["dataset_name"] = run.dataset_name;
  if (std::isinf(run.request_rate)) {
    record["request_rate"] = "inf";
  } else {
    record["request_rate"] = run.request_rate;
  }
  record["max_concurrency"] =
      run.max_concurrency > 0 ? nlohmann::json(run.max_concurrency) : nlohmann::json(nullptr);
  record["num_prompts"] = run.num_prompts;
  record["random_input_len"] = run.random_input_len;
  record["random_output_len"] = run.random_output_len;
  record["random_range_ratio"] = run.random_range_ratio;
  record["duration"] = m.duration_s;
  record["completed"] = m.completed;
  record["failed"] = m.failed;
  record["total_input_tokens"] = m.total_input;
  record["total_output_tokens"] = m.total_output;
  record["total_output_tokens_retokenized"] = m.total_output_retokenized;
  record["request_throughput"] = m.request_throughput;
  record["input_throughput"] = m.input_throughput;
  record["output_throughput"] = m.output_throughput;
  record["total_throughput"] = m.total_throughput;
  record["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  record["max_concurrent_requests"] = m.max_concurrent_requests;
  record["concurrency"] = m.concurrency;
  record["mean_e2e_latency_ms"] = m.mean_e2e_latency_ms;
  record["median_e2e_latency_ms"] = m.median_e2e_latency_ms;
  record["std_e2e_latency_ms"] = m.std_e2e_latency_ms;
  record["p90_e2e_latency_ms"] = m.p90_e2e_latency_ms;
  record["p99_e2e_latency_ms"] = m.p99_e2e_latency_ms;
  record["mean_ttft_ms"] = m.mean_ttft_ms;
  record["median_ttft_ms"] = m.median_ttft_ms;
  record["std_ttft_ms"] = m.std_ttft_ms;
  record["p99_ttft_ms"] = m.p99_ttft_ms;
  record["mean_tpot_ms"] = m.mean_tpot_ms;
  record["median_tpot_ms"] = m.median_tpot_ms;
  record["std_tpot_ms"] = m.std_tpot_ms;
  record["p99_tpot_ms"] = m.p99_tpot_ms;
  record["mean_itl_ms"] = m.mean_itl_ms;
  record["median_itl_ms"] = m.median_itl_ms;
  record["std_itl_ms"] = m.std_itl_ms;
  record["p95_itl_ms"] = m.p95_itl_ms;
  record["p99_itl_ms"] = m.p99_itl_ms;
  record["max_itl_ms"] = m.max_itl_ms;
  return record;
}

}  // namespace tandem::bench
