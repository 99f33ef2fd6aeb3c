// KV events end to end: tandem-router --kv-events --policy cache_aware over two real prefill
// workers and a decode worker. The router's index follows each prefill worker's radix cache
// (its /metrics shows the blocks per worker), and requests sharing a prefix go to the worker
// whose cache holds it, decided from the events, and that worker's cache reuses it. Bounded waits
// only.
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;

// Polls the router's /metrics until `metric` is at least `want` (up to 30 s).
bool WaitForMetricAtLeast(int port, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<double> v = MetricValue(HttpGet(port, "/metrics").body, metric);
    if (v.has_value() && *v >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

double Metric(int port, const std::string& metric) {
  return MetricValue(HttpGet(port, "/metrics").body, metric).value_or(0);
}

json Generate(const std::vector<int32_t>& ids) {
  return {{"input_ids", ids},
          {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}}}};
}

TEST(RouterKvEventsTest, SharedPrefixesGoToTheWorkerHoldingThem) {
  auto p0 = StartWorker("prefill");
  auto p1 = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--policy",
                   "cache_aware", "--kv-events", "--kv-events-poll-ms", "10", "--prefill",
                   p0->url(), std::to_string(p0->bootstrap_port), "--prefill", p1->url(),
                   std::to_string(p1->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(router, nullptr);
  const int port = router->port;
  for (const auto* w : {p0.get(), p1.get()}) {
    ASSERT_TRUE(
        WaitForMetricAtLeast(port, "tandem_router_kv_index_synced{worker=\"" + w->url() + "\"}", 1))
        << w->url() << " never synced";
  }

  // Two groups of prompts, each sharing a 192-token prefix (12 blocks of 16).
  for (int group = 0; group < 2; ++group) {
    std::vector<int32_t> prefix;
    for (int i = 0; i < 192; ++i) prefix.push_back(100 + group * 1000 + i);
    auto prompt = [&](int k) {
      std::vector<int32_t> ids = prefix;
      for (int i = 0; i < 8; ++i) ids.push_back(2000 + 10 * k + i);
      return ids;
    };
    auto blocks = [&](const WorkerProcess* w) {
      return "tandem_router_kv_index_blocks{worker=\"" + w->url() + "\"}";
    };
    const double blocks0 = Metric(port, blocks(p0.get())), blocks1 = Metric(port, blocks(p1.get()));
    auto r = RouterRequest(port, "POST", "/generate", Generate(prompt(0)).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    // The worker that got it: the one whose indexed blocks grow by the prefix's 12 (no other
    // request runs meanwhile).
    std::string holder;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (holder.empty() && std::chrono::steady_clock::now() < deadline) {
      if (Metric(port, blocks(p0.get())) >= blocks0 + 12) holder = p0->url();
      if (Metric(port, blocks(p1.get())) >= blocks1 + 12) holder = p1->url();
      if (holder.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(holder.empty()) << HttpGet(port, "/metrics").body;
    const std::string decided =
        "tandem_router_policy_decisions_total{policy=\"cache_aware\",worker=\"" + holder + "\"}";
    const double before = Metric(port, decided);
    const WorkerProcess* holding = holder == p0->url() ? p0.get() : p1.get();
    const double reused_before = MetricValue(HttpGet(holding->http_port, "/metrics").body,
                                             "tandem_engine_cached_prompt_tokens_total")
                                     .value_or(0);
    const double from_events =
        Metric(port, "tandem_router_cache_aware_source_total{source=\"events\"}");
    for (int k = 1; k <= 4; ++k) {
      auto rk = RouterRequest(port, "POST", "/generate", Generate(prompt(k)).dump());
      ASSERT_EQ(rk.status, 200) << rk.body;
    }
    EXPECT_EQ(Metric(port, decided), before + 4) << HttpGet(port, "/metrics").body;
    // And that worker's radix cache really reused the prefix each time.
    EXPECT_GE(MetricValue(HttpGet(holding->http_port, "/metrics").body,
                          "tandem_engine_cached_prompt_tokens_total")
                  .value_or(0),
              reused_before + 4 * 192);
    EXPECT_GE(Metric(port, "tandem_router_cache_aware_source_total{source=\"events\"}"),
              from_events + 4);
  }
}

}  // namespace
}  // namespace tandem::itest
