// Scoring through tandem-router, end to end: zero-token requests (max_new_tokens 0 /
// max_tokens 0), logprobs with real token text, and prompt logprobs (/generate
// logprob_start_len, completions echo), in plain mode (tandem-decode --local-prefill) and PD mode
// (tandem-prefill + tandem-decode), streamed and not. After the requests, every KV block of every
// worker is free again. Bounded waits only.
#include <optional>
#include <string>
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
using testing::TestClient;

const char kModel[] = "tandem-tiny-english";

ClientResponse Post(int port, const std::string& target, const json& body) {
  TestClient c(static_cast<uint16_t>(port), 60);
  EXPECT_TRUE(c.connected());
  EXPECT_TRUE(c.SendRequest("POST", target, body.dump(),
                            "Content-Type: application/json\r\nConnection: close\r\n"));
  std::optional<ClientResponse> r = c.ReadResponse();
  EXPECT_TRUE(r.has_value()) << target;
  return r.value_or(ClientResponse{});
}

class RouterScoringTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({.shared_routers = true}); }
  // Every worker's blocks are free once the prefix caches are flushed: no request left any held.
  static void ExpectAllBlocksFree() {
    std::string why;
    EXPECT_TRUE(SharedWorkersBlocksFree(&why)) << why;
  }

  // Legs the decode worker finished (its /metrics).
  static std::optional<double> DecodeLegs() {
    return MetricValue(HttpGet(decode_->http_port, "/metrics").body,
                       "tandem_worker_requests_total{outcome=\"finished\"}");
  }
};

// SGLang's answer to max_new_tokens 0: no text, no ids, finish_reason length 0, the prompt
// counted; the same in plain and PD mode, whole and streamed, on every route.
TEST_F(RouterScoringTest, ZeroTokenRequestsEndWithLengthZeroInEveryMode) {
  const std::optional<double> decode_legs_before = DecodeLegs();
  ASSERT_TRUE(decode_legs_before.has_value());
  for (RouterProcess* router : {plain_.get(), pd_.get()}) {
    const std::string mode = router == plain_.get() ? "plain" : "pd";
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
  // In PD mode the prefill worker answered alone: the decode worker saw no leg.
  EXPECT_EQ(DecodeLegs(), decode_legs_before);
  ExpectAllBlocksFree();
}

// Completions echo with logprobs (lm-eval's loglikelihood): the prompt's text and tokens come
// first, the first token's logprob null; the prefill side computes them, so PD mode gives the
// same bits as plain mode, with max_tokens 0 and with generated tokens after the prompt.
TEST_F(RouterScoringTest, EchoScoresThePromptIdenticallyInPlainAndPdMode) {
  for (int max_tokens : {0, 4}) {
    json body = {{"model", kModel},  {"prompt", kPrompt},  {"max_tokens", max_tokens},
                 {"temperature", 0}, {"ignore_eos", true}, {"echo", true},
                 {"logprobs", 2}};
    ClientResponse plain = Post(plain_->port, "/v1/completions", body);
    ClientResponse pd = Post(pd_->port, "/v1/completions", body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    ASSERT_EQ(pd.status, 200) << pd.body;
    const json a = json::parse(plain.body);
    const json b = json::parse(pd.body);
    const json& lp = a["choices"][0]["logprobs"];
    const int prompt_tokens = a["usage"]["prompt_tokens"].get<int>();
    ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(prompt_tokens + max_tokens)) << plain.body;
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    for (size_t i = 1; i < lp["token_logprobs"].size(); ++i) {
      EXPECT_TRUE(lp["token_logprobs"][i].is_number()) << i << ": " << plain.body;
      EXPECT_EQ(lp["top_logprobs"][i].size() >= 2u, true) << i;
    }
    const std::string text = a["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text.substr(0, std::string(kPrompt).size()), kPrompt);
    std::string joined;  // the prompt's tokens spell it (the tiny model adds no BOS)
    for (int i = 0; i < prompt_tokens; ++i) joined += lp["tokens"][i].get<std::string>();
    EXPECT_EQ(joined, kPrompt);
    EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
    EXPECT_EQ(b["choices"][0]["logprobs"], lp) << pd.body;

    body["stream"] = true;
    ClientResponse streamed = Post(pd_->port, "/v1/completions", body);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    bool done = false;
    std::string streamed_text;
    json tokens = json::array();
    for (const json& e : SseEvents(streamed.body, &done)) {
      if (e["choices"].empty()) continue;
      streamed_text += e["choices"][0]["text"].get<std::string>();
      if (e["choices"][0]["logprobs"].is_null()) continue;
      for (const json& t : e["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(streamed_text, text);
    EXPECT_EQ(tokens, lp["tokens"]);
  }
  ExpectAllBlocksFree();
}

// SGLang's prompt logprobs on /generate: input_token_logprobs from logprob_start_len with the
// first entry null, texts with return_text_in_logprobs, alternatives per position; the same in
// PD mode (computed by the prefill worker) as in plain mode, streamed and not.
TEST_F(RouterScoringTest, GenerateInputTokenLogprobsInPlainAndPdMode) {
  json body = {
      {"text", kPrompt},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 3}, {"ignore_eos", true}}},
      {"return_logprob", true},
      {"logprob_start_len", 0},
      {"top_logprobs_num", 2},
      {"return_text_in_logprobs", true}};
  ClientResponse plain = Post(plain_->port, "/generate", body);
  ClientResponse pd = Post(pd_->port, "/generate", body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(pd.status, 200) << pd.body;
  const json a = json::parse(plain.body)["meta_info"];
  const json b = json::parse(pd.body)["meta_info"];
  const json& input = a["input_token_logprobs"];
  ASSERT_EQ(input.size(), a["prompt_tokens"].get<size_t>()) << plain.body;
  EXPECT_TRUE(input[0][0].is_null());
  EXPECT_TRUE(a["input_top_logprobs"][0].is_null());
  for (size_t i = 1; i < input.size(); ++i) {
    EXPECT_TRUE(input[i][0].is_number()) << plain.body;
    EXPECT_TRUE(input[i][2].is_string()) << plain.body;
    EXPECT_EQ(a["input_top_logprobs"][i].size(), 2u);
  }
  EXPECT_TRUE(a["output_token_logprobs"][0][2].is_string()) << plain.body;
  for (const char* key : {"input_token_logprobs", "input_top_logprobs", "output_token_logprobs",
                          "output_top_logprobs"}) {
    EXPECT_EQ(b[key], a[key]) << key << ": " << pd.body;
  }
  // A start inside the prompt: the tail of the same list, its first entry null.
  body["logprob_start_len"] = 3;
  ClientResponse tail = Post(pd_->port, "/generate", body);
  ASSERT_EQ(tail.status, 200) << tail.body;
  const json t = json::parse(tail.body)["meta_info"]["input_token_logprobs"];
  ASSERT_EQ(t.size(), input.size() - 3);
  EXPECT_TRUE(t[0][0].is_null());
  for (size_t i = 1; i < t.size(); ++i) EXPECT_EQ(t[i], input[i + 3]);
  // Streamed through the pair: the events carry the same prompt logprobs.
  body["logprob_start_len"] = 0;
  body["stream"] = true;
  ClientResponse s = Post(pd_->port, "/generate", body);
  ASSERT_EQ(s.status, 200) << s.body;
  bool done = false;
  std::vector<json> events = SseEvents(s.body, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["meta_info"]["input_token_logprobs"], input) << s.body;
  ExpectAllBlocksFree();
}

// Chat logprobs name real tokens: their text and UTF-8 bytes spell the answer.
TEST_F(RouterScoringTest, ChatLogprobsCarryRealTokenText) {
  json chat = {
      {"model", kModel},  {"messages", {{{"role", "user"}, {"content", "Tell me a fortune"}}}},
      {"max_tokens", 8},  {"temperature", 0},
      {"logprobs", true}, {"top_logprobs", 2}};
  ClientResponse r = Post(pd_->port, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  std::string from_bytes;
  for (const json& position : choice["logprobs"]["content"]) {
    EXPECT_EQ(position["token"].get<std::string>().find("token_id:"), std::string::npos);
    for (const json& b : position["bytes"]) from_bytes += static_cast<char>(b.get<int>());
  }
  // The answer ends where a stop token ended it, whose text is not part of the content.
  EXPECT_EQ(from_bytes.substr(0, choice["message"]["content"].get<std::string>().size()),
            choice["message"]["content"].get<std::string>())
      << r.body;
}

}  // namespace
}  // namespace tandem::itest
