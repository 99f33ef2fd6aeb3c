#include "bench/tandem_bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem::bench {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = (q / 100.0) * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return values[lower] + (values[upper] - values[lower]) * fraction;
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double StdDev(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const double mean = Mean(values);
  double sum = 0.0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size()));
}

Goodput ComputeGoodput(const std::vector<RequestOutput>& outputs, double duration_s,
                       const GoodputSlo& slo) {
  constexpr double kMs = 1000.0;
  Goodput result;
  for (const auto& out : outputs) {
    if (!out.success) continue;
    if (slo.ttft_ms > 0 && out.ttft_s * kMs > slo.ttft_ms) continue;
    if (slo.itl_p99_ms > 0 && Percentile(out.itl_s, 99) * kMs > slo.itl_p99_ms) continue;
    ++result.good;
  }
  if (duration_s > 0) result.request_throughput = result.good / duration_s;
  if (!outputs.empty()) result.fraction = static_cast<double>(result.good) / outputs.size();
  return result;
}

Timeline ComputeTimeline(const std::vector<RequestOutput>& outputs) {
  Timeline timeline;
  double first_start = 0.0, last_end = 0.0;
  bool any = false;
  for (const auto& out : outputs) {
    if (!out.success) continue;
    if (!any || out.start_s < first_start) first_start = out.start_s;
    if (!any || out.start_s + out.latency_s > last_end) last_end = out.start_s + out.latency_s;
    any = true;
  }
  if (!any) return timeline;
  const auto buckets = static_cast<size_t>(std::ceil(last_end - first_start)) + 1;
  timeline.output_tokens.assign(buckets, 0.0);
  timeline.running_requests.assign(buckets, 0);
  auto bucket_of = [&](double t) {
    return static_cast<size_t>(std::max(0.0, std::floor(t - first_start)));
  };
  for (const auto& out : outputs) {
    if (!out.success) continue;
    // Token times as bench_serving counts them: one at TTFT, then one after each inter-token
    // latency (a non-streamed answer or an empty one counts one token).
    double t = out.start_s + out.ttft_s;
    if (size_t b = bucket_of(t); b < buckets) timeline.output_tokens[b] += 1;
    for (double gap : out.itl_s) {
      t += gap;
      if (size_t b = bucket_of(t); b < buckets) timeline.output_tokens[b] += 1;
    }
    const size_t first = bucket_of(out.start_s);
    const size_t last = std::min(bucket_of(out.start_s + out.latency_s), buckets - 1);
    for (size_t b = first; b <= last; ++b) timeline.running_requests[b] += 1;
  }
  return timeline;
}

BenchmarkMetrics ComputeMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                const TokenCounter& count_tokens) {
  BenchmarkMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2es;
  for (const auto& out : outputs) {
    if (!out.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += out.prompt_len;
    m.total_output += out.output_len;
    m.total_output_retokenized += count_tokens ? count_tokens(out.generated_text) : 0;
    if (out.output_len > 1) {
      tpots.push_back((out.latency_s - out.ttft_s) / (out.output_len - 1));
    }
    itls.insert(itls.end(), out.itl_s.begin(), out.itl_s.end());
    ttfts.push_back(out.ttft_s);
    e2es.push_back(out.latency_s);
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.input_throughput = static_cast<double>(m.total_input) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
    m.concurrency = std::accumulate(e2es.begin(), e2es.end(), 0.0) / duration_s;
  }
  constexpr double kMs = 1000.0;
  m.mean_e2e_latency_ms = Mean(e2es) * kMs;
  m.median_e2e_latency_ms = Percentile(e2es, 50) * kMs;
  m.std_e2e_latency_ms = StdDev(e2es) * kMs;
  m.p90_e2e_latency_ms = Percentile(e2es, 90) * kMs;
  m.p99_e2e_latency_ms = Percentile(e2es, 99) * kMs;
  m.mean_ttft_ms = Mean(ttfts) * kMs;
  m.median_ttft_ms = Percentile(ttfts, 50) * kMs;
  m.std_ttft_ms = StdDev(ttfts) * kMs;
  m.p99_ttft_ms = Percentile(ttfts, 99) * kMs;
  m.mean_tpot_ms = Mean(tpots) * kMs;
  m.median_tpot_ms = Percentile(tpots, 50) * kMs;
  m.std_tpot_ms = StdDev(tpots) * kMs;
  m.p99_tpot_ms = Percentile(tpots, 99) * kMs;
  m.mean_itl_ms = Mean(itls) * kMs;
  m.median_itl_ms = Percentile(itls, 50) * kMs;
  m.std_itl_ms = StdDev(itls) * kMs;
  m.p95_itl_ms = Percentile(itls, 95) * kMs;
  m.p99_itl_ms = Percentile(itls, 99) * kMs;
  m.max_itl_ms = itls.empty() ? 0.0 : *std::max_element(itls.begin(), itls.end()) * kMs;

  Timeline timeline = ComputeTimeline(outputs);
  if (!timeline.output_tokens.empty()) {
    m.max_output_tokens_per_s =
        *std::max_element(timeline.output_tokens.begin(), timeline.output_tokens.end());
    m.max_concurrent_requests =
        *std::max_element(timeline.running_requests.begin(), timeline.running_requests.end());
  }
  return m;
}

}  // namespace tandem::bench
