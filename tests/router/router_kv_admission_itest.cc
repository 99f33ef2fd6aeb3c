// Admission from KV headroom end to end: a plain cluster whose one worker has a small KV pool
// gets a burst of long requests (ignore_eos, max_new_tokens near the context) beyond what the
// pool holds. Those that fit run, the next --queue-size wait and then run, the rest are 429 with
// Retry-After saying the workers' KV is full; none fails inside the worker, the worker never
// preempts, and every KV block is free afterwards. Bounded waits only.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using testing::ClientResponse;

std::string AdminAuth() { return std::string("Authorization: Bearer ") + kTestAdminKey + "\r\n"; }

// The worker's load as the router last polled it ({} until a report with KV blocks came in).
json PolledLoad(int router_port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    ClientResponse r = RouterRequest(router_port, "GET", "/workers", "", AdminAuth());
    json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (r.status == 200 && body.is_object() && body.contains("workers") &&
        !body["workers"].empty() && body["workers"][0]["load"]["total_kv_blocks"] > 0) {
      return body["workers"][0]["load"];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return json::object();
}

std::optional<double> WorkerMetric(int http_port, const std::string& metric) {
  testing::TestClient client(static_cast<uint16_t>(http_port), 10);
  if (!client.SendRequest("GET", "/metrics", "")) return std::nullopt;
  std::optional<ClientResponse> r = client.ReadResponse();
  if (!r.has_value()) return std::nullopt;
  return MetricValue(r->body, metric);
}

TEST(RouterKvAdmissionTest, BurstBeyondTheKvPoolWaitsOr429sAndNeverPreempts) {
  // 4 MiB of KV holds a few requests of ~500 tokens with the shipped tiny model.
  auto worker = StartWorker("colocated",
                            {"--kv-cache-memory", "4MiB", "--cluster-secret", kTestClusterSecret});
  ASSERT_NE(worker, nullptr);
  constexpr int kQueueSize = 2;
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls", worker->url(),
                   "--queue-size", std::to_string(kQueueSize), "--queue-timeout-secs", "120"});
  ASSERT_NE(router, nullptr);
  const json load = PolledLoad(router->port);
  ASSERT_FALSE(load.empty()) << "the router never got the worker's KV blocks";
  const int64_t total_blocks = load["total_kv_blocks"];
  const json probe = {
      {"text", "Tell me a fortune about the sea."},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 400}, {"ignore_eos", true}}}};
  // The router's rule: committed + need blocks within the total, each request counted
  // ceil((prompt + max_new_tokens) / block) + 1. Requests of ~410 tokens in 16-token blocks:
  // 27 blocks each. How many fit at once:
  const int64_t per_request = (410 + 15) / 16 + 1;
  const int64_t fit = std::max<int64_t>(1, total_blocks / per_request);
  ASSERT_LE(fit, 16) << "the pool is larger than this test expects: " << total_blocks;
  const int64_t burst = fit + kQueueSize + 3;

  const double preempted_before =
      WorkerMetric(worker->http_port, "tandem_engine_preemptions_total").value_or(0);
  std::vector<ClientResponse> answers(static_cast<size_t>(burst));
  std::vector<std::thread> clients;
  for (int64_t i = 0; i < burst; ++i) {
    clients.emplace_back([&, i] {
      answers[static_cast<size_t>(i)] =
          RouterRequest(router->port, "POST", "/generate", probe.dump());
    });
  }
  for (std::thread& t : clients) t.join();

  int ok = 0, refused = 0;
  for (const ClientResponse& r : answers) {
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(json::parse(r.body)["meta_info"]["completion_tokens"], 400) << r.body;
    } else {
      ASSERT_EQ(r.status, 429) << r.body;  // never a worker's failure (503) or a 408
      ++refused;
      EXPECT_EQ(r.headers.count("retry-after"), 1u);
      EXPECT_NE(r.body.find("KV cache is full"), std::string::npos) << r.body;
    }
  }
  RecordProperty("admitted", ok);
  RecordProperty("refused", refused);
  RecordProperty("fit", static_cast<int>(fit));
  RecordProperty("total_blocks", static_cast<int>(total_blocks));
  // At least the ones that fit and the queued ones ran; a request that ended early may have
  // let a later one in instead of refusing it, never the other way.
  EXPECT_GE(ok, fit + kQueueSize) << "fit " << fit << " of " << total_blocks << " blocks";
  EXPECT_GE(refused, 1) << "a burst of " << burst << " with room for " << fit << " and "
                        << kQueueSize << " waiting was never refused";
  EXPECT_EQ(WorkerMetric(worker->http_port, "tandem_engine_preemptions_total").value_or(-1),
            preempted_before)
      << "the worker preempted: the router admitted more than its KV holds";
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(router->port, kTestAdminKey, worker->http_port, &why)) << why;
}

}  // namespace
}  // namespace tandem::itest
