// tandem-router end to end, n > 1 and lists of prompts over real workers (cluster_fixture.h):
// choices indexed and summed as SGLang and OpenAI answer them, in plain and PD mode; n choices of
// one prompt share one prefill (one prefill leg in PD mode, one colocated worker in plain mode)
// unless prompt logprobs are asked for; seeded choices reproducible. Every KV block free after.
// Bounded waits only.
#include <chrono>
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

// The texts of an OpenAI stream's chunks by choice index (completions "text", chat
// delta.content), with the usage chunk's figures in `usage` when one came.
std::vector<std::string> TextsByIndex(const std::vector<json>& events, size_t choices,
                                      json* usage) {
  std::vector<std::string> texts(choices);
  for (const json& e : events) {
    if (e.contains("usage") && !e["usage"].is_null()) *usage = e["usage"];
    for (const json& c : e["choices"]) {
      const size_t index = c["index"].get<size_t>();
      EXPECT_LT(index, choices);
      if (index >= choices) continue;
      if (c.contains("text")) texts[index] += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) {
        texts[index] += c["delta"]["content"].get<std::string>();
      }
    }
  }
  return texts;
}

// Waits (bounded) until `w` has ended `legs` legs; returns how many it has.
double WaitForLegsEnded(const WorkerProcess& w, double legs) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  double seen = LegsEnded(w);
  while (seen < legs && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = LegsEnded(w);
  }
  return seen;
}

// The prompt tokens a sibling shares: the prompt's whole blocks below its last token.
int SharedTokens(int prompt_tokens, int block_size) {
  return block_size <= 0 ? 0 : (prompt_tokens - 1) / block_size * block_size;
}

class RouterChoicesTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({.second_colocated = true}); }
};

// n > 1 and lists of prompts, plain and PD: choices indexed prompt-major, greedy choices equal
// to the one-choice answer, usage summed with each prompt counted once, SGLang's list answers
// and streamed "index", a seeded n reproducible; every KV block free after.
TEST_F(RouterChoicesTest, NChoicesAndPromptListsPlainAndPd) {
  auto plain = Plain();
  auto pd = Pd();
  for (RouterProcess* router : {plain.get(), pd.get()}) {
    SCOPED_TRACE(router == pd.get() ? "pd" : "plain");
    const int port = router->port;
    json one = {{"prompt", kPrompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
    ClientResponse single = RouterRequest(port, "POST", "/v1/completions", one.dump());
    ASSERT_EQ(single.status, 200) << single.body;
    const json js = json::parse(single.body);
    const std::string greedy = js["choices"][0]["text"];
    const int prompt_tokens = js["usage"]["prompt_tokens"];

    json batch = one;
    batch["prompt"] = {kPrompt, "Hello"};
    batch["n"] = 2;
    ClientResponse c = RouterRequest(port, "POST", "/v1/completions", batch.dump());
    ASSERT_EQ(c.status, 200) << c.body;
    const json jc = json::parse(c.body);
    ASSERT_EQ(jc["choices"].size(), 4u) << c.body;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(jc["choices"][k]["index"], k);
    EXPECT_EQ(jc["choices"][0]["text"], greedy);
    EXPECT_EQ(jc["choices"][1]["text"], greedy);
    EXPECT_EQ(jc["choices"][2]["text"], jc["choices"][3]["text"]);
    EXPECT_EQ(jc["usage"]["completion_tokens"], 16);
    EXPECT_GT(jc["usage"]["prompt_tokens"].get<int>(), prompt_tokens);  // both prompts, once each
    EXPECT_LT(jc["usage"]["prompt_tokens"].get<int>(), 2 * prompt_tokens + 8);

    json chat = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                 {"max_tokens", 5},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"n", 3},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    ClientResponse cs = RouterRequest(port, "POST", "/v1/chat/completions", chat.dump());
    ASSERT_EQ(cs.status, 200) << cs.body;
    bool done = false;
    const std::vector<json> events = SseEvents(cs.body, &done);
    EXPECT_TRUE(done);
    json usage;
    const std::vector<std::string> texts = TextsByIndex(events, 3, &usage);
    EXPECT_FALSE(texts[0].empty());
    EXPECT_EQ(texts[1], texts[0]);
    EXPECT_EQ(texts[2], texts[0]);
    EXPECT_EQ(usage["completion_tokens"], 15) << cs.body;
    EXPECT_TRUE(events.back()["choices"].empty());  // the one usage chunk comes last

    json gen = {
        {"text", {kPrompt, "Hello"}},
        {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 3}, {"ignore_eos", true}}}};
    ClientResponse g = RouterRequest(port, "POST", "/generate", gen.dump());
    ASSERT_EQ(g.status, 200) << g.body;
    const json jg = json::parse(g.body);
    ASSERT_TRUE(jg.is_array()) << g.body;
    ASSERT_EQ(jg.size(), 2u);
    EXPECT_EQ(jg[0]["output_ids"].size(), 3u);
    EXPECT_EQ(jg[1]["meta_info"]["completion_tokens"], 3);

    json ids = {
        {"input_ids", {{5, 6, 7}, {8, 9}}},
        {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 3}, {"ignore_eos", true}}},
        {"stream", true}};
    ClientResponse gs = RouterRequest(port, "POST", "/generate", ids.dump());
    ASSERT_EQ(gs.status, 200) << gs.body;
    const std::vector<json> objects = SseEvents(gs.body, &done);
    EXPECT_TRUE(done);
    int finished[2] = {0, 0};
    for (const json& o : objects) {
      ASSERT_TRUE(o.contains("index")) << o.dump();
      if (!o["meta_info"]["finish_reason"].is_null()) ++finished[o["index"].get<int>()];
    }
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);

    // Sampled with a seed: each choice its own sample, the same ones again.
    json seeded = {{"text", kPrompt},
                   {"sampling_params",
                    {{"temperature", 1.0}, {"max_new_tokens", 8}, {"n", 3}, {"sampling_seed", 5}}}};
    ClientResponse s1 = RouterRequest(port, "POST", "/generate", seeded.dump());
    ClientResponse s2 = RouterRequest(port, "POST", "/generate", seeded.dump());
    ASSERT_EQ(s1.status, 200) << s1.body;
    ASSERT_EQ(s2.status, 200) << s2.body;
    const json j1 = json::parse(s1.body), j2 = json::parse(s2.body);
    ASSERT_EQ(j1.size(), 3u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(j1[k]["output_ids"], j2[k]["output_ids"]);
  }
  EXPECT_TRUE(AllBlocksFree(*colocated_));
  EXPECT_TRUE(AllBlocksFree(*decode_));
  EXPECT_TRUE(AllBlocksFree(*prefill_));
}

// /generate with four greedy choices of LongPrompt(`tag`) through the router on `port`: choices
// 1..3 report the prompt's shared blocks as cached tokens (OpenAI usage counts each prompt once,
// with choice 0's cached tokens: /generate shows each choice's) and the same tokens as choice 0.
// The prompt's token count in `prompt_tokens`.
void FourGreedyChoices(int port, const std::string& tag, int block_size, int* prompt_tokens) {
  json body = {{"text", LongPrompt(tag)},
               {"sampling_params",
                {{"temperature", 0}, {"max_new_tokens", 6}, {"ignore_eos", true}, {"n", 4}}}};
  ClientResponse r = RouterRequest(port, "POST", "/generate", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j.size(), 4u) << r.body;
  *prompt_tokens = j[0]["meta_info"]["prompt_tokens"];
  for (int k = 1; k < 4; ++k) {
    EXPECT_GE(j[k]["meta_info"]["cached_tokens"].get<int>(),
              SharedTokens(*prompt_tokens, block_size))
        << k << ": " << r.body;
    EXPECT_EQ(j[k]["output_ids"], j[0]["output_ids"]) << k;  // greedy: the same tokens
  }
}

// n = 4 shares one prompt: in PD mode the prefill worker runs one prefill leg and the decode
// worker four legs; in plain mode all four legs run on the leader's colocated worker (of two,
// round robin). Choices 1..3 report the shared blocks as cached tokens; greedy choices equal the
// one-choice answer; seeded choices differ from each other and come again. Asking for the
// prompt's logprobs keeps the choices independent (four prefill legs). Every block free after.
TEST_F(RouterChoicesTest, NChoicesShareOnePrefill) {
  auto pd = Pd();
  auto plain = StartClusterRouter({"--worker-urls", colocated_->url(), colocated2_->url()});
  const int block_size = Load(*decode_).kv_block_size();
  ASSERT_GT(block_size, 0);

  // PD: one prefill leg, four decode legs.
  {
    const double prefill_before = LegsEnded(*prefill_);
    const double decode_before = LegsEnded(*decode_);
    int prompt_tokens = 0;
    ASSERT_NO_FATAL_FAILURE(FourGreedyChoices(pd->port, "pd", block_size, &prompt_tokens));
    ASSERT_GE(prompt_tokens, 2 * block_size);
    EXPECT_EQ(WaitForLegsEnded(*decode_, decode_before + 4), decode_before + 4);
    EXPECT_EQ(LegsEnded(*prefill_), prefill_before + 1) << "one prefill for the four choices";
  }

  // Plain: the four legs on one colocated worker.
  {
    const double before[2] = {LegsEnded(*colocated_), LegsEnded(*colocated2_)};
    int prompt_tokens = 0;
    ASSERT_NO_FATAL_FAILURE(FourGreedyChoices(plain->port, "plain", block_size, &prompt_tokens));
    double served[2] = {0, 0};
    const auto deadline = std::chrono::steady_clock::now() + seconds(30);
    for (;;) {
      served[0] = LegsEnded(*colocated_) - before[0];
      served[1] = LegsEnded(*colocated2_) - before[1];
      if (served[0] + served[1] >= 4 || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE((served[0] == 4 && served[1] == 0) || (served[0] == 0 && served[1] == 4))
        << served[0] << " and " << served[1];
  }

  // Seeded, through both routers: each choice its own sample (seed + j), the same ones again.
  for (RouterProcess* router : {pd.get(), plain.get()}) {
    SCOPED_TRACE(router == pd.get() ? "pd" : "plain");
    json seeded = {{"text", LongPrompt("seeded")},
                   {"sampling_params",
                    {{"temperature", 1.0},
                     {"max_new_tokens", 16},
                     {"ignore_eos", true},
                     {"n", 4},
                     {"sampling_seed", 11}}}};
    ClientResponse s1 = RouterRequest(router->port, "POST", "/generate", seeded.dump());
    ClientResponse s2 = RouterRequest(router->port, "POST", "/generate", seeded.dump());
    ASSERT_EQ(s1.status, 200) << s1.body;
    ASSERT_EQ(s2.status, 200) << s2.body;
    const json j1 = json::parse(s1.body), j2 = json::parse(s2.body);
    ASSERT_EQ(j1.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(j1[k]["output_ids"], j2[k]["output_ids"]) << k;
      for (int m = 0; m < k; ++m) EXPECT_NE(j1[k]["output_ids"], j1[m]["output_ids"]) << m << k;
    }
  }

  // Prompt logprobs: no sharing, a prefill leg per choice.
  {
    const double prefill_before = LegsEnded(*prefill_);
    json body = {{"text", LongPrompt("scored")},
                 {"return_logprob", true},
                 {"logprob_start_len", 0},
                 {"sampling_params",
                  {{"temperature", 0}, {"max_new_tokens", 2}, {"ignore_eos", true}, {"n", 4}}}};
    ClientResponse r = RouterRequest(pd->port, "POST", "/generate", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    ASSERT_EQ(j.size(), 4u) << r.body;
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(j[k]["meta_info"]["input_token_logprobs"].size(),
                j[k]["meta_info"]["prompt_tokens"].get<size_t>())
          << k;
    }
    EXPECT_EQ(WaitForLegsEnded(*prefill_, prefill_before + 4), prefill_before + 4);
  }
  EXPECT_TRUE(AllBlocksFree(*colocated_));
  EXPECT_TRUE(AllBlocksFree(*colocated2_));
  EXPECT_TRUE(AllBlocksFree(*decode_));
  EXPECT_TRUE(AllBlocksFree(*prefill_));
}

}  // namespace
}  // namespace tandem::itest
