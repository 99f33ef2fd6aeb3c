// Scoring through tandem-router, end to end: zero-token requests (max_new_tokens 0 /
// max_tokens 0), logprobs with real token text, and prompt logprobs (/generate
// logprob_start_len, completions echo), in plain mode (tandem-decode --local-prefill) and PD mode
// (tandem-prefill + tandem-decode), streamed and not. After the requests, every KV block of every
// worker is free again. Bounded waits only.
#include <string>
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

const char kPrompt[] = "Tell me a fortune about the sea.";
const char kModel[] = "tandem-tiny-fortunes";

ClientResponse Post(int port, const std::string& target, const json& body) {
  TestClient c(static_cast<uint16_t>(port), 60);
  EXPECT_TRUE(c.connected());
  EXPECT_TRUE(c.SendRequest("POST", target, body.dump(),
                            "Content-Type: application/json\r\nConnection: close\r\n"));
  std::optional<ClientResponse> r = c.ReadResponse();
  EXPECT_TRUE(r.has_value()) << target;
  return r.value_or(ClientResponse{});
}

// The JSON objects of an SSE body's "data: {...}" lines; `done` set when [DONE] ended it.
std::vector<json> SseEvents(const std::string& body, bool* done) {
  std::vector<json> events;
  *done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(json::parse(data));
  }
  return events;
}

class RouterScoringTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
    plain_ =
        StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls", colocated_->url()})
            .release();
    pd_ = StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
                       prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode",
                       decode_->url()})
              .release();
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete pd_;
    for (WorkerProcess* w : {colocated_, prefill_, decode_}) delete w;
  }
  // Every worker's blocks are free once the prefix caches are flushed: no request left any held.
  static void ExpectAllBlocksFree() {
    std::string why;
    EXPECT_TRUE(WaitForAllKvBlocksFree(plain_->port, kTestAdminKey, colocated_->http_port, &why))
        << why;
    EXPECT_TRUE(WaitForAllKvBlocksFree(pd_->port, kTestAdminKey, prefill_->http_port, &why)) << why;
    EXPECT_TRUE(WaitForAllKvBlocksFree(pd_->port, kTestAdminKey, decode_->http_port, &why)) << why;
  }

  static WorkerProcess* colocated_;
  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
  static RouterProcess* plain_;
  static RouterProcess* pd_;
};
WorkerProcess* RouterScoringTest::colocated_ = nullptr;
WorkerProcess* RouterScoringTest::prefill_ = nullptr;
WorkerProcess* RouterScoringTest::decode_ = nullptr;
RouterProcess* RouterScoringTest::plain_ = nullptr;
RouterProcess* RouterScoringTest::pd_ = nullptr;

// SGLang's answer to max_new_tokens 0: no text, no ids, finish_reason length 0, the prompt
// counted; the same in plain and PD mode, whole and streamed, on every route.
TEST_F(RouterScoringTest, ZeroTokenRequestsEndWithLengthZeroInEveryMode) {
  for (RouterProcess* router : {plain_, pd_}) {
    const std::string mode = router == plain_ ? "plain" : "pd";
    json generate = {{"text", kPrompt}, {"sampling_params", {{"max_new_tokens", 0}}}};
    ClientResponse g = Post(router->port, "/generate", generate);
    ASSERT_EQ(g.status, 200) << mode << ": " << g.body;
    json jg = json::parse(g.body);
    EXPECT_EQ(jg["text"], "") << g.body;
    EXPECT_EQ(jg["output_ids"], json::array()) << g.body;
    EXPECT_EQ(jg["meta_info"]["finish_reason"], json({{"type", "length"}, {"length", 0}}))
        << g.body;
    EXPECT_EQ(jg["meta_info"]["completion_tokens"], 0) << g.body;
    EXPECT_GT(jg["meta_info"]["prompt_tokens"].get<int>(), 0) << g.body;

    generate["stream"] = true;
    ClientResponse gs = Post(router->port, "/generate", generate);
    ASSERT_EQ(gs.status, 200) << mode << ": " << gs.body;
    bool done = false;
    std::vector<json> events = SseEvents(gs.body, &done);
    EXPECT_TRUE(done) << gs.body;
    ASSERT_EQ(events.size(), 1u) << gs.body;
    EXPECT_EQ(events[0]["text"], "");
    EXPECT_EQ(events[0]["meta_info"]["finish_reason"]["length"], 0) << gs.body;

    json completion = {{"model", kModel}, {"prompt", kPrompt}, {"max_tokens", 0}};
    ClientResponse c = Post(router->port, "/v1/completions", completion);
    ASSERT_EQ(c.status, 200) << mode << ": " << c.body;
    json jc = json::parse(c.body);
    EXPECT_EQ(jc["choices"][0]["text"], "") << c.body;
    EXPECT_EQ(jc["choices"][0]["finish_reason"], "length") << c.body;
    EXPECT_EQ(jc["usage"]["completion_tokens"], 0) << c.body;

    json chat = {{"model", kModel},
                 {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                 {"max_tokens", 0},
                 {"stream", true}};
    ClientResponse ch = Post(router->port, "/v1/chat/completions", chat);
    ASSERT_EQ(ch.status, 200) << mode << ": " << ch.body;
    events = SseEvents(ch.body, &done);
    EXPECT_TRUE(done) << ch.body;
    ASSERT_FALSE(events.empty()) << ch.body;
    EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length") << ch.body;
  }
  ExpectAllBlocksFree();
}

}  // namespace
}  // namespace tandem::itest
