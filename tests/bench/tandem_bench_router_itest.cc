// tandem-bench against the real cluster: tandem-router in PD mode in front of a tandem-prefill +
// tandem-decode pair on the shipped model. The table's counts must agree with what the router
// and the workers themselves counted (requests, prompt tokens, generated tokens).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

// The value column of a table row, e.g. Row(out, "Successful requests:") == "20".
std::string Row(const std::string& table, const std::string& name) {
  size_t at = table.find("\n" + name);
  if (at == std::string::npos) return "";
  const size_t start = at + 1 + 41;
  std::string value = table.substr(start, table.find('\n', start) - start);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

// The value of an unlabelled Prometheus sample, or of one with exactly `labels` ("" for none).
double Sample(const std::string& metrics, const std::string& name, const std::string& labels = "") {
  const std::string key = "\n" + name + (labels.empty() ? "" : "{" + labels + "}") + " ";
  const size_t at = metrics.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + key.size()));
}

TEST(TandemBenchRouterItest, TableAgreesWithTheRouterAndWorkerMetrics) {
  auto prefill = StartWorker("prefill");
  auto decode = StartWorker("decode");
  const int router_port = FreePort();
  Process router({BinaryPath("tandem-router"), "--port", std::to_string(router_port),
                  "--model-path", SourcePath("models/tandem-tiny-english"), "--pd-disaggregation",
                  "--prefill", "http://" + prefill->grpc_address(),
                  std::to_string(prefill->bootstrap_port), "--decode",
                  "http://" + decode->grpc_address(), "--policy", "round_robin",
                  "--health-check-interval-secs", "1", "--health-success-threshold", "1",
                  "--cluster-secret", kTestClusterSecret});
  ASSERT_TRUE(WaitForHttp(router_port, "/health", 200, seconds(60))) << router.Output();

  // Counters before the run: the workers' readiness probes ran the model once each.
  const std::string p_before = HttpGet(prefill->http_port, "/metrics").body;
  const std::string d_before = HttpGet(decode->http_port, "/metrics").body;
  RunResult run =
      RunToExit({BinaryPath("tandem-bench"), "--backend", "sglang", "--host", "127.0.0.1", "--port",
                 std::to_string(router_port), "--model", SourcePath("models/tandem-tiny-english"),
                 "--dataset-name", "random", "--num-prompts", "24", "--random-input-len", "48",
                 "--random-output-len", "8", "--random-range-ratio", "1", "--max-concurrency", "8",
                 "--warmup-requests", "0", "--seed", "3",
                 // The drawn ids themselves, so the prefill worker counts exactly
                 // the table's input tokens (text may re-encode to another count).
                 "--tokenize-prompt"},
                seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  ASSERT_NE(run.out.find("============ Serving Benchmark Result ============"), std::string::npos)
      << run.out;
  EXPECT_EQ(Row(run.out, "Successful requests:"), "24") << run.out;
  EXPECT_EQ(Row(run.out, "Max request concurrency:"), "8") << run.out;

  const std::string router_metrics = HttpGet(router_port, "/metrics").body;
  EXPECT_EQ(
      Sample(router_metrics, "tandem_router_requests_total", "route=\"/generate\",status=\"200\""),
      24)
      << router_metrics;
  // Every prompt token was prefilled on the prefill worker; the decode worker finished every
  // request and counts all its tokens (including the first, sampled by the prefill worker and
  // passed in with the KV).
  const std::string p_after = HttpGet(prefill->http_port, "/metrics").body;
  const std::string d_after = HttpGet(decode->http_port, "/metrics").body;
  auto delta = [](const std::string& before, const std::string& after, const std::string& name) {
    return Sample(after, name) - Sample(before, name);
  };
  EXPECT_EQ(delta(p_before, p_after, "tandem_engine_prompt_tokens_total"),
            std::stod(Row(run.out, "Total input tokens:")))
      << p_after;
  EXPECT_EQ(std::stod(Row(run.out, "Total input tokens:")), 24 * 48) << run.out;
  EXPECT_EQ(std::stod(Row(run.out, "Total generated tokens:")), 24 * 8) << run.out;
  EXPECT_EQ(delta(d_before, d_after, "tandem_engine_finished_requests_total"), 24) << d_after;
  EXPECT_EQ(delta(d_before, d_after, "tandem_engine_generated_tokens_total"), 24 * 8) << d_after;
}

}  // namespace
}  // namespace tandem::itest
