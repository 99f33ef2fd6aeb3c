// The prompt tokens a response reports as reused from the prefix cache, end to end through
// tandem-router: SGLang's meta_info.cached_tokens and OpenAI's
// usage.prompt_tokens_details.cached_tokens, streamed and not. In PD mode (tandem-prefill +
// tandem-decode) they are what the prefill worker's radix cache served (its
// tandem_engine_cached_prompt_tokens_total moves by exactly that), and the same sequence of
// requests reports the same numbers as plain mode (a tandem-decode --local-prefill worker). A leg
// that conditional disaggregation prefills on the decode worker reports the decode worker's own
// count. Both session transports (the session socket, gRPC's Session stream) carry it, and a
// retried request reports the attempt that served it. Bounded waits only.
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
#include "tests/router/cluster_fixture.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using testing::ClientResponse;

const char kModel[] = "tandem-tiny-english";
const char kCachedMetric[] = "tandem_engine_cached_prompt_tokens_total";

// Long enough for several whole KV blocks, so a repeat has a prefix to reuse.
std::string LongPrompt() {
  std::string prompt;
  for (int i = 0; i < 6; ++i) prompt += "Tell me a fortune about the sea and the ships upon it. ";
  return prompt;
}

double Metric(int http_port, const std::string& metric) {
  return MetricValue(HttpGet(http_port, "/metrics").body, metric).value_or(-1);
}

// Polls `metric` on `http_port` until it equals `want` (up to 10 s); the last value read.
double WaitForMetric(int http_port, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double got = Metric(http_port, metric);
  while (got != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    got = Metric(http_port, metric);
  }
  return got;
}

// One way of asking: a route, a body, and where its answer puts the cached tokens.
struct Route {
  std::string name;
  std::string target;
  json body;
  bool stream = false;
  bool openai = false;
};

std::vector<Route> Routes() {
  const std::string prompt = LongPrompt();
  json generate = {
      {"text", prompt},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}, {"ignore_eos", true}}}};
  json chat = {{"model", kModel},
               {"messages", {{{"role", "user"}, {"content", prompt}}}},
               {"max_tokens", 4},
               {"temperature", 0}};
  json completion = {{"model", kModel}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  std::vector<Route> routes;
  for (bool stream : {false, true}) {
    const std::string suffix = stream ? " streamed" : "";
    json g = generate, c = chat, p = completion;
    g["stream"] = stream;
    for (json* body : {&c, &p}) {
      (*body)["stream"] = stream;
      if (stream) (*body)["stream_options"] = {{"include_usage", true}};
    }
    routes.push_back({"/generate" + suffix, "/generate", g, stream, false});
    routes.push_back({"chat" + suffix, "/v1/chat/completions", c, stream, true});
    routes.push_back({"completions" + suffix, "/v1/completions", p, stream, true});
  }
  return routes;
}

// The cached tokens `route`'s answer reports; -1 (and a test failure) when it has none.
int CachedTokens(int router_port, const Route& route) {
  ClientResponse r = RouterRequest(router_port, "POST", route.target, route.body.dump());
  EXPECT_EQ(r.status, 200) << route.name << ": " << r.body;
  if (r.status != 200) return -1;
  json answer;
  if (route.stream) {
    bool done = false;
    std::vector<json> events = SseEvents(r.body, &done);
    EXPECT_TRUE(done) << route.name << ": " << r.body;
    if (events.empty()) return -1;
    answer = events.back();  // the last event carries the counts (the usage chunk when asked)
  } else {
    answer = json::parse(r.body, nullptr, false);
  }
  const json::json_pointer where(route.openai ? "/usage/prompt_tokens_details/cached_tokens"
                                              : "/meta_info/cached_tokens");
  if (!answer.contains(where) || !answer[where].is_number_integer()) {
    ADD_FAILURE() << route.name << ": no cached_tokens in " << r.body;
    return -1;
  }
  return answer[where].get<int>();
}

class RouterCachedTokensTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({.shared_routers = true}); }
  // Empties every prefix cache, so each route starts from nothing cached.
  static void FlushAll() {
    std::string why;
    ASSERT_TRUE(SharedWorkersBlocksFree(&why)) << why;
  }
};

// The same prompt twice on every route: the repeat reports what the prefill worker reused, the
// decode worker's own cache counts none of it, and plain mode reports the same numbers.
TEST_F(RouterCachedTokensTest, PdReportsThePrefillWorkersReuseLikePlainMode) {
  for (const Route& route : Routes()) {
    SCOPED_TRACE(route.name);
    FlushAll();
    std::vector<int> pd_reports;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const double before = Metric(prefill_->http_port, kCachedMetric);
      const double decode_before = Metric(decode_->http_port, kCachedMetric);
      ASSERT_GE(before, 0);
      const int cached = CachedTokens(pd_->port, route);
      EXPECT_EQ(WaitForMetric(prefill_->http_port, kCachedMetric, before + cached) - before, cached)
          << "attempt " << attempt;
      EXPECT_EQ(Metric(decode_->http_port, kCachedMetric), decode_before);
      pd_reports.push_back(cached);
    }
    EXPECT_EQ(pd_reports[0], 0);
    EXPECT_GT(pd_reports[1], 0);

    std::vector<int> plain_reports;
    for (int attempt = 0; attempt < 2; ++attempt) {
      plain_reports.push_back(CachedTokens(plain_->port, route));
    }
    EXPECT_EQ(pd_reports, plain_reports);
  }
}

// Parallel sampling: choice 0 reports the prefill worker's reuse, the other choices the prompt
// blocks they share on the decode worker; usage sums them as plain mode does.
TEST_F(RouterCachedTokensTest, ParallelChoicesSumLikePlainMode) {
  Route chat = Routes()[1];
  chat.body["n"] = 2;
  FlushAll();
  std::vector<int> pd_reports, plain_reports;
  for (int attempt = 0; attempt < 2; ++attempt) pd_reports.push_back(CachedTokens(pd_->port, chat));
  for (int attempt = 0; attempt < 2; ++attempt) {
    plain_reports.push_back(CachedTokens(plain_->port, chat));
  }
  EXPECT_GT(pd_reports[1], pd_reports[0]);
  EXPECT_EQ(pd_reports, plain_reports);
}

// Workers without a session socket carry their legs on gRPC's Session stream: the same report.
TEST_F(RouterCachedTokensTest, GrpcSessionsReportThePrefillWorkersReuse) {
  auto prefill = StartWorker("prefill", {"--session-port", "-1"});
  auto decode = StartWorker("decode", {"--session-port", "-1"});
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  auto pd =
      StartClusterRouter({"--pd-disaggregation", "--prefill", prefill->url(),
                          std::to_string(prefill->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(pd, nullptr);
  for (const Route& route : Routes()) {
    SCOPED_TRACE(route.name);
    std::string why;
    ASSERT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, prefill->http_port, &why)) << why;
    CachedTokens(pd->port, route);
    const double before = Metric(prefill->http_port, kCachedMetric);
    const int cached = CachedTokens(pd->port, route);
    EXPECT_GT(cached, 0);
    EXPECT_EQ(WaitForMetric(prefill->http_port, kCachedMetric, before + cached) - before, cached);
  }
}

// A prefill worker killed under the router: a request that tried it first is retried on the
// other one, and reports what the attempt that served it reused.
TEST_F(RouterCachedTokensTest, ARetriedRequestReportsTheAttemptThatServedIt) {
  auto survivor = StartWorker("prefill");
  auto doomed = StartWorker("prefill");
  auto decode = StartWorker("decode");
  ASSERT_NE(survivor, nullptr);
  ASSERT_NE(doomed, nullptr);
  ASSERT_NE(decode, nullptr);
  auto pd = StartClusterRouter({"--pd-disaggregation", "--prefill", survivor->url(),
                                std::to_string(survivor->bootstrap_port), "--prefill",
                                doomed->url(), std::to_string(doomed->bootstrap_port), "--decode",
                                decode->url(), "--health-check-interval-secs", "60"});
  ASSERT_NE(pd, nullptr);
  const Route generate = Routes()[0];
  // Round robin: each prefill worker computes the prompt once and caches it.
  for (int i = 0; i < 2; ++i) CachedTokens(pd->port, generate);
  doomed->Kill();
  const double before = Metric(survivor->http_port, kCachedMetric);
  int reported = 0;
  for (int i = 0; i < 2; ++i) {
    const int cached = CachedTokens(pd->port, generate);
    EXPECT_GT(cached, 0) << "request " << i;
    reported += cached;
  }
  EXPECT_EQ(WaitForMetric(survivor->http_port, kCachedMetric, before + reported) - before,
            reported);
  EXPECT_GE(Metric(pd->port, "tandem_router_retries_total"), 1);
  // sgl-router's names: the retry on the request's route, the dead worker's failure as its
  // prefill error.
  EXPECT_GE(Metric(pd->port, "sgl_router_retries_total{route=\"/generate\""), 1);
  EXPECT_GE(Metric(pd->port, "sgl_router_pd_prefill_errors_total{worker=\"" + doomed->url() + "\""),
            1);
  EXPECT_EQ(
      Metric(pd->port, "sgl_router_pd_prefill_errors_total{worker=\"" + survivor->url() + "\""), 0);
}

// A short prompt conditional disaggregation prefills on the decode worker reports the decode
// worker's own count; the prefill worker's cache plays no part.
TEST_F(RouterCachedTokensTest, LocalLegsReportTheDecodeWorkersOwnCount) {
  auto conditional = Pd({"--pd-local-prefill-max-tokens", "4096"});
  ASSERT_NE(conditional, nullptr);
  const Route generate = Routes()[0];
  FlushAll();
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double prefill_before = Metric(prefill_->http_port, kCachedMetric);
    const double before = Metric(decode_->http_port, kCachedMetric);
    const int cached = CachedTokens(conditional->port, generate);
    EXPECT_EQ(WaitForMetric(decode_->http_port, kCachedMetric, before + cached) - before, cached)
        << "attempt " << attempt;
    EXPECT_EQ(Metric(prefill_->http_port, kCachedMetric), prefill_before);
  }
  EXPECT_EQ(Metric(conditional->port,
                   "tandem_router_disaggregation_decisions_total{decision=\"local_short\"}"),
            2);
}

}  // namespace
}  // namespace tandem::itest
