// Metric definitions on a hand-checked set of timestamps (see bench/tandem_bench/metrics.h).
#include "bench/tandem_bench/metrics.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

constexpr double kEps = 1e-9;

RequestOutput Ok(double start, double ttft, std::vector<double> itl, double latency, int out_len,
                 int prompt_len, std::string text) {
  RequestOutput out;
  out.success = true;
  out.start_s = start;
  out.ttft_s = ttft;
  out.itl_s = std::move(itl);
  out.latency_s = latency;
  out.output_len = out_len;
  out.prompt_len = prompt_len;
  out.generated_text = std::move(text);
  return out;
}

// A: sent at 0.0, tokens at 0.10, 0.15, 0.20, 0.30; done at 0.30.
// B: sent at 0.8, tokens at 1.00, 1.20; done at 1.20.
// C: failed (ignored everywhere but the failure count).
std::vector<RequestOutput> Sample() {
  RequestOutput failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 99;
  return {Ok(0.0, 0.1, {0.05, 0.05, 0.1}, 0.3, 4, 10, "abcd"), Ok(0.8, 0.2, {0.2}, 0.4, 2, 6, "xy"),
          failed};
}

int CountChars(const std::string& text) { return static_cast<int>(text.size()); }

TEST(MetricsTest, HandCheckedFigures) {
  BenchmarkMetrics m = ComputeMetrics(Sample(), 1.5, CountChars);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 16);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_EQ(m.total_output_retokenized, 6);
  EXPECT_NEAR(m.request_throughput, 2 / 1.5, kEps);
  EXPECT_NEAR(m.input_throughput, 16 / 1.5, kEps);
  EXPECT_NEAR(m.output_throughput, 6 / 1.5, kEps);
  EXPECT_NEAR(m.total_throughput, 22 / 1.5, kEps);
  EXPECT_NEAR(m.concurrency, 0.7 / 1.5, kEps);  // (0.3 + 0.4) s of latency over 1.5 s

  EXPECT_NEAR(m.mean_e2e_latency_ms, 350, 1e-6);
  EXPECT_NEAR(m.median_e2e_latency_ms, 350, 1e-6);
  EXPECT_NEAR(m.p90_e2e_latency_ms, 390, 1e-6);
  EXPECT_NEAR(m.p99_e2e_latency_ms, 399, 1e-6);
  EXPECT_NEAR(m.std_e2e_latency_ms, 50, 1e-6);

  EXPECT_NEAR(m.mean_ttft_ms, 150, 1e-6);
  EXPECT_NEAR(m.median_ttft_ms, 150, 1e-6);
  EXPECT_NEAR(m.p99_ttft_ms, 199, 1e-6);

  // TPOT: A (300-100)/3 = 66.667 ms, B (400-200)/1 = 200 ms.
  EXPECT_NEAR(m.mean_tpot_ms, (200.0 / 3 + 200) / 2, 1e-6);
  EXPECT_NEAR(m.median_tpot_ms, (200.0 / 3 + 200) / 2, 1e-6);
  EXPECT_NEAR(m.p99_tpot_ms, 200.0 / 3 + 0.99 * (200 - 200.0 / 3), 1e-6);

  // ITLs sorted: 50, 50, 100, 200 ms.
  EXPECT_NEAR(m.mean_itl_ms, 100, 1e-6);
  EXPECT_NEAR(m.median_itl_ms, 75, 1e-6);
  EXPECT_NEAR(m.p95_itl_ms, 185, 1e-6);  // rank 2.85: 100 + 0.85 * 100
  EXPECT_NEAR(m.p99_itl_ms, 197, 1e-6);
  EXPECT_NEAR(m.max_itl_ms, 200, 1e-6);

  // Second 0: A's 4 tokens, A and B running; second 1: B's 2 tokens, B running.
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 4);
  EXPECT_EQ(m.max_concurrent_requests, 2);
}

TEST(MetricsTest, TimelineBuckets) {
  Timeline t = ComputeTimeline(Sample());
  ASSERT_EQ(t.output_tokens.size(), 3u);  // ceil(1.2 - 0) + 1
  EXPECT_EQ(t.output_tokens, (std::vector<double>{4, 2, 0}));
  EXPECT_EQ(t.running_requests, (std::vector<int>{2, 1, 0}));
}

// bench_serving counts a request in every 1-second bucket it touches, so one request ending and
// the next starting within the same second both count: with concurrency 1 the peak reads 2.
// That is why the seeds show "Peak concurrent requests" at twice --max-concurrency.
TEST(MetricsTest, PeakConcurrencyCountsBucketsNotInstants) {
  std::vector<RequestOutput> outputs = {Ok(0.0, 0.5, {}, 2.5, 1, 1, "a"),
                                        Ok(2.6, 0.5, {}, 1.4, 1, 1, "b")};
  BenchmarkMetrics m = ComputeMetrics(outputs, 4.0, CountChars);
  EXPECT_EQ(m.max_concurrent_requests, 2);
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 1);
}

// bench_serving times one token at TTFT and one per inter-token gap: a non-streamed answer
// counts one token in the peak, however long it is.
TEST(MetricsTest, NonStreamedAnswerCountsOneTokenAtTheAnswer) {
  std::vector<RequestOutput> outputs = {Ok(0.0, 1.5, {}, 1.5, 7, 3, "1234567")};
  Timeline t = ComputeTimeline(outputs);
  EXPECT_EQ(t.output_tokens, (std::vector<double>{0, 1, 0}));
}

TEST(MetricsTest, NothingSucceeded) {
  RequestOutput failed;
  failed.error = "refused";
  BenchmarkMetrics m = ComputeMetrics({failed, failed}, 2.0, CountChars);
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.mean_ttft_ms, 0);
  EXPECT_EQ(m.p99_itl_ms, 0);
  EXPECT_EQ(m.max_concurrent_requests, 0);
  EXPECT_TRUE(ComputeTimeline({failed}).output_tokens.empty());
}

TEST(MetricsTest, PercentileMatchesNumpyLinear) {
  // numpy.percentile([1, 2, 3, 4, 10], q): 50 -> 3, 90 -> 7.6, 99 -> 9.76, 0 -> 1, 100 -> 10.
  std::vector<double> v = {10, 3, 1, 4, 2};
  EXPECT_NEAR(Percentile(v, 50), 3, kEps);
  EXPECT_NEAR(Percentile(v, 90), 7.6, kEps);
  EXPECT_NEAR(Percentile(v, 99), 9.76, kEps);
  EXPECT_NEAR(Percentile(v, 0), 1, kEps);
  EXPECT_NEAR(Percentile(v, 100), 10, kEps);
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_NEAR(Percentile({5}, 99), 5, kEps);
}

TEST(MetricsTest, GoodputCountsRequestsMeetingBothSlos) {
  // p99 of {0.01 x 99, 0.5}: 0.01 + (0.5 - 0.01) * 0.01 = 0.0149 s, so one stall in 100 gaps
  // passes a 20 ms bound; two stalls do not (p99 interpolates between two 0.5 s gaps).
  std::vector<double> smooth(100, 0.01), one_stall(99, 0.01), two_stalls(98, 0.01);
  one_stall.push_back(0.5);
  two_stalls.push_back(0.5);
  two_stalls.push_back(0.5);
  RequestOutput failed;
  failed.error = "HTTP 503";
  const std::vector<RequestOutput> outputs = {
      Ok(0, 0.2, smooth, 1.2, 101, 8, "a"),      // good
      Ok(0, 0.2, one_stall, 1.7, 101, 8, "b"),   // good: per-request p99 14.9 ms
      Ok(0, 0.2, two_stalls, 2.2, 101, 8, "c"),  // ITL p99 500 ms: not good
      Ok(0, 0.9, smooth, 1.9, 101, 8, "d"),      // TTFT 900 ms: not good
      Ok(0, 0.1, {}, 0.1, 1, 8, "e"),            // no ITL: meets the ITL bound
      failed};
  const Goodput g = ComputeGoodput(outputs, 4.0, {500.0, 20.0});
  EXPECT_EQ(g.good, 3);
  EXPECT_NEAR(g.request_throughput, 0.75, kEps);
  EXPECT_NEAR(g.fraction, 3.0 / 6.0, kEps);

  // A bound of 0 is not checked.
  EXPECT_EQ(ComputeGoodput(outputs, 4.0, {0.0, 20.0}).good, 4);
  EXPECT_EQ(ComputeGoodput(outputs, 4.0, {500.0, 0.0}).good, 4);
  EXPECT_EQ(ComputeGoodput(outputs, 4.0, {}).good, 5);
  // The bounds are inclusive.
  EXPECT_EQ(ComputeGoodput(outputs, 4.0, {900.0, 0.0}).good, 5);
  // No duration, no requests.
  EXPECT_EQ(ComputeGoodput(outputs, 0.0, {}).request_throughput, 0);
  EXPECT_EQ(ComputeGoodput({}, 1.0, {}).fraction, 0);
}

}  // namespace
}  // namespace tandem::bench
