#include "tools/tandemctl/metrics_summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "tools/tandemctl/prometheus.h"

namespace tandem::ctl {
namespace {

// The shape of tandem-router's /metrics: counters with labels, histograms with cumulative
// buckets, per-worker gauges (a removed worker keeps its series with registered 0).
constexpr char kRouterMetrics[] = R"(# HELP tandem_router_requests_total Requests answered
# TYPE tandem_router_requests_total counter
tandem_router_requests_total{route="/generate",status="200"} 7
tandem_router_requests_total{route="/generate",status="400"} 2
tandem_router_requests_total{route="/generate",status="503"} 1
tandem_router_requests_total{route="/workers",status="200"} 4
# TYPE tandem_router_errors_total counter
tandem_router_errors_total{kind="bad_request"} 2
tandem_router_errors_total{kind="upstream"} 1
# TYPE tandem_router_retries_total counter
tandem_router_retries_total 3
# TYPE tandem_router_inflight gauge
tandem_router_inflight 1
# TYPE tandem_router_queue_depth gauge
tandem_router_queue_depth 0
# TYPE tandem_router_ttft_seconds histogram
tandem_router_ttft_seconds_bucket{le="0.01"} 2
tandem_router_ttft_seconds_bucket{le="0.05"} 6
tandem_router_ttft_seconds_bucket{le="0.1"} 9
tandem_router_ttft_seconds_bucket{le="+Inf"} 10
tandem_router_ttft_seconds_sum 0.4
tandem_router_ttft_seconds_count 10
# TYPE tandem_router_tpot_seconds histogram
tandem_router_tpot_seconds_bucket{le="0.001"} 0
tandem_router_tpot_seconds_bucket{le="0.002"} 10
tandem_router_tpot_seconds_bucket{le="+Inf"} 10
tandem_router_tpot_seconds_sum 0.015
tandem_router_tpot_seconds_count 10
# TYPE tandem_router_e2e_seconds histogram
tandem_router_e2e_seconds_bucket{le="0.5"} 0
tandem_router_e2e_seconds_bucket{le="+Inf"} 0
tandem_router_e2e_seconds_sum 0
tandem_router_e2e_seconds_count 0
# TYPE tandem_router_worker_healthy gauge
tandem_router_worker_healthy{worker="http://127.0.0.1:8001"} 1
tandem_router_worker_healthy{worker="http://127.0.0.1:8000"} 0
tandem_router_worker_healthy{worker="http://127.0.0.1:9999"} 0
tandem_router_worker_circuit_state{worker="http://127.0.0.1:8000"} 1
tandem_router_worker_circuit_state{worker="http://127.0.0.1:8001"} 0
tandem_router_worker_inflight{worker="http://127.0.0.1:8001"} 2
tandem_router_worker_running_requests{worker="http://127.0.0.1:8001"} 3
tandem_router_worker_queued_requests{worker="http://127.0.0.1:8001"} 4
tandem_router_worker_free_kv_blocks{worker="http://127.0.0.1:8001"} 8000
tandem_router_worker_registered{worker="http://127.0.0.1:8000"} 1
tandem_router_worker_registered{worker="http://127.0.0.1:8001"} 1
tandem_router_worker_registered{worker="http://127.0.0.1:9999"} 0
)";

MetricsSummary Summarize(const std::string& text) {
  auto samples = ParsePrometheusText(text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  auto summary = SummarizeRouterMetrics(*samples);
  EXPECT_TRUE(summary.ok()) << summary.status();
  return *summary;
}

TEST(PrometheusTest, ParsesNamesLabelsValuesAndEscapes) {
  auto s = ParsePrometheusText(
      "# HELP x y\n"
      "a 1\n"
      "b{k=\"v\",q=\"say \\\"hi\\\"\\\\\\n\"} -2.5 1700000000\n"
      "  c{le=\"+Inf\"} +Inf\r\n"
      "\n"
      "d NaN\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].name, "a");
  EXPECT_EQ((*s)[0].value, 1);
  EXPECT_EQ((*s)[1].Label("k"), "v");
  EXPECT_EQ((*s)[1].Label("q"), "say \"hi\"\\\n");
  EXPECT_EQ((*s)[1].value, -2.5);
  EXPECT_EQ((*s)[2].Label("le"), "+Inf");
  EXPECT_TRUE(std::isinf((*s)[2].value));
  EXPECT_TRUE(std::isnan((*s)[3].value));
  EXPECT_EQ((*s)[3].Label("absent"), "");
}

TEST(PrometheusTest, MalformedLinesNameTheLineAndTheProblem) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c :
       {Case{"ok 1\n9bad 1\n", "metrics line 2: a sample must start"},
        Case{"a{k=\"v\" 1\n", "expected ',' or '}' after label k"},
        Case{"a{k=\"v\"\n", "not closed"}, Case{"a{k=\"v 1\n", "not terminated"},
        Case{"a{k=\"v\",", "not closed"}, Case{"a{k=v} 1\n", "label k must be followed by"},
        Case{"a{k=\"\\t\"} 1\n", "bad escape \\t"}, Case{"a\n", "sample a has no value"},
        Case{"a one\n", "\"one\" is not a number"}, Case{"a 1 2 3\n", "text after its value"}}) {
    auto s = ParsePrometheusText(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << s.status().message();
  }
}

TEST(BucketQuantileTest, InterpolatesInsideTheBucketLikePrometheus) {
  const Buckets b = {{0.01, 2}, {0.05, 6}, {0.1, 9}, {INFINITY, 10}};
  // rank 1 in the first bucket [0, 0.01] holding 2: 0.01 * 1/2.
  EXPECT_DOUBLE_EQ(*BucketQuantile(b, 0.1), 0.005);
  // rank 5 in (0.01, 0.05] holding 4 above 2 below: 0.01 + 0.04 * 3/4.
  EXPECT_DOUBLE_EQ(*BucketQuantile(b, 0.5), 0.04);
  // rank 9 is the top of (0.05, 0.1].
  EXPECT_DOUBLE_EQ(*BucketQuantile(b, 0.9), 0.1);
  // rank 9.9 falls in +Inf: the largest finite bound.
  EXPECT_DOUBLE_EQ(*BucketQuantile(b, 0.99), 0.1);
  EXPECT_DOUBLE_EQ(*BucketQuantile(b, 0), 0);
}

TEST(BucketQuantileTest, EmptyOrUnboundedHistogramsHaveNoQuantile) {
  EXPECT_FALSE(BucketQuantile({}, 0.5));
  EXPECT_FALSE(BucketQuantile({{0.1, 0}, {INFINITY, 0}}, 0.5));
  EXPECT_FALSE(BucketQuantile({{0.1, 3}, {0.2, 4}}, 0.5));  // no +Inf bucket
  EXPECT_FALSE(BucketQuantile({{INFINITY, 4}}, 0.5));       // only +Inf: nothing finite
}

TEST(MetricsSummaryTest, SummarizesTheRouterMetrics) {
  const MetricsSummary m = Summarize(kRouterMetrics);
  EXPECT_EQ(m.requests_total, 14);
  ASSERT_EQ(m.routes.size(), 2u);
  EXPECT_EQ(m.routes[0].route, "/generate");
  EXPECT_EQ(m.routes[0].total, 10);
  EXPECT_EQ(m.routes[0].ok, 7);
  EXPECT_EQ(m.routes[0].client_error, 2);
  EXPECT_EQ(m.routes[0].server_error, 1);
  EXPECT_EQ(m.routes[1].route, "/workers");
  EXPECT_EQ(m.errors_total, 3);
  EXPECT_EQ(m.errors_by_kind.at("bad_request"), 2);
  EXPECT_EQ(m.errors_by_kind.at("upstream"), 1);
  EXPECT_EQ(m.retries, 3);
  EXPECT_EQ(m.inflight, 1);

  EXPECT_EQ(m.ttft.count, 10);
  EXPECT_DOUBLE_EQ(*m.ttft.mean, 0.04);
  EXPECT_DOUBLE_EQ(*m.ttft.p50, 0.04);
  EXPECT_DOUBLE_EQ(*m.ttft.p90, 0.1);
  EXPECT_DOUBLE_EQ(*m.ttft.p99, 0.1);
  // All ten in (0.001, 0.002]: p50 = 0.001 + 0.001 * 5/10, p99 = 0.001 + 0.001 * 9.9/10.
  EXPECT_DOUBLE_EQ(*m.tpot.mean, 0.0015);
  EXPECT_DOUBLE_EQ(*m.tpot.p50, 0.0015);
  EXPECT_DOUBLE_EQ(*m.tpot.p99, 0.00199);
  EXPECT_EQ(m.e2e.count, 0);
  EXPECT_FALSE(m.e2e.mean);
  EXPECT_FALSE(m.e2e.p50);

  // The removed worker (registered 0) is left out; the rest are sorted by URL.
  ASSERT_EQ(m.workers.size(), 2u);
  EXPECT_EQ(m.workers[0].url, "http://127.0.0.1:8000");
  EXPECT_EQ(m.workers[0].healthy, false);
  EXPECT_EQ(m.workers[0].circuit, "open");
  EXPECT_FALSE(m.workers[0].free_kv_blocks);
  EXPECT_EQ(m.workers[1].url, "http://127.0.0.1:8001");
  EXPECT_EQ(m.workers[1].healthy, true);
  EXPECT_EQ(m.workers[1].circuit, "closed");
  EXPECT_EQ(m.workers[1].inflight, 2);
  EXPECT_EQ(m.workers[1].running_requests, 3);
  EXPECT_EQ(m.workers[1].queued_requests, 4);
  EXPECT_EQ(m.workers[1].free_kv_blocks, 8000);
}

TEST(MetricsSummaryTest, JsonIsStableAndNullsWhatIsUnknown) {
  const nlohmann::json j = Summarize(kRouterMetrics).ToJson();
  EXPECT_EQ(j["requests"]["total"], 14);
  EXPECT_EQ(j["requests"]["by_route"][0]["route"], "/generate");
  EXPECT_EQ(j["requests"]["by_route"][0]["5xx"], 1);
  EXPECT_EQ(j["errors"]["by_kind"]["upstream"], 1);
  EXPECT_EQ(j["retries"], 3);
  EXPECT_DOUBLE_EQ(j["latency_seconds"]["ttft"]["p50"].get<double>(), 0.04);
  EXPECT_TRUE(j["latency_seconds"]["e2e"]["p99"].is_null());
  EXPECT_EQ(j["workers"][0]["circuit"], "open");
  EXPECT_TRUE(j["workers"][0]["free_kv_blocks"].is_null());
  EXPECT_EQ(j["workers"][1]["free_kv_blocks"], 8000);
}

TEST(MetricsSummaryTest, TextShowsTotalsLatencyRoutesAndWorkers) {
  const std::string text = Summarize(kRouterMetrics).ToText();
  EXPECT_NE(text.find("requests 14   errors 3 (bad_request=2, upstream=1)   retries 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ttft        10  40.00ms  40.00ms  100.00ms  100.00ms"), std::string::npos)
      << text;
  EXPECT_NE(text.find("e2e          0        -        -         -         -"), std::string::npos)
      << text;
  EXPECT_NE(text.find("/generate        10    7    2    1"), std::string::npos) << text;
  EXPECT_NE(
      text.find("http://127.0.0.1:8000  no       open            0        0       0        -"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("9999"), std::string::npos) << text;
}

TEST(MetricsSummaryTest, EmptyMetricsGiveZerosAndNoWorkers) {
  const MetricsSummary m = Summarize("");
  EXPECT_EQ(m.requests_total, 0);
  EXPECT_TRUE(m.workers.empty());
  EXPECT_NE(m.ToText().find("no workers registered"), std::string::npos);
}

TEST(MetricsSummaryTest, InconsistentBucketsAreAnError) {
  auto samples = ParsePrometheusText(
      "tandem_router_ttft_seconds_bucket{le=\"0.1\"} 5\n"
      "tandem_router_ttft_seconds_bucket{le=\"+Inf\"} 3\n");
  ASSERT_TRUE(samples.ok());
  auto m = SummarizeRouterMetrics(*samples);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("counts decrease"), std::string::npos);

  samples = ParsePrometheusText("tandem_router_e2e_seconds_bucket{le=\"soon\"} 5\n");
  ASSERT_TRUE(samples.ok());
  m = SummarizeRouterMetrics(*samples);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("bad le label \"soon\""), std::string::npos);
}

// Truncated or corrupted scrapes (a proxy cut the body, a peer sent garbage) give a summary or
// an error, never a crash; run under the sanitizers with the unit tests.
TEST(MetricsSummaryTest, TruncatedAndCorruptedTextNeverCrashes) {
  const std::string text = kRouterMetrics;
  size_t parsed = 0;
  for (size_t n = 0; n <= text.size(); ++n) {
    auto samples = ParsePrometheusText(std::string_view(text).substr(0, n));
    if (!samples.ok()) continue;
    ++parsed;
    (void)SummarizeRouterMetrics(*samples);
  }
  EXPECT_GT(parsed, 0u);
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string mutated = text;
    for (int k = 0; k < 3; ++k) {
      mutated[rng() % mutated.size()] = static_cast<char>(rng() % 256);
    }
    auto samples = ParsePrometheusText(mutated);
    if (!samples.ok()) {
      EXPECT_NE(samples.status().message().find("metrics line "), std::string::npos);
      continue;
    }
    auto summary = SummarizeRouterMetrics(*samples);
    if (summary.ok())
      (void)summary->ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace
}  // namespace tandem::ctl
