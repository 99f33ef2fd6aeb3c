// The result table against seed 004's (qwen2.5-0.5b, 200 prompts of 64/16, rate inf), as
// `python -m sglang.bench_serving` printed it, byte for byte.
#include "bench/tandem_bench/report.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

BenchmarkMetrics Seed004() {
  BenchmarkMetrics m;
  m.completed = 200;
  m.duration_s = 0.5943;
  m.total_input = 5661;
  m.total_output = 1653;
  m.total_output_retokenized = 1652;
  m.request_throughput = 336.53;
  m.input_throughput = 9525.46;
  m.output_throughput = 2781.41;
  m.max_output_tokens_per_s = 1653;
  m.max_concurrent_requests = 200;
  m.total_throughput = 12306.87;
  m.concurrency = 176.48;
  m.mean_e2e_latency_ms = 524.41;
  m.median_e2e_latency_ms = 522.8;
  m.p90_e2e_latency_ms = 553.42;
  m.p99_e2e_latency_ms = 564.21;
  m.mean_ttft_ms = 503.94;
  m.median_ttft_ms = 502.47;
  m.p99_ttft_ms = 537.43;
  m.mean_tpot_ms = 3.0;
  m.median_tpot_ms = 3.04;
  m.p99_tpot_ms = 6.16;
  m.mean_itl_ms = 2.82;
  m.median_itl_ms = 2.43;
  m.p95_itl_ms = 6.47;
  m.p99_itl_ms = 8.79;
  m.max_itl_ms = 17.57;
  return m;
}

TEST(ReportTest, TableMatchesSeed004ByteForByte) {
  RunDescription run;
  run.backend = "sglang";
  run.request_rate = std::numeric_limits<double>::infinity();
  run.max_concurrency = 0;
  const std::string expected =
      "\n"
      "============ Serving Benchmark Result ============\n"
      "Backend:                                 sglang    \n"
      "Traffic request rate:                    inf       \n"
      "Max request concurrency:                 not set   \n"
      "Successful requests:                     200       \n"
      "Benchmark duration (s):                  0.59      \n"
      "Total input tokens:                      5661      \n"
      "Total input text tokens:                 5661      \n"
      "Total generated tokens:                  1653      \n"
      "Total generated tokens (retokenized):    1652      \n"
      "Request throughput (req/s):              336.53    \n"
      "Input token throughput (tok/s):          9525.46   \n"
      "Output token throughput (tok/s):         2781.41   \n"
      "Peak output token throughput (tok/s):    1653.00   \n"
      "Peak concurrent requests:                200       \n"
      "Total token throughput (tok/s):          12306.87  \n"
      "Concurrency:                             176.48    \n"
      "----------------End-to-End Latency----------------\n"
      "Mean E2E Latency (ms):                   524.41    \n"
      "Median E2E Latency (ms):                 522.80    \n"
      "P90 E2E Latency (ms):                    553.42    \n"
      "P99 E2E Latency (ms):                    564.21    \n"
      "---------------Time to First Token----------------\n"
      "Mean TTFT (ms):                          503.94    \n"
      "Median TTFT (ms):                        502.47    \n"
      "P99 TTFT (ms):                           537.43    \n"
      "-----Time per Output Token (excl. 1st token)------\n"
      "Mean TPOT (ms):                          3.00      \n"
      "Median TPOT (ms):                        3.04      \n"
      "P99 TPOT (ms):                           6.16      \n"
      "---------------Inter-Token Latency----------------\n"
      "Mean ITL (ms):                           2.82      \n"
      "Median ITL (ms):                         2.43      \n"
      "P95 ITL (ms):                            6.47      \n"
      "P99 ITL (ms):                            8.79      \n"
      "Max ITL (ms):                            17.57     \n"
      "==================================================\n";
  EXPECT_EQ(FormatResultTable(run, Seed004()), expected);
}

TEST(ReportTest, ConcurrencyAndFiniteRateRows) {
  RunDescription run;
  run.backend = "sglang-oai-chat";
  run.request_rate = 20.0;
  run.max_concurrency = 288;
  std::string table = FormatResultTable(run, Seed004());
  // A value wider than 10 columns is not cut (Python's format does not truncate).
  EXPECT_NE(table.find("Backend:                                 sglang-oai-chat\n"),
            std::string::npos);
  EXPECT_NE(table.find("Traffic request rate:                    20.0      \n"), std::string::npos);
  EXPECT_NE(table.find("Max request concurrency:                 288       \n"), std::string::npos);
}

TEST(ReportTest, PythonFloat) {
  EXPECT_EQ(PythonFloat(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(PythonFloat(2.0), "2.0");
  EXPECT_EQ(PythonFloat(0.5), "0.5");
  EXPECT_EQ(PythonFloat(1.25), "1.25");
  EXPECT_EQ(PythonFloat(0.1), "0.1");
}

TEST(ReportTest, RecordHasEveryMetricAndAJsonSafeRate) {
  RunDescription run;
  run.request_rate = std::numeric_limits<double>::infinity();
  run.max_concurrency = 16;
  nlohmann::json record = ResultRecord(run, Seed004());
  EXPECT_EQ(record["request_rate"], "inf");
  EXPECT_EQ(record["max_concurrency"], 16);
  EXPECT_EQ(record["completed"], 200);
  EXPECT_EQ(record["total_output_tokens"], 1653);
  EXPECT_DOUBLE_EQ(record["p99_itl_ms"].get<double>(), 8.79);
  EXPECT_EQ(record["max_concurrent_requests"], 200);
  // Round-trips as standard JSON.
  EXPECT_EQ(nlohmann::json::parse(record.dump()), record);
}

}  // namespace
}  // namespace tandem::bench
