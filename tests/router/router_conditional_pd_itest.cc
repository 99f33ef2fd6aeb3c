// Conditional disaggregation end to end (docs/router.md "Conditional disaggregation"): a real
// tandem-router --pd-disaggregation --pd-local-prefill-max-tokens 32 in front of a tandem-prefill
// and a tandem-decode on the shipped model. A short prompt is prefilled on the decode worker
// (counted local_short; the prefill worker's engine admits no prompt token for it), a long one
// goes through the prefill worker (pd), and greedy outputs equal a colocated worker's and an
// always-PD router's over the same workers bitwise. A short request whose client goes away
// mid-stream, and one aborted through /abort_request, leave every KV block free on both workers.
// Bounded waits only.
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using testing::ClientResponse;
using testing::TestClient;

double Metric(int http_port, const std::string& metric) {
  return MetricValue(HttpGet(http_port, "/metrics").body, metric).value_or(0);
}

// Polls `metric` on `http_port` until it is at least `want` (up to 30 s).
bool WaitForMetricAtLeast(int http_port, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Metric(http_port, metric) >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

json Generate(int prompt_tokens, int max_new, bool stream, const std::string& rid = "") {
  std::vector<int32_t> ids;
  for (int i = 0; i < prompt_tokens; ++i) ids.push_back(200 + (37 * i) % 2500);
  json body = {
      {"input_ids", ids},
      {"sampling_params", {{"max_new_tokens", max_new}, {"temperature", 0}, {"ignore_eos", true}}},
      {"stream", stream}};
  if (!rid.empty()) body["rid"] = rid;
  return body;
}

json OutputIds(int router_port, const json& body) {
  ClientResponse r = RouterRequest(router_port, "POST", "/generate", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return json();
  return json::parse(r.body)["output_ids"];
}

class RouterConditionalPdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefill_ = StartWorker("prefill");
    decode_ = StartWorker("decode");
    ASSERT_NE(prefill_, nullptr);
    ASSERT_NE(decode_, nullptr);
  }
  std::unique_ptr<RouterProcess> Pd(std::vector<std::string> extra = {}) {
    extra.insert(
        extra.begin(),
        {"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
         prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode", decode_->url()});
    return StartRouter(extra);
  }
  void ExpectAllBlocksFree(int router_port) {
    for (const WorkerProcess* w : {prefill_.get(), decode_.get()}) {
      std::string why;
      EXPECT_TRUE(WaitForAllKvBlocksFree(router_port, kTestAdminKey, w->http_port, &why))
          << w->role << ": " << why;
    }
  }

  std::unique_ptr<WorkerProcess> prefill_;
  std::unique_ptr<WorkerProcess> decode_;
};

TEST_F(RouterConditionalPdTest, ShortPromptsPrefillOnTheDecodeWorkerWithTheSameTokens) {
  auto conditional = Pd({"--pd-local-prefill-max-tokens", "32"});
  auto always_pd = Pd();
  auto colocated = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret});
  auto plain =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls", colocated->url()});
  ASSERT_NE(conditional, nullptr);
  ASSERT_NE(always_pd, nullptr);
  ASSERT_NE(plain, nullptr);
  const std::string local_short =
      "tandem_router_disaggregation_decisions_total{decision=\"local_short\"}";
  const std::string pd = "tandem_router_disaggregation_decisions_total{decision=\"pd\"}";
  const std::string prompt_tokens = "tandem_engine_prompt_tokens_total";

  // Short: on the decode worker; the prefill worker's engine sees none of it.
  const double prefill_prompts = Metric(prefill_->http_port, prompt_tokens);
  const double decode_prompts = Metric(decode_->http_port, prompt_tokens);
  const json short_local = OutputIds(conditional->port, Generate(32, 12, false));
  ASSERT_EQ(short_local.size(), 12u);
  EXPECT_EQ(Metric(conditional->port, local_short), 1);
  EXPECT_EQ(Metric(conditional->port, pd), 0);
  EXPECT_EQ(Metric(prefill_->http_port, prompt_tokens), prefill_prompts);
  EXPECT_GE(Metric(decode_->http_port, prompt_tokens), decode_prompts + 32);

  // Long: through the prefill worker.
  const json long_pd = OutputIds(conditional->port, Generate(100, 12, false));
  ASSERT_EQ(long_pd.size(), 12u);
  EXPECT_EQ(Metric(conditional->port, pd), 1);
  EXPECT_GE(Metric(prefill_->http_port, prompt_tokens), prefill_prompts + 1);

  // The same tokens as an always-PD run and a colocated worker, streamed or not.
  EXPECT_EQ(OutputIds(always_pd->port, Generate(32, 12, false)), short_local);
  EXPECT_EQ(OutputIds(plain->port, Generate(32, 12, false)), short_local);
  EXPECT_EQ(OutputIds(always_pd->port, Generate(100, 12, false)), long_pd);
  EXPECT_EQ(OutputIds(plain->port, Generate(100, 12, false)), long_pd);
  ClientResponse streamed =
      RouterRequest(conditional->port, "POST", "/generate", Generate(32, 12, true).dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  bool done = false;
  std::vector<json> events = SseEvents(streamed.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["output_ids"], short_local) << streamed.body;
  EXPECT_EQ(Metric(conditional->port, local_short), 2);

  ExpectAllBlocksFree(conditional->port);
}

TEST_F(RouterConditionalPdTest, ALocalRequestEndedEarlyFreesEveryBlock) {
  auto conditional = Pd({"--pd-local-prefill-max-tokens", "64"});
  ASSERT_NE(conditional, nullptr);
  const double prefill_prompts = Metric(prefill_->http_port, "tandem_engine_prompt_tokens_total");
  const std::string aborted = "tandem_engine_aborted_requests_total";
  const double decode_aborted = Metric(decode_->http_port, aborted);
  {  // The client goes away mid-stream.
    TestClient c(static_cast<uint16_t>(conditional->port), 60);
    ASSERT_TRUE(c.SendRequest("POST", "/generate", Generate(40, 400, true).dump(),
                              "Content-Type: application/json\r\n"));
    std::optional<ClientResponse> head = c.ReadHead();
    ASSERT_TRUE(head.has_value());
    ASSERT_EQ(head->status, 200);
    ASSERT_TRUE(c.ReadChunk().has_value());  // tokens are flowing
  }                                          // closes the connection
  // The decode worker aborted the leg (it did not run to its 400 tokens).
  EXPECT_TRUE(WaitForMetricAtLeast(decode_->http_port, aborted, decode_aborted + 1));
  // Aborted by rid while it streams.
  TestClient c(static_cast<uint16_t>(conditional->port), 60);
  ASSERT_TRUE(c.SendRequest("POST", "/generate", Generate(40, 400, true, "local-abort").dump(),
                            "Content-Type: application/json\r\n"));
  std::optional<ClientResponse> head = c.ReadHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(c.ReadChunk().has_value());
  ClientResponse abort = RouterRequest(conditional->port, "POST", "/abort_request",
                                       json{{"rid", "local-abort"}}.dump());
  EXPECT_EQ(abort.status, 200) << abort.body;
  std::string sse;
  std::optional<std::string> chunk;
  while ((chunk = c.ReadChunk()) && !chunk->empty()) sse += *chunk;
  EXPECT_NE(sse.find("abort"), std::string::npos) << sse;
  EXPECT_TRUE(WaitForMetricAtLeast(decode_->http_port, aborted, decode_aborted + 2));
  EXPECT_EQ(Metric(conditional->port,
                   "tandem_router_disaggregation_decisions_total{decision=\"local_short\"}"),
            2);
  EXPECT_EQ(Metric(prefill_->http_port, "tandem_engine_prompt_tokens_total"), prefill_prompts);
  ExpectAllBlocksFree(conditional->port);
}

TEST_F(RouterConditionalPdTest, ADecodeWorkerThatRefusesToPrefillGetsThePromptAsKv) {
  auto refusing = StartWorker("decode", {"--allow-local-prefill=false"});
  ASSERT_NE(refusing, nullptr);
  auto conditional =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
                   prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode",
                   refusing->url(), "--pd-local-prefill-max-tokens", "32"});
  auto always_pd = Pd();
  ASSERT_NE(conditional, nullptr);
  ASSERT_NE(always_pd, nullptr);
  const json tokens = OutputIds(conditional->port, Generate(32, 12, false));
  ASSERT_EQ(tokens.size(), 12u);
  EXPECT_EQ(OutputIds(always_pd->port, Generate(32, 12, false)), tokens);
  // Decided local, refused, sent as a pair at once.
  EXPECT_EQ(Metric(conditional->port,
                   "tandem_router_disaggregation_decisions_total{decision=\"local_short\"}"),
            1);
  EXPECT_EQ(
      Metric(conditional->port, "tandem_router_disaggregation_decisions_total{decision=\"pd\"}"),
      1);
  EXPECT_EQ(Metric(conditional->port, "tandem_router_retries_total"), 0);
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(conditional->port, kTestAdminKey, refusing->http_port, &why))
      << why;
}

}  // namespace
}  // namespace tandem::itest
