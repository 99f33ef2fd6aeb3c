// tandem-router end to end, where its legs go and what they leave (cluster_fixture.h): a client
// that disconnects mid-stream leaves every KV block free on the workers that served it (n = 1 and
// n = 4, plain and PD), concurrent streams under cache_aware spread over two decode workers, and
// a killed worker's legs are retried on the survivor while health converges. Workers and the router
// killed with requests in flight: tests/faults/. Bounded waits only.
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
#include "tests/router/cluster_fixture.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::ClientResponse;
using testing::TestClient;

// Streams `body` from /generate on `port` and closes the connection once tokens flow.
void HangUpMidStream(int port, const json& body) {
  TestClient c(static_cast<uint16_t>(port), 60);
  ASSERT_TRUE(c.SendRequest("POST", "/generate", body.dump()));
  std::optional<ClientResponse> head = c.ReadHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(c.ReadChunk().has_value());  // tokens are flowing
}

class RouterLegsTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({.second_colocated = true}); }
};

TEST_F(RouterLegsTest, ClientDisconnectMidStreamFreesBothWorkersBlocks) {
  auto pd = Pd();
  json body = GenerateBody(200, true);
  ASSERT_NO_FATAL_FAILURE(HangUpMidStream(pd->port, body));
  EXPECT_TRUE(AllBlocksFree(*decode_));
  EXPECT_TRUE(AllBlocksFree(*prefill_));
  // The router is still fine.
  EXPECT_EQ(RouterRequest(pd->port, "POST", "/generate", GenerateBody(3, false).dump()).status,
            200);
}

// A client gone mid-stream with n = 4 sharing a prompt of several blocks, in PD and plain mode:
// every choice's legs are cancelled (the leader's and its siblings') and the workers free every
// block.
TEST_F(RouterLegsTest, DisconnectMidStreamWithNFourFreesEverything) {
  auto pd = Pd();
  auto plain = Plain();
  for (RouterProcess* router : {pd.get(), plain.get()}) {
    SCOPED_TRACE(router == pd.get() ? "pd" : "plain");
    json body = GenerateBody(200, true);
    body["text"] = LongPrompt(router == pd.get() ? "gone-pd" : "gone-plain");
    body["sampling_params"]["n"] = 4;
    ASSERT_NO_FATAL_FAILURE(HangUpMidStream(router->port, body));
    if (router == pd.get()) {
      EXPECT_TRUE(AllBlocksFree(*decode_));
      EXPECT_TRUE(AllBlocksFree(*prefill_));
    } else {
      EXPECT_TRUE(AllBlocksFree(*colocated_));
    }
    EXPECT_EQ(
        RouterRequest(router->port, "POST", "/generate", GenerateBody(3, false).dump()).status,
        200);
  }
}

// The issue this guards: with --policy cache_aware, concurrent streams sharing one prompt all
// went to one decode worker (cache affinity, within the balance thresholds) while another sat
// idle. Decode workers keep no prefix cache, so their legs are now placed by load
// (power_of_two): 16 concurrent streams land on both of two decode workers.
TEST_F(RouterLegsTest, CacheAwarePdSpreadsConcurrentStreamsOverTwoDecodeWorkers) {
  std::unique_ptr<WorkerProcess> decode2 = StartWorker("decode");
  ASSERT_NE(decode2, nullptr);
  auto router = StartClusterRouter({"--pd-disaggregation", "--policy", "cache_aware", "--prefill",
                                    prefill_->url(), std::to_string(prefill_->bootstrap_port),
                                    "--decode", decode_->url(), "--decode", decode2->url()});
  // Both decode workers healthy in the router's eyes before the burst (bounded).
  auto healthy = [&](const WorkerProcess& w) {
    const std::string m = HttpGet(router->port, "/metrics").body;
    return MetricValue(m, "tandem_router_worker_healthy{worker=\"" + w.url() + "\"").value_or(0) ==
           1;
  };
  const auto ready_by = std::chrono::steady_clock::now() + seconds(30);
  while (!(healthy(*decode_) && healthy(*decode2)) && std::chrono::steady_clock::now() < ready_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(healthy(*decode_) && healthy(*decode2));

  const WorkerProcess* decodes[2] = {decode_.get(), decode2.get()};
  const double before[2] = {LegsEnded(*decodes[0]), LegsEnded(*decodes[1])};
  constexpr int kStreams = 16;
  std::vector<int> status(kStreams, 0);
  std::vector<bool> done(kStreams, false);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      ClientResponse r =
          RouterRequest(router->port, "POST", "/generate", GenerateBody(16, true).dump());
      status[static_cast<size_t>(i)] = r.status;
      bool finished = false;
      SseEvents(r.body, &finished);
      done[static_cast<size_t>(i)] = finished;
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(status[static_cast<size_t>(i)], 200) << i;
    EXPECT_TRUE(done[static_cast<size_t>(i)]) << i;
  }
  double legs[2] = {0, 0};
  const auto counted_by = std::chrono::steady_clock::now() + seconds(30);
  for (;;) {
    for (int k = 0; k < 2; ++k) legs[k] = LegsEnded(*decodes[k]) - before[k];
    if (legs[0] + legs[1] >= kStreams || std::chrono::steady_clock::now() > counted_by) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(legs[0] + legs[1], kStreams);
  EXPECT_GT(legs[0], 0) << "decode legs: " << legs[0] << " / " << legs[1];
  EXPECT_GT(legs[1], 0) << "decode legs: " << legs[0] << " / " << legs[1];
  const std::string m = HttpGet(router->port, "/metrics").body;
  for (const WorkerProcess* w : decodes) {
    EXPECT_GT(
        MetricValue(m, "tandem_router_policy_decisions_total{policy=\"power_of_two\",worker=\"" +
                           w->url() + "\"")
            .value_or(0),
        0)
        << w->url();
  }
  // sgl-router's names for the same traffic (docs/router.md "Metrics").
  EXPECT_GE(MetricValue(m, "sgl_router_requests_total{route=\"/generate\"").value_or(0), kStreams);
  EXPECT_GE(
      MetricValue(m, "sgl_router_request_duration_seconds_count{route=\"/generate\"").value_or(0),
      kStreams);
  EXPECT_GE(MetricValue(m, "sgl_router_active_workers").value_or(0), 2) << m;
  double processed = 0;
  for (const WorkerProcess* w : decodes) {
    const std::string worker = "{worker=\"" + w->url() + "\"";
    EXPECT_EQ(MetricValue(m, "sgl_router_worker_health" + worker).value_or(0), 1) << w->url();
    const double n = MetricValue(m, "sgl_router_processed_requests_total" + worker).value_or(0);
    EXPECT_GT(n, 0) << w->url();
    processed += n;
  }
  EXPECT_GE(processed, kStreams);
  // sgl-router's PD names: every stream a PD request on its route, its prefill on the one prefill
  // worker, its decode on one of the two, the prefill policy's choices as hits or misses.
  EXPECT_GE(MetricValue(m, "sgl_router_pd_requests_total{route=\"/generate\"").value_or(0),
            kStreams);
  EXPECT_GE(MetricValue(m, "sgl_router_pd_request_duration_seconds_count{route=\"/generate\"")
                .value_or(0),
            kStreams);
  EXPECT_GE(
      MetricValue(m, "sgl_router_pd_prefill_requests_total{worker=\"" + prefill_->url() + "\"")
          .value_or(0),
      kStreams);
  double decoded = 0;
  for (const WorkerProcess* w : decodes) {
    decoded += MetricValue(m, "sgl_router_pd_decode_requests_total{worker=\"" + w->url() + "\"")
                   .value_or(0);
  }
  EXPECT_GE(decoded, kStreams);
  EXPECT_GE(MetricValue(m, "sgl_router_cache_hits_total").value_or(0) +
                MetricValue(m, "sgl_router_cache_misses_total").value_or(0) +
                MetricValue(m, "sgl_router_load_balancing_events_total").value_or(0),
            kStreams)
      << m;
  EXPECT_GE(MetricValue(m, "sgl_router_policy_decisions_total{policy=\"cache_aware\",worker=\"" +
                               prefill_->url() + "\"")
                .value_or(0),
            kStreams);
  // A request the router refuses is an error of its route and its type, and a PD error.
  EXPECT_EQ(RouterRequest(router->port, "POST", "/generate", R"({"text":7})").status, 400);
  const std::string after = HttpGet(router->port, "/metrics").body;
  EXPECT_GE(MetricValue(after,
                        "sgl_router_request_errors_total{route=\"/generate\",error_type=\"bad_"
                        "request\"")
                .value_or(0),
            1)
      << after;
  EXPECT_GE(MetricValue(after, "sgl_router_pd_errors_total{error_type=\"bad_request\"").value_or(0),
            1);
  EXPECT_TRUE(AllBlocksFree(*decode2));
  EXPECT_TRUE(AllBlocksFree(*decode_));
}

// Last: kills a worker.
TEST_F(RouterLegsTest, ZKilledWorkerIsRoutedAround) {
  auto plain = StartClusterRouter({"--worker-urls", colocated_->url(), colocated2_->url()});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(RouterRequest(plain->port, "POST", "/generate", GenerateBody(3, false).dump()).status,
              200);
  }
  colocated2_->Kill();
  // Every request succeeds (a leg on the dead worker is retried on the survivor).
  for (int i = 0; i < 6; ++i) {
    ClientResponse r =
        RouterRequest(plain->port, "POST", "/generate", GenerateBody(3, false).dump());
    EXPECT_EQ(r.status, 200) << r.body;
  }
  // Health converges: the dead worker is reported unhealthy.
  bool converged = false;
  for (int i = 0; i < 200 && !converged; ++i) {
    ClientResponse w = RouterRequest(plain->port, "GET", "/workers", "", Auth(kTestAdminKey));
    const json states = json::parse(w.body);
    for (const json& s : states["workers"]) {
      if (s["url"] == colocated2_->url() && s["healthy"] == false) converged = true;
    }
    if (!converged) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(converged);
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace tandem::itest
