// tandem-router end to end, the routes: real tandem-decode --local-prefill workers (plain mode)
// and a tandem-prefill + tandem-decode pair (PD mode) on loopback (cluster_fixture.h), driven over
// raw HTTP. Checks the routes' shapes, that greedy outputs through PD equal the plain path's, and
// that a bad body is a 400 naming the field while other requests run. Limits and the admin API:
// router_limits_itest.cc; n > 1: router_choices_itest.cc; where legs go (freed blocks, spread,
// a killed worker): router_legs_itest.cc. Bounded waits only.
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"
#include "tests/integration/router_process.h"
#include "tests/router/cluster_fixture.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using testing::ClientResponse;
using testing::TestClient;

class RouterClusterTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({}); }
};

TEST_F(RouterClusterTest, GenerateShapesAndPdEqualsPlain) {
  auto plain = Plain();
  auto pd = Pd();
  ClientResponse a = RouterRequest(plain->port, "POST", "/generate", GenerateBody(12, false).dump(),
                                   "x-request-id: my-rid-1\r\n");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.headers["x-request-id"], "my-rid-1");
  json ja = json::parse(a.body);
  ASSERT_TRUE(ja["text"].is_string());
  ASSERT_EQ(ja["output_ids"].size(), 12u) << a.body;
  EXPECT_EQ(ja["meta_info"]["id"], "my-rid-1");
  EXPECT_EQ(ja["meta_info"]["completion_tokens"], 12);
  EXPECT_GT(ja["meta_info"]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(ja["meta_info"]["e2e_latency"].is_number());

  ClientResponse b = RouterRequest(pd->port, "POST", "/generate", GenerateBody(12, false).dump());
  ASSERT_EQ(b.status, 200) << b.body;
  json jb = json::parse(b.body);
  // The whole body is the same in both modes but for what names or times the request, and
  // cached_tokens, which depends on what the suite's shared workers ran before.
  const auto modulo_ids_and_timings = [](json body) {
    EXPECT_TRUE(body["meta_info"]["cached_tokens"].is_number_integer()) << body;
    for (const char* key : {"id", "e2e_latency", "cached_tokens"}) body["meta_info"].erase(key);
    return body;
  };
  EXPECT_EQ(modulo_ids_and_timings(jb), modulo_ids_and_timings(ja));

  // input_ids instead of text, streamed: cumulative text, the same ids, [DONE].
  json ids_body = {
      {"input_ids", json::array({1, 450, 1276, 310, 263})},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 8}, {"ignore_eos", true}}},
      {"stream", true}};
  ClientResponse s = RouterRequest(pd->port, "POST", "/generate", ids_body.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["content-type"], "text/event-stream");
  bool done = false;
  std::vector<json> events = SseEvents(s.body, &done);
  EXPECT_TRUE(done) << s.body;
  ASSERT_FALSE(events.empty());
  ids_body["stream"] = false;
  ClientResponse ns = RouterRequest(plain->port, "POST", "/generate", ids_body.dump());
  ASSERT_EQ(ns.status, 200) << ns.body;
  EXPECT_EQ(modulo_ids_and_timings(events.back()), modulo_ids_and_timings(json::parse(ns.body)))
      << s.body;
}

TEST_F(RouterClusterTest, OpenAiRoutesStreamAndNotWithUsage) {
  auto pd = Pd();
  json completion = {{"model", "tandem-tiny-english"},
                     {"prompt", kPrompt},
                     {"max_tokens", 6},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  ClientResponse c = RouterRequest(pd->port, "POST", "/v1/completions", completion.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  json jc = json::parse(c.body);
  EXPECT_EQ(jc["object"], "text_completion");
  EXPECT_EQ(jc["usage"]["completion_tokens"], 6);
  EXPECT_EQ(jc["usage"]["total_tokens"].get<int>(), jc["usage"]["prompt_tokens"].get<int>() + 6);
  EXPECT_EQ(jc["choices"][0]["finish_reason"], "length");

  completion["stream"] = true;
  completion["stream_options"] = {{"include_usage", true}};
  ClientResponse cs = RouterRequest(pd->port, "POST", "/v1/completions", completion.dump());
  ASSERT_EQ(cs.status, 200) << cs.body;
  bool done = false;
  std::vector<json> events = SseEvents(cs.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6) << cs.body;
  std::string streamed;
  for (const json& e : events) {
    if (!e["choices"].empty()) streamed += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, jc["choices"][0]["text"].get<std::string>());

  json chat = {{"model", "tandem-tiny-english"},
               {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
               {"max_tokens", 5},
               {"temperature", 0},
               {"ignore_eos", true}};
  ClientResponse ch = RouterRequest(pd->port, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(ch.status, 200) << ch.body;
  json jch = json::parse(ch.body);
  EXPECT_EQ(jch["object"], "chat.completion");
  EXPECT_EQ(jch["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(jch["usage"]["completion_tokens"], 5);
  chat["stream"] = true;
  ClientResponse chs = RouterRequest(pd->port, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(chs.status, 200) << chs.body;
  events = SseEvents(chs.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  std::string content;
  for (const json& e : events) {
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      content += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(content, jch["choices"][0]["message"]["content"].get<std::string>());

  ClientResponse models = RouterRequest(pd->port, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tandem-tiny-english") << models.body;
}

// OpenAI top_logprobs through a PD pair: every position has the alternatives asked for, the
// greedy choice first with its own logprob, and streaming gives the same positions.
TEST_F(RouterClusterTest, ChatTopLogprobsThroughAPair) {
  auto pd = Pd();
  json chat = {{"model", "tandem-tiny-english"},
               {"messages", {{{"role", "user"}, {"content", "Tell me a fortune"}}}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", true},
               {"top_logprobs", 3}};
  ClientResponse whole = RouterRequest(pd->port, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json content = json::parse(whole.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u) << whole.body;
  for (const json& position : content) {
    ASSERT_EQ(position["top_logprobs"].size(), 3u) << position.dump();
    EXPECT_EQ(position["top_logprobs"][0]["token"], position["token"]) << position.dump();
    EXPECT_EQ(position["top_logprobs"][0]["logprob"], position["logprob"]) << position.dump();
    EXPECT_GE(position["top_logprobs"][0]["logprob"].get<double>(),
              position["top_logprobs"][2]["logprob"].get<double>());
  }
  chat["stream"] = true;
  ClientResponse streamed = RouterRequest(pd->port, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  bool done = false;
  json positions = json::array();
  for (const json& e : SseEvents(streamed.body, &done)) {
    if (e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
    for (const json& p : e["choices"][0]["logprobs"]["content"]) positions.push_back(p);
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(positions, content);
  // Alternatives without logprobs: the client's mistake, named.
  chat["logprobs"] = false;
  ClientResponse bad = RouterRequest(pd->port, "POST", "/v1/chat/completions", chat.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("top_logprobs requires logprobs: true"), std::string::npos) << bad.body;
}

TEST_F(RouterClusterTest, BadBodyIs400NamingTheFieldWhileOthersRun) {
  auto plain = Plain();
  json long_body = GenerateBody(40, true);
  TestClient streaming(static_cast<uint16_t>(plain->port), 60);
  ASSERT_TRUE(streaming.SendRequest("POST", "/generate", long_body.dump(),
                                    "Content-Type: application/json\r\n"));
  ClientResponse bad =
      RouterRequest(plain->port, "POST", "/generate",
                    R"({"text":"hi","sampling_params":{"max_new_tokens":"many"}})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("max_new_tokens"), std::string::npos) << bad.body;
  EXPECT_EQ(json::parse(bad.body)["error"]["code"], 400);
  ClientResponse not_json = RouterRequest(plain->port, "POST", "/v1/completions", "{nope");
  EXPECT_EQ(not_json.status, 400) << not_json.body;
  std::optional<ClientResponse> ok = streaming.ReadResponse();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
  bool done = false;
  SseEvents(ok->body, &done);
  EXPECT_TRUE(done) << ok->body;
}

}  // namespace
}  // namespace tandem::itest
