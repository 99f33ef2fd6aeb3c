// tandem-router end to end: real tandem-decode --local-prefill workers (plain mode) and a
// tandem-prefill + tandem-decode pair (PD mode) on loopback, driven over raw HTTP. Checks the
// routes' shapes and status codes, that greedy outputs through PD equal the plain path's, limits
// (429, 401, 400 while other requests run), the admin API, a killed worker, and that a client
// disconnect mid-stream leaves both workers with every KV block free. Bounded waits only. Workers
// and the router killed with requests in flight: tests/faults/.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/worker.grpc.pb.h"
#include "router/workers/cluster_credentials.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::ClientResponse;
using testing::TestClient;

const char kApiKey[] = "client-key-1";
const char kAdminKey[] = "admin-key-2";

using Worker = WorkerProcess;

using Router = RouterProcess;

// The shared launcher's router (tests/integration/router_process.h), holding the cluster secret.
std::unique_ptr<Router> StartClusterRouter(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--cluster-secret", kTestClusterSecret});
  return StartRouter(extra);
}

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

// A stub authenticated for `w` (proven at once).
std::unique_ptr<proto::Worker::Stub> ProvenStub(const Worker& w) {
  auto channel = router::ConnectProvenWorker(w.grpc_address(), kTestClusterSecret,
                                             absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(channel.ok()) << channel.status();
  return proto::Worker::NewStub(
      channel.ok() ? *channel : router::CreateWorkerChannel(w.grpc_address(), "", nullptr));
}

proto::LoadReport Load(const Worker& w) {
  auto stub = ProvenStub(w);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  proto::LoadReport load;
  EXPECT_TRUE(stub->GetLoad(&ctx, proto::LoadRequest(), &load).ok());
  return load;
}

// Flushes the radix cache until every block of `w` is free (bounded wait).
bool AllBlocksFree(const Worker& w) {
  auto stub = ProvenStub(w);
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    proto::FlushCacheResponse flush;
    stub->FlushCache(&ctx, proto::FlushCacheRequest(), &flush);
    proto::LoadReport load = Load(w);
    if (flush.flushed() && load.total_kv_blocks() > 0 &&
        load.free_kv_blocks() == load.total_kv_blocks()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

const char kPrompt[] = "Tell me a fortune about the sea.";

json GenerateBody(int max_new, bool stream) {
  return {
      {"text", kPrompt},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new}, {"ignore_eos", true}}},
      {"stream", stream}};
}

class RouterClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // With the secret the router holds: a router with a secret trusts only workers that prove it.
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
    colocated2_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
  }
  static void TearDownTestSuite() {
    for (Worker* w : {colocated_, colocated2_, prefill_, decode_}) delete w;
  }
  static std::unique_ptr<Router> Plain(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--worker-urls", colocated_->url()});
    return StartClusterRouter(extra);
  }
  static std::unique_ptr<Router> Pd(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(),
                 {"--pd-disaggregation", "--prefill", prefill_->url(),
                  std::to_string(prefill_->bootstrap_port), "--decode", decode_->url()});
    return StartClusterRouter(extra);
  }

  static Worker* colocated_;
  static Worker* colocated2_;
  static Worker* prefill_;
  static Worker* decode_;
};
Worker* RouterClusterTest::colocated_ = nullptr;
Worker* RouterClusterTest::colocated2_ = nullptr;
Worker* RouterClusterTest::prefill_ = nullptr;
Worker* RouterClusterTest::decode_ = nullptr;

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

TEST_F(RouterClusterTest, QueueFullIs429AndKeysAreChecked) {
  auto plain = Plain({"--max-concurrent-requests", "1", "--queue-size", "0", "--api-key", kApiKey,
                      "--admin-key", kAdminKey});
  EXPECT_EQ(RouterRequest(plain->port, "POST", "/generate", GenerateBody(2, false).dump()).status,
            401);
  ClientResponse wrong =
      RouterRequest(plain->port, "POST", "/generate", GenerateBody(2, false).dump(), Auth("nope"));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(json::parse(wrong.body)["error"]["type"], "authentication_error") << wrong.body;
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/list_workers", "", Auth(kApiKey)).status, 401);
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/health").status, 200);  // probes need no key

  // A long stream holds the only slot while the next request arrives. On a loaded machine the
  // stream (about 0.2 s of decoding) can end before that request is admitted, so a 200 there is
  // retried with a new stream; a router that never answers 429 fails every attempt.
  json long_body = GenerateBody(400, true);
  bool saw_429 = false;
  for (int attempt = 0; attempt < 5 && !saw_429; ++attempt) {
    TestClient streaming(static_cast<uint16_t>(plain->port), 60);
    ASSERT_TRUE(streaming.SendRequest("POST", "/generate", long_body.dump(), Auth(kApiKey)));
    std::optional<ClientResponse> head = streaming.ReadHead();  // the first one is running
    ASSERT_TRUE(head.has_value());
    ASSERT_EQ(head->status, 200);
    ClientResponse full = RouterRequest(plain->port, "POST", "/generate",
                                        GenerateBody(2, false).dump(), Auth(kApiKey));
    if (full.status == 429) {
      saw_429 = true;
      EXPECT_NE(full.body.find("--queue-size"), std::string::npos) << full.body;
      EXPECT_EQ(full.headers["retry-after"], "1");
    } else {
      EXPECT_EQ(full.status, 200) << full.body;  // the stream had ended first
    }
    for (;;) {  // drain the stream, then the slot is free again
      std::optional<std::string> chunk = streaming.ReadChunk();
      ASSERT_TRUE(chunk.has_value());
      if (chunk->empty()) break;
    }
  }
  EXPECT_TRUE(saw_429) << "a request beyond --max-concurrent-requests 1 with --queue-size 0 "
                          "was never refused";
  // A batch takes a slot per choice: n = 2 with one slot and no queue is refused whole, and the
  // choice that was running gives its slot back (the next request is served).
  json batch = GenerateBody(100, false);
  batch["sampling_params"]["n"] = 2;
  bool batch_429 = false;
  for (int attempt = 0; attempt < 5 && !batch_429; ++attempt) {
    ClientResponse r = RouterRequest(plain->port, "POST", "/generate", batch.dump(), Auth(kApiKey));
    // 200 only if the first choice ended before the second asked for the slot.
    if (r.status != 429) {
      EXPECT_EQ(r.status, 200) << r.body;
    }
    batch_429 = r.status == 429;
  }
  EXPECT_TRUE(batch_429) << "a batch of 2 was served with one slot and no queue";
  EXPECT_EQ(
      RouterRequest(plain->port, "POST", "/generate", GenerateBody(2, false).dump(), Auth(kApiKey))
          .status,
      200);
}

TEST_F(RouterClusterTest, AdminAddListRemoveAndServerInfo) {
  auto plain = Plain({"--admin-key", kAdminKey});
  ClientResponse list = RouterRequest(plain->port, "GET", "/list_workers", "", Auth(kAdminKey));
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(json::parse(list.body)["urls"], json::array({colocated_->url()}));
  EXPECT_EQ(RouterRequest(plain->port, "POST", "/add_worker?url=" + colocated2_->url()).status,
            401);
  ClientResponse added = RouterRequest(plain->port, "POST", "/add_worker?url=" + colocated2_->url(),
                                       "", Auth(kAdminKey));
  EXPECT_EQ(added.status, 200) << added.body;
  ClientResponse dup = RouterRequest(plain->port, "POST", "/workers",
                                     json({{"url", colocated2_->url()}}).dump(), Auth(kAdminKey));
  EXPECT_EQ(dup.status, 409) << dup.body;
  ClientResponse bad =
      RouterRequest(plain->port, "POST", "/workers",
                    R"({"url":"http://127.0.0.1:9","worker_type":"prefill"})", Auth(kAdminKey));
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("worker_type"), std::string::npos) << bad.body;
  ClientResponse workers = RouterRequest(plain->port, "GET", "/workers", "", Auth(kAdminKey));
  ASSERT_EQ(workers.status, 200);
  EXPECT_EQ(json::parse(workers.body)["workers"].size(), 2u) << workers.body;
  // Every worker advertises its session socket in Health; the router learns the port at the
  // first health check, which for a worker added just now may not have run yet (bounded wait).
  bool all_learned = false;
  for (const auto deadline = std::chrono::steady_clock::now() + seconds(15);
       !all_learned && std::chrono::steady_clock::now() < deadline;) {
    workers = RouterRequest(plain->port, "GET", "/workers", "", Auth(kAdminKey));
    ASSERT_EQ(workers.status, 200);
    all_learned = true;
    for (const json& w : json::parse(workers.body)["workers"]) {
      all_learned = all_learned && w["session_port"].get<int>() > 0;
    }
    if (!all_learned) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(all_learned) << workers.body;

  ClientResponse info = RouterRequest(plain->port, "GET", "/get_server_info");
  ASSERT_EQ(info.status, 200) << info.body;
  json ji = json::parse(info.body);
  ASSERT_TRUE(ji["internal_states"].is_array());
  ASSERT_FALSE(ji["internal_states"].empty());
  // No speculative decoding: no accept length (bench_serving prints a row whenever it is there).
  for (const json& state : ji["internal_states"]) {
    EXPECT_FALSE(state.contains("avg_spec_accept_length")) << info.body;
  }
  for (const json& w : ji["workers"]) {
    if (w.contains("error")) continue;  // a worker that did not answer has no state
    EXPECT_TRUE(w["internal_states"][0].contains("cache_hit_rate")) << info.body;
    EXPECT_FALSE(w["internal_states"][0].contains("avg_spec_accept_length")) << info.body;
  }
  ClientResponse loads = RouterRequest(plain->port, "GET", "/get_loads");
  EXPECT_EQ(loads.status, 200) << loads.body;

  ClientResponse removed =
      RouterRequest(plain->port, "DELETE", "/workers", json({{"url", colocated2_->url()}}).dump(),
                    Auth(kAdminKey));
  EXPECT_EQ(removed.status, 200) << removed.body;
  ClientResponse gone = RouterRequest(
      plain->port, "POST", "/remove_worker?url=" + colocated2_->url(), "", Auth(kAdminKey));
  EXPECT_EQ(gone.status, 404) << gone.body;
  list = RouterRequest(plain->port, "GET", "/list_workers", "", Auth(kAdminKey));
  EXPECT_EQ(json::parse(list.body)["urls"].size(), 1u);

  // PD mode's server info nests per role, as sglang.bench_serving reads it.
  auto pd = Pd();
  info = RouterRequest(pd->port, "GET", "/get_server_info");
  ASSERT_EQ(info.status, 200) << info.body;
  ji = json::parse(info.body);
  EXPECT_TRUE(ji["decode"][0]["internal_states"][0].contains("cache_hit_rate")) << info.body;
  EXPECT_FALSE(ji["decode"][0]["internal_states"][0].contains("avg_spec_accept_length"))
      << info.body;
  EXPECT_EQ(ji["prefill"][0]["disaggregation_mode"], "prefill") << info.body;
}

TEST_F(RouterClusterTest, ClientDisconnectMidStreamFreesBothWorkersBlocks) {
  auto pd = Pd();
  json body = GenerateBody(200, true);
  {
    TestClient c(static_cast<uint16_t>(pd->port), 60);
    ASSERT_TRUE(c.SendRequest("POST", "/generate", body.dump()));
    std::optional<ClientResponse> head = c.ReadHead();
    ASSERT_TRUE(head.has_value());
    ASSERT_EQ(head->status, 200);
    ASSERT_TRUE(c.ReadChunk().has_value());  // tokens are flowing
  }                                          // closes the connection mid-stream
  EXPECT_TRUE(AllBlocksFree(*decode_));
  EXPECT_TRUE(AllBlocksFree(*prefill_));
  // The router is still fine.
  EXPECT_EQ(RouterRequest(pd->port, "POST", "/generate", GenerateBody(3, false).dump()).status,
            200);
}

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

// n > 1 and lists of prompts, plain and PD: choices indexed prompt-major, greedy choices equal
// to the one-choice answer, usage summed with each prompt counted once, SGLang's list answers
// and streamed "index", a seeded n reproducible; every KV block free after.
TEST_F(RouterClusterTest, NChoicesAndPromptListsPlainAndPd) {
  auto plain = Plain();
  auto pd = Pd();
  for (Router* router : {plain.get(), pd.get()}) {
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

// Legs a worker has ended, by any outcome (its /metrics tandem_worker_requests_total).
double LegsEnded(const Worker& w) {
  const std::string metrics = HttpGet(w.http_port, "/metrics").body;
  double total = 0;
  for (const char* outcome : {"finished", "aborted", "cancelled", "rejected"}) {
    total += MetricValue(metrics,
                         absl::StrCat("tandem_worker_requests_total{outcome=\"", outcome, "\"}"))
                 .value_or(0);
  }
  return total;
}

// Waits (bounded) until `w` has ended `legs` legs; returns how many it has.
double WaitForLegsEnded(const Worker& w, double legs) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  double seen = LegsEnded(w);
  while (seen < legs && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = LegsEnded(w);
  }
  return seen;
}

// A prompt of several KV blocks no cache has seen (`tag` makes it unique per use).
std::string LongPrompt(const std::string& tag) {
  std::string prompt = "Story " + tag + ":";
  for (int i = 0; i < 8; ++i) {
    prompt += " The lighthouse keeper counted the ships that passed the cape at night.";
  }
  return prompt;
}

// The prompt tokens a sibling shares: the prompt's whole blocks below its last token.
int SharedTokens(int prompt_tokens, int block_size) {
  return block_size <= 0 ? 0 : (prompt_tokens - 1) / block_size * block_size;
}

// n = 4 shares one prompt: in PD mode the prefill worker runs one prefill leg and the decode
// worker four legs; in plain mode all four legs run on the leader's colocated worker (of two,
// round robin). Choices 1..3 report the shared blocks as cached tokens; greedy choices equal the
// one-choice answer; seeded choices differ from each other and come again. Asking for the
// prompt's logprobs keeps the choices independent (four prefill legs). Every block free after.
TEST_F(RouterClusterTest, NChoicesShareOnePrefill) {
  auto pd = Pd();
  auto plain = StartClusterRouter({"--worker-urls", colocated_->url(), colocated2_->url()});
  const int block_size = Load(*decode_).kv_block_size();
  ASSERT_GT(block_size, 0);

  // PD: one prefill leg, four decode legs.
  {
    const double prefill_before = LegsEnded(*prefill_);
    const double decode_before = LegsEnded(*decode_);
    json body = {{"text", LongPrompt("pd")},
                 {"sampling_params",
                  {{"temperature", 0}, {"max_new_tokens", 6}, {"ignore_eos", true}, {"n", 4}}}};
    ClientResponse r = RouterRequest(pd->port, "POST", "/generate", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    ASSERT_EQ(j.size(), 4u) << r.body;
    const int prompt_tokens = j[0]["meta_info"]["prompt_tokens"];
    ASSERT_GE(prompt_tokens, 2 * block_size);
    for (int k = 1; k < 4; ++k) {
      EXPECT_GE(j[k]["meta_info"]["cached_tokens"].get<int>(),
                SharedTokens(prompt_tokens, block_size))
          << k << ": " << r.body;
      EXPECT_EQ(j[k]["output_ids"], j[0]["output_ids"]) << k;  // greedy: the same tokens
    }
    EXPECT_EQ(WaitForLegsEnded(*decode_, decode_before + 4), decode_before + 4);
    EXPECT_EQ(LegsEnded(*prefill_), prefill_before + 1) << "one prefill for the four choices";
  }

  // Plain: the four legs on one colocated worker.
  {
    const double before[2] = {LegsEnded(*colocated_), LegsEnded(*colocated2_)};
    json body = {{"text", LongPrompt("plain")},
                 {"sampling_params",
                  {{"temperature", 0}, {"max_new_tokens", 6}, {"ignore_eos", true}, {"n", 4}}}};
    ClientResponse r = RouterRequest(plain->port, "POST", "/generate", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    ASSERT_EQ(j.size(), 4u) << r.body;
    const int prompt_tokens = j[0]["meta_info"]["prompt_tokens"];
    // (OpenAI usage counts each prompt once, with choice 0's cached tokens: /generate shows
    // each choice's.)
    for (int k = 1; k < 4; ++k) {
      EXPECT_GE(j[k]["meta_info"]["cached_tokens"].get<int>(),
                SharedTokens(prompt_tokens, block_size))
          << k << ": " << r.body;
      EXPECT_EQ(j[k]["output_ids"], j[0]["output_ids"]) << k;
    }
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
  for (Router* router : {pd.get(), plain.get()}) {
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

// A client gone mid-stream with n = 4 sharing a prompt of several blocks, in PD and plain mode:
// every choice's legs are cancelled (the leader's and its siblings') and the workers free every
// block.
TEST_F(RouterClusterTest, DisconnectMidStreamWithNFourFreesEverything) {
  auto pd = Pd();
  auto plain = Plain();
  for (Router* router : {pd.get(), plain.get()}) {
    SCOPED_TRACE(router == pd.get() ? "pd" : "plain");
    json body = GenerateBody(200, true);
    body["text"] = LongPrompt(router == pd.get() ? "gone-pd" : "gone-plain");
    body["sampling_params"]["n"] = 4;
    {
      TestClient c(static_cast<uint16_t>(router->port), 60);
      ASSERT_TRUE(c.SendRequest("POST", "/generate", body.dump()));
      std::optional<ClientResponse> head = c.ReadHead();
      ASSERT_TRUE(head.has_value());
      ASSERT_EQ(head->status, 200);
      ASSERT_TRUE(c.ReadChunk().has_value());  // tokens are flowing
    }                                          // closes the connection mid-stream
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
TEST_F(RouterClusterTest, CacheAwarePdSpreadsConcurrentStreamsOverTwoDecodeWorkers) {
  std::unique_ptr<Worker> decode2 = StartWorker("decode");
  ASSERT_NE(decode2, nullptr);
  auto router = StartClusterRouter({"--pd-disaggregation", "--policy", "cache_aware", "--prefill",
                                    prefill_->url(), std::to_string(prefill_->bootstrap_port),
                                    "--decode", decode_->url(), "--decode", decode2->url()});
  // Both decode workers healthy in the router's eyes before the burst (bounded).
  auto healthy = [&](const Worker& w) {
    const std::string m = HttpGet(router->port, "/metrics").body;
    return MetricValue(m, "tandem_router_worker_healthy{worker=\"" + w.url() + "\"").value_or(0) ==
           1;
  };
  const auto ready_by = std::chrono::steady_clock::now() + seconds(30);
  while (!(healthy(*decode_) && healthy(*decode2)) && std::chrono::steady_clock::now() < ready_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(healthy(*decode_) && healthy(*decode2));

  const Worker* decodes[2] = {decode_, decode2.get()};
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
  for (const Worker* w : decodes) {
    EXPECT_GT(
        MetricValue(m, "tandem_router_policy_decisions_total{policy=\"power_of_two\",worker=\"" +
                           w->url() + "\"")
            .value_or(0),
        0)
        << w->url();
  }
  EXPECT_TRUE(AllBlocksFree(*decode2));
  EXPECT_TRUE(AllBlocksFree(*decode_));
}

// Last: kills a worker.
TEST_F(RouterClusterTest, ZKilledWorkerIsRoutedAround) {
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
