// The request loop against the in-process SGLang-shaped test server: concurrency bound,
// failures, Poisson arrivals.
#include "bench/tandem_bench/runner.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/bench/fake_sglang_server.h"

namespace tandem::bench {
namespace {

using testing::FakeSglangServer;

std::vector<DatasetRow> Rows(int n, int output_len) {
  std::vector<DatasetRow> rows;
  for (int i = 0; i < n; ++i) rows.push_back({"prompt " + std::to_string(i), {}, 2, output_len});
  return rows;
}

int CountWords(const std::string& text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    if (c != ' ' && !in_word) ++words;
    in_word = c != ' ';
  }
  return words;
}

RunOptions QuickOptions() {
  RunOptions options;
  options.warmup_requests = 0;
  options.settle_after_warmup = std::chrono::milliseconds(0);
  options.request_timeout = std::chrono::seconds(30);
  return options;
}

TEST(PoissonArrivalsTest, MeanGapWithinStatisticalBound) {
  NumpyRandomState rng(1);
  const int n = 4001;
  const double rate = 10.0;
  std::vector<double> arrivals = PoissonArrivals(n, rate, rng);
  ASSERT_EQ(arrivals.size(), static_cast<size_t>(n));
  EXPECT_EQ(arrivals[0], 0.0);
  for (size_t i = 1; i < arrivals.size(); ++i) EXPECT_GE(arrivals[i], arrivals[i - 1]);
  // Mean of 4000 exponential gaps: 0.1 s with standard error 0.1 / sqrt(4000) = 0.00158 s.
  const double mean_gap = arrivals.back() / (n - 1);
  EXPECT_NEAR(mean_gap, 1.0 / rate, 5 * 0.1 / std::sqrt(4000.0));
  // Reproducible for a seed.
  NumpyRandomState again(1);
  EXPECT_EQ(PoissonArrivals(n, rate, again), arrivals);
}

TEST(PoissonArrivalsTest, InfiniteRateSendsAllAtOnce) {
  NumpyRandomState rng(1);
  EXPECT_EQ(PoissonArrivals(3, std::numeric_limits<double>::infinity(), rng),
            (std::vector<double>{0, 0, 0}));
}

TEST(RunnerTest, MaxConcurrencyIsExactlyTheNumberInFlight) {
  FakeSglangServer::Options server_options;
  server_options.gather = 3;  // hold requests until three are in flight together
  // The last requests of a staggered run may never be three at once; they wait this long.
  server_options.gather_timeout = std::chrono::milliseconds(500);
  FakeSglangServer server(server_options);
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("127.0.0.1", server.port());
  RunOptions options = QuickOptions();
  options.max_concurrency = 3;
  NumpyRandomState rng(1);
  auto result = RunBenchmark(client, RequestSettings{}, Rows(12, 4), options, nullptr, rng);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(server.max_in_flight(), 3);
  EXPECT_EQ(server.requests(), 12);
  for (const auto& out : result->outputs) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.output_len, 4);
    EXPECT_EQ(out.itl_s.size(), 3u);
  }
  BenchmarkMetrics m = ComputeMetrics(result->outputs, result->duration_s, CountWords);
  EXPECT_EQ(m.completed, 12);
  EXPECT_EQ(m.total_output, 48);
  EXPECT_EQ(m.total_output_retokenized, 48);
}

TEST(RunnerTest, FailuresAreCountedWithTheirErrors) {
  FakeSglangServer::Options server_options;
  server_options.fail_every = 4;
  FakeSglangServer server(server_options);
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("127.0.0.1", server.port());
  NumpyRandomState rng(1);
  auto result = RunBenchmark(client, RequestSettings{}, Rows(8, 2), QuickOptions(), nullptr, rng);
  ASSERT_TRUE(result.ok()) << result.status();
  int failed = 0;
  for (const auto& out : result->outputs) {
    if (out.success) continue;
    ++failed;
    EXPECT_NE(out.error.find("HTTP 500"), std::string::npos) << out.error;
    EXPECT_NE(out.error.find("injected failure"), std::string::npos) << out.error;
  }
  EXPECT_EQ(failed, 2);
}

TEST(RunnerTest, WarmupFailureStopsTheRun) {
  FakeSglangServer::Options server_options;
  server_options.fail_every = 1;
  FakeSglangServer server(server_options);
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("127.0.0.1", server.port());
  RunOptions options = QuickOptions();
  options.warmup_requests = 2;
  std::ostringstream log;
  options.log = &log;
  NumpyRandomState rng(1);
  auto result = RunBenchmark(client, RequestSettings{}, Rows(4, 2), options, nullptr, rng);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("Warmup failed"), std::string::npos);
  EXPECT_NE(log.str().find("Starting warmup with 2 sequences..."), std::string::npos);
  EXPECT_EQ(server.requests(), 2);  // the timed run never started
}

TEST(RunnerTest, OpenAiBackendsThroughTheLoop) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("127.0.0.1", server.port());
  for (Backend backend : {Backend::kSglangOai, Backend::kSglangOaiChat}) {
    for (bool stream : {true, false}) {
      RequestSettings settings;
      settings.backend = backend;
      settings.model = "fake-model";
      settings.stream = stream;
      NumpyRandomState rng(1);
      auto result = RunBenchmark(client, settings, Rows(3, 5), QuickOptions(), nullptr, rng);
      ASSERT_TRUE(result.ok()) << result.status();
      for (const auto& out : result->outputs) {
        ASSERT_TRUE(out.success) << BackendName(backend) << ": " << out.error;
        EXPECT_EQ(out.output_len, 5);
        EXPECT_EQ(out.itl_s.size(), stream ? 4u : 0u);
      }
    }
  }
}

TEST(RunnerTest, BadOptions) {
  HttpClient client("127.0.0.1", 1);
  NumpyRandomState rng(1);
  RunOptions options = QuickOptions();
  EXPECT_FALSE(RunBenchmark(client, RequestSettings{}, {}, options, nullptr, rng).ok());
  options.request_rate = 0;
  EXPECT_FALSE(RunBenchmark(client, RequestSettings{}, Rows(1, 1), options, nullptr, rng).ok());
}

}  // namespace
}  // namespace tandem::bench
