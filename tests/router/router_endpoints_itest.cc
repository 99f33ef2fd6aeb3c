// tandem-router's SGLang endpoints end to end, against a tandem-decode --local-prefill worker
// (plain mode) and a tandem-prefill + tandem-decode pair (PD mode) on loopback: the bodies of
// /get_model_info (and /model_info), /liveness, /version, /get_load and /abort_request compared
// with what SGLang's http_server.py and sgl-router answer, PUT /generate and GET /flush_cache as
// their POST forms, any model name served, and /abort_request really ending a request: the stream
// ends with finish_reason "abort", a non-streamed one (also one waiting for an admission slot) with
// a 503 saying so, and both workers of the pair have every KV block free afterwards; browser
// pages' CORS calls and HEAD; the Responses API's stored responses, continued conversations,
// streams and aborts. Bounded waits only.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/version.h"
#include "gmock/gmock.h"
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

const char kApiKey[] = "client-key-7";

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

// As long as the context allows (the shipped model's is 512 tokens), so an abort sent after the
// first token usually finds it running; the tests retry when the request won the race.
json LongGenerate(const std::string& rid, bool stream) {
  return {{"text", "Tell me a fortune about the sea."},
          {"rid", rid},
          {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 480}, {"ignore_eos", true}}},
          {"stream", stream}};
}

class RouterEndpointsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
  }
  static void TearDownTestSuite() {
    for (WorkerProcess* w : {colocated_, prefill_, decode_}) delete w;
  }
  static std::unique_ptr<RouterProcess> Plain(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(),
                 {"--cluster-secret", kTestClusterSecret, "--worker-urls", colocated_->url()});
    return StartRouter(extra);
  }
  static std::unique_ptr<RouterProcess> Pd(std::vector<std::string> extra = {}) {
    extra.insert(
        extra.begin(),
        {"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
         prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode", decode_->url()});
    return StartRouter(extra);
  }

  static WorkerProcess* colocated_;
  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
};
WorkerProcess* RouterEndpointsTest::colocated_ = nullptr;
WorkerProcess* RouterEndpointsTest::prefill_ = nullptr;
WorkerProcess* RouterEndpointsTest::decode_ = nullptr;

TEST_F(RouterEndpointsTest, SglangInfoEndpointsHaveSglangShapes) {
  auto plain = Plain({"--api-key", kApiKey});
  const std::string key = Auth(kApiKey);
  const std::string model_dir = SourcePath("models/tandem-tiny-english");

  // SGLang's get_model_info fields (http_server.py), keys in nlohmann's (sorted) order.
  ClientResponse info = RouterRequest(plain->port, "GET", "/get_model_info", "", key);
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_EQ(info.body, json({{"is_generation", true},
                             {"model_path", model_dir},
                             {"preferred_sampling_params", nullptr},
                             {"tokenizer_path", model_dir},
                             {"weight_version", "default"}})
                           .dump());
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/get_model_info").status, 401);
  // /model_info is the newer SGLang's name for the same answer.
  ClientResponse model_info = RouterRequest(plain->port, "GET", "/model_info", "", key);
  ASSERT_EQ(model_info.status, 200) << model_info.body;
  EXPECT_EQ(model_info.body, info.body);
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/model_info").status, 401);

  // OpenAI's retrieve-model for the served name: /v1/models' card.
  ClientResponse card =
      RouterRequest(plain->port, "GET", "/v1/models/tandem-tiny-english", "", key);
  ASSERT_EQ(card.status, 200) << card.body;
  ClientResponse models = RouterRequest(plain->port, "GET", "/v1/models", "", key);
  EXPECT_EQ(json::parse(card.body), json::parse(models.body)["data"][0]);
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/v1/models/other", "", key).status, 404);

  // sgl-router's liveness: a plain OK, no key (a probe).
  ClientResponse live = RouterRequest(plain->port, "GET", "/liveness");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(live.body, "OK");

  ClientResponse version = RouterRequest(plain->port, "GET", "/version", "", key);
  ASSERT_EQ(version.status, 200);
  EXPECT_EQ(version.body, std::string(R"({"version":")") + kTandemVersion + "\"}");

  // /server_info is the newer SGLang's name for /get_server_info.
  ClientResponse server_info = RouterRequest(plain->port, "GET", "/server_info", "", key);
  ASSERT_EQ(server_info.status, 200) << server_info.body;
  EXPECT_TRUE(json::parse(server_info.body)["internal_states"].is_array());

  // get_load: SGLang's per-rank objects (here one per worker) with the worker's KV in use.
  ClientResponse load = RouterRequest(plain->port, "GET", "/get_load", "", key);
  ASSERT_EQ(load.status, 200) << load.body;
  json jl = json::parse(load.body);
  ASSERT_TRUE(jl.is_array()) << load.body;
  ASSERT_EQ(jl.size(), 1u) << load.body;
  for (const char* field : {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}) {
    EXPECT_TRUE(jl[0][field].is_number_integer()) << field << ": " << load.body;
  }
  EXPECT_EQ(jl[0]["url"], colocated_->url());

  // PD mode: one entry per worker of the pair.
  auto pd = Pd();
  load = RouterRequest(pd->port, "GET", "/get_load");
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(json::parse(load.body).size(), 2u) << load.body;
  info = RouterRequest(pd->port, "GET", "/get_model_info");
  EXPECT_EQ(info.status, 200) << info.body;
}

TEST_F(RouterEndpointsTest, PutGenerateGetFlushCacheAndModelNames) {
  auto pd = Pd();
  const json body = {{"text", "Tell me a fortune."},
                     {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}}}};
  ClientResponse posted = RouterRequest(pd->port, "POST", "/generate", body.dump());
  ClientResponse put = RouterRequest(pd->port, "PUT", "/generate", body.dump());
  ASSERT_EQ(posted.status, 200) << posted.body;
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(json::parse(put.body)["output_ids"], json::parse(posted.body)["output_ids"]);

  // GET /flush_cache is POST's twin, with the admin key.
  EXPECT_EQ(RouterRequest(pd->port, "GET", "/flush_cache").status, 401);
  // The prefill worker lets go of a finished request's blocks a moment after the answer, and a
  // worker with a request refuses the flush (503): ask again, bounded.
  ClientResponse flushed;
  for (int i = 0; i < 200; ++i) {
    flushed = RouterRequest(pd->port, "GET", "/flush_cache", "", Auth(kTestAdminKey));
    if (flushed.status != 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(flushed.status, 200) << flushed.body;
  EXPECT_EQ(json::parse(flushed.body)["flushed"], true) << flushed.body;

  // "default" (SGLang's protocol default) and a path ending in the served name are served and
  // echoed; another model's name is a 404 naming the served one.
  for (const char* model : {"default", "/srv/llm/tandem-tiny-english"}) {
    ClientResponse c =
        RouterRequest(pd->port, "POST", "/v1/completions",
                      json({{"model", model}, {"prompt", "Hi"}, {"max_tokens", 2}}).dump());
    ASSERT_EQ(c.status, 200) << model << ": " << c.body;
    EXPECT_EQ(json::parse(c.body)["model"], model);
  }
  ClientResponse other =
      RouterRequest(pd->port, "POST", "/v1/completions",
                    json({{"model", "gpt-3.5-turbo"}, {"prompt", "Hi"}, {"max_tokens", 2}}).dump());
  EXPECT_EQ(other.status, 404) << other.body;
  EXPECT_THAT(other.body, ::testing::HasSubstr("this server serves 'tandem-tiny-english'"));
}

// A browser page calling the client API (SGLang's server allows any origin): the preflight is
// answered without the key, the answer carries Access-Control-Allow-Origin; the admin API takes
// no part. HEAD answers as GET without the body.
TEST_F(RouterEndpointsTest, BrowserPagesReachTheClientApiButNotTheAdminApi) {
  auto plain = Plain({"--api-key", kApiKey});
  const std::string origin = "Origin: https://chat.example\r\n";
  const std::string preflight = origin +
                                "Access-Control-Request-Method: POST\r\n"
                                "Access-Control-Request-Headers: authorization, content-type\r\n";
  ClientResponse allowed =
      RouterRequest(plain->port, "OPTIONS", "/v1/chat/completions", "", preflight);
  EXPECT_EQ(allowed.status, 200) << allowed.body;
  EXPECT_EQ(allowed.headers["access-control-allow-origin"], "*");
  EXPECT_EQ(allowed.headers["access-control-allow-headers"], "authorization, content-type");
  EXPECT_EQ(allowed.headers["access-control-allow-methods"], "POST, OPTIONS");

  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  ClientResponse answered = RouterRequest(plain->port, "POST", "/v1/chat/completions", chat.dump(),
                                          origin + Auth(kApiKey));
  EXPECT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(answered.headers["access-control-allow-origin"], "*");
  ClientResponse keyless =
      RouterRequest(plain->port, "POST", "/v1/chat/completions", chat.dump(), origin);
  EXPECT_EQ(keyless.status, 401);
  EXPECT_EQ(keyless.headers["access-control-allow-origin"], "*");

  EXPECT_EQ(RouterRequest(plain->port, "OPTIONS", "/workers", "", preflight).status, 405);
  ClientResponse admin =
      RouterRequest(plain->port, "GET", "/workers", "", origin + Auth(kTestAdminKey));
  EXPECT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(admin.headers.count("access-control-allow-origin"), 0u);

  ClientResponse models = RouterRequest(plain->port, "GET", "/v1/models", "", Auth(kApiKey));
  ASSERT_EQ(models.status, 200);
  TestClient client(plain->port);
  ASSERT_TRUE(client.SendRequest("HEAD", "/v1/models", "", Auth(kApiKey)));
  auto head = client.ReadHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-length"], std::to_string(models.body.size()));
}

// SGLang's stream_interval: the first token at once, then chunks of at least that many tokens,
// the same tokens as a stream of every step.
TEST_F(RouterEndpointsTest, StreamIntervalSendsChunksOfThatManyTokens) {
  auto pd = Pd();
  auto stream = [&](int interval) {
    json body = {
        {"text", "Tell me a fortune about the sea."},
        {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 10}, {"ignore_eos", true}}},
        {"stream", true}};
    if (interval > 0) body["sampling_params"]["stream_interval"] = interval;
    ClientResponse r = RouterRequest(pd->port, "POST", "/generate", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    bool done = false;
    std::vector<json> events = SseEvents(r.body, &done);
    EXPECT_TRUE(done) << r.body;
    return events;
  };
  const std::vector<json> every = stream(0);
  const std::vector<json> chunked = stream(4);
  ASSERT_FALSE(every.empty());
  ASSERT_FALSE(chunked.empty());
  EXPECT_EQ(chunked.back()["output_ids"], every.back()["output_ids"]);
  EXPECT_EQ(chunked.back()["text"], every.back()["text"]);
  ASSERT_EQ(chunked.back()["output_ids"].size(), 10u);
  EXPECT_EQ(chunked.front()["output_ids"].size(), 1u);  // the first token at once
  // Cumulative ids: every chunk between the first and the last adds at least 4 tokens.
  for (size_t k = 1; k + 1 < chunked.size(); ++k) {
    EXPECT_GE(chunked[k]["output_ids"].size(), chunked[k - 1]["output_ids"].size() + 4)
        << chunked[k].dump();
  }
  EXPECT_LE(chunked.size(), 4u);
  EXPECT_EQ(RouterRequest(pd->port, "POST", "/generate",
                          R"({"text":"hi","sampling_params":{"stream_interval":0}})")
                .status,
            400);
}

// /tokenize and /detokenize (and their /v1/ names) answer with the router's tokenizer: the ids a
// text prompt is generated from, behind the client key.
TEST_F(RouterEndpointsTest, TokenizeAndDetokenizeRoundTripBehindTheClientKey) {
  auto plain = Plain({"--api-key", kApiKey});
  const std::string key = Auth(kApiKey);
  const std::string text = "Tell me a fortune about the sea.";
  EXPECT_EQ(RouterRequest(plain->port, "POST", "/tokenize", json({{"prompt", text}}).dump()).status,
            401);
  ClientResponse tokenized =
      RouterRequest(plain->port, "POST", "/v1/tokenize", json({{"prompt", text}}).dump(), key);
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const json t = json::parse(tokenized.body);
  ASSERT_TRUE(t["tokens"].is_array()) << tokenized.body;
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], 512);

  // The ids are the prompt a text request is generated from: the same greedy answer.
  const json sampling = {{"temperature", 0}, {"max_new_tokens", 6}};
  ClientResponse by_text =
      RouterRequest(plain->port, "POST", "/generate",
                    json({{"text", text}, {"sampling_params", sampling}}).dump(), key);
  ClientResponse by_ids =
      RouterRequest(plain->port, "POST", "/generate",
                    json({{"input_ids", t["tokens"]}, {"sampling_params", sampling}}).dump(), key);
  ASSERT_EQ(by_text.status, 200) << by_text.body;
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  EXPECT_EQ(json::parse(by_ids.body)["output_ids"], json::parse(by_text.body)["output_ids"]);
  EXPECT_EQ(json::parse(by_ids.body)["meta_info"]["prompt_tokens"], t["count"]);

  ClientResponse detokenized =
      RouterRequest(plain->port, "POST", "/detokenize",
                    json({{"tokens", {t["tokens"], t["tokens"]}}}).dump(), key);
  ASSERT_EQ(detokenized.status, 200) << detokenized.body;
  EXPECT_EQ(json::parse(detokenized.body)["text"], json::array({text, text}));

  ClientResponse bad =
      RouterRequest(plain->port, "POST", "/v1/detokenize", R"({"tokens":[1,99999999]})", key);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("tokens[1] must be an integer in [0, "), std::string::npos) << bad.body;
}

// Tokenizing runs on the request threads (--request-threads), not on the HTTP I/O threads: with
// one I/O thread, a probe sent while a 24 MB prompt is tokenized (seconds) is answered first (an
// I/O thread that tokenized would answer the prompt first and the probe after it).
TEST_F(RouterEndpointsTest, ProbesAreAnsweredWhileALargePromptIsTokenized) {
  auto plain = Plain({"--http-threads", "1", "--request-threads", "1"});
  std::string prompt;
  while (prompt.size() < (24 << 20)) prompt += "the quick brown fox jumps over the lazy dog ";
  const std::string headers = "Content-Type: application/json\r\nConnection: close\r\n";
  testing::TestClient large(static_cast<uint16_t>(plain->port), 60);
  ASSERT_TRUE(large.connected());
  ASSERT_TRUE(large.SendRequest("POST", "/tokenize", json({{"prompt", prompt}}).dump(), headers));
  // The body is sent; let the router finish reading it and start tokenizing.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  testing::TestClient probe(static_cast<uint16_t>(plain->port), 60);
  ASSERT_TRUE(probe.connected());
  ASSERT_TRUE(probe.SendRequest("GET", "/liveness", "", headers));
  pollfd fds[2] = {{large.fd(), POLLIN, 0}, {probe.fd(), POLLIN, 0}};
  ASSERT_GT(::poll(fds, 2, 60'000), 0);
  EXPECT_TRUE(fds[1].revents & POLLIN);
  EXPECT_FALSE(fds[0].revents & POLLIN);
  std::optional<ClientResponse> live = probe.ReadResponse();
  std::optional<ClientResponse> tokens = large.ReadResponse();
  ASSERT_TRUE(live.has_value() && tokens.has_value());
  EXPECT_EQ(live->status, 200) << live->body;
  EXPECT_EQ(tokens->status, 200) << tokens->body.substr(0, 200);
}

TEST_F(RouterEndpointsTest, AbortRequestBadBodiesAndKeys) {
  auto plain = Plain({"--api-key", kApiKey});
  const std::string key = Auth(kApiKey);
  struct Case {
    std::string body;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"not json", "the body must be a JSON object"},
           {"[1]", "the body must be a JSON object"},
           {"{}", "rid is required"},
           {R"({"rid":""})", "rid is required"},
           {R"({"rid":5})", "rid must be a string"},
           {R"({"rid":"a","abort_all":"yes"})", "abort_all must be a boolean"},
       }) {
    ClientResponse r = RouterRequest(plain->port, "POST", "/abort_request", c.body, key);
    EXPECT_EQ(r.status, 400) << c.body << ": " << r.body;
    EXPECT_NE(r.body.find(c.message), std::string::npos) << c.body << ": " << r.body;
  }
  // A rid that is not running: 200 and an empty body, as SGLang answers.
  ClientResponse unknown =
      RouterRequest(plain->port, "POST", "/abort_request", R"({"rid":"no-such-rid"})", key);
  EXPECT_EQ(unknown.status, 200);
  EXPECT_EQ(unknown.body, "");
  EXPECT_EQ(RouterRequest(plain->port, "POST", "/abort_request", R"({"rid":"x"})").status, 401);
  // abort_all takes the admin key: the client's is not enough.
  EXPECT_EQ(
      RouterRequest(plain->port, "POST", "/abort_request", R"({"abort_all":true})", key).status,
      401);
  EXPECT_EQ(RouterRequest(plain->port, "POST", "/abort_request", R"({"abort_all":true})",
                          Auth(kTestAdminKey))
                .status,
            200);
}

// Streams `rid` and aborts it after its first event; the stream's SSE body. nullopt when the
// request finished before the abort reached it (the caller tries again).
std::optional<std::string> StreamAndAbort(int port, const std::string& target, const json& body,
                                          const std::string& rid, const std::string& headers) {
  TestClient c(static_cast<uint16_t>(port), 60);
  EXPECT_TRUE(
      c.SendRequest("POST", target, body.dump(), "Content-Type: application/json\r\n" + headers));
  std::optional<ClientResponse> head = c.ReadHead();
  EXPECT_TRUE(head.has_value());
  if (!head) return std::string();
  EXPECT_EQ(head->status, 200);
  std::string sse;
  std::optional<std::string> chunk = c.ReadChunk();
  EXPECT_TRUE(chunk.has_value());
  if (!chunk) return std::string();
  sse += *chunk;
  ClientResponse aborted =
      RouterRequest(port, "POST", "/abort_request", json({{"rid", rid}}).dump(), headers);
  EXPECT_EQ(aborted.status, 200) << aborted.body;
  // The rest of the stream, to its last (empty) chunk; bounded by the socket timeout.
  while ((chunk = c.ReadChunk()) && !chunk->empty()) sse += *chunk;
  EXPECT_TRUE(chunk.has_value()) << "the stream did not end";
  if (sse.find("abort") == std::string::npos) return std::nullopt;
  return sse;
}

TEST_F(RouterEndpointsTest, AbortRequestEndsAStreamInPdModeAndFreesBothWorkersBlocks) {
  auto pd = Pd();
  std::optional<std::string> sse;
  for (int attempt = 0; attempt < 5 && !sse; ++attempt) {
    const std::string rid = "abort-pd-" + std::to_string(attempt);
    sse = StreamAndAbort(pd->port, "/generate", LongGenerate(rid, true), rid, "");
  }
  ASSERT_TRUE(sse.has_value()) << "every request finished before its abort";
  bool done = false;
  std::vector<json> events = SseEvents(*sse, &done);
  EXPECT_TRUE(done) << *sse;
  ASSERT_FALSE(events.empty());
  const json& last = events.back()["meta_info"]["finish_reason"];
  EXPECT_EQ(last["type"], "abort") << *sse;
  EXPECT_EQ(last["message"], "aborted by /abort_request") << *sse;
  EXPECT_LT(events.back()["output_ids"].size(), 480u);

  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, decode_->http_port, &why)) << why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, prefill_->http_port, &why)) << why;
  // The rid is free again and the pair still serves.
  ClientResponse again = RouterRequest(
      pd->port, "POST", "/generate",
      json({{"text", "Hi"}, {"rid", "abort-pd-0"}, {"sampling_params", {{"max_new_tokens", 2}}}})
          .dump());
  EXPECT_EQ(again.status, 200) << again.body;
}

// /abort_request on a PD request with n = 4 whose choices share one prompt of several blocks (a
// leader with a room, three siblings on its decode worker): every choice ends with the abort and
// both workers free every block.
TEST_F(RouterEndpointsTest, AbortRequestEndsSharedChoicesAndFreesBothWorkersBlocks) {
  auto pd = Pd();
  std::string prompt = "Tell me a fortune about the sea.";
  for (int i = 0; i < 6; ++i) prompt += " The waves rolled over the harbour wall all night long.";
  std::optional<std::string> sse;
  for (int attempt = 0; attempt < 5 && !sse; ++attempt) {
    // (No "abort" in the rid: StreamAndAbort looks for the word to tell an aborted stream.)
    const std::string rid = "stop-n4-" + std::to_string(attempt);
    json body = LongGenerate(rid, true);
    body["text"] = prompt;
    body["sampling_params"]["n"] = 4;
    // A sibling's rid names the whole request.
    sse = StreamAndAbort(pd->port, "/generate", body, rid + "_2", "");
  }
  ASSERT_TRUE(sse.has_value()) << "every request finished before its abort";
  bool done = false;
  std::vector<json> events = SseEvents(*sse, &done);
  EXPECT_TRUE(done) << *sse;
  int aborted[4] = {0, 0, 0, 0};
  for (const json& e : events) {
    const int index = e.value("index", -1);
    ASSERT_TRUE(index >= 0 && index < 4) << e.dump();
    const json& reason = e["meta_info"]["finish_reason"];
    if (reason.is_object() && reason["type"] == "abort") ++aborted[index];
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(aborted[k], 1) << k << ": " << *sse;

  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, decode_->http_port, &why)) << why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, prefill_->http_port, &why)) << why;
}

TEST_F(RouterEndpointsTest, AbortRequestEndsChatStreamsAndNonStreamedRequests) {
  auto plain = Plain();
  // OpenAI chat, the rid given as x-request-id: the last chunk's finish_reason is "abort".
  std::optional<std::string> sse;
  for (int attempt = 0; attempt < 5 && !sse; ++attempt) {
    const std::string rid = "abort-chat-" + std::to_string(attempt);
    const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a fortune."}}}},
                       {"max_tokens", 480},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true}};
    sse = StreamAndAbort(plain->port, "/v1/chat/completions", chat, rid,
                         "x-request-id: " + rid + "\r\n");
  }
  ASSERT_TRUE(sse.has_value()) << "every request finished before its abort";
  bool done = false;
  std::vector<json> events = SseEvents(*sse, &done);
  EXPECT_TRUE(done) << *sse;
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "abort") << *sse;

  // Not streamed: a 503 saying so (an aborted request never looks like a success).
  std::optional<ClientResponse> answer;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string rid = "abort-whole-" + std::to_string(attempt);
    ClientResponse r;
    std::atomic<bool> answered{false};
    std::thread client([&] {
      r = RouterRequest(plain->port, "POST", "/generate", LongGenerate(rid, false).dump());
      answered = true;
    });
    for (int i = 0; i < 400 && !answered; ++i) {
      RouterRequest(plain->port, "POST", "/abort_request", json({{"rid", rid}}).dump());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    client.join();
    if (r.status != 200) {
      answer = r;
      break;
    }
  }
  ASSERT_TRUE(answer.has_value()) << "every request finished before its abort";
  EXPECT_EQ(answer->status, 503) << answer->body;
  EXPECT_NE(answer->body.find("the request was aborted: aborted by /abort_request"),
            std::string::npos)
      << answer->body;
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(plain->port, kTestAdminKey, colocated_->http_port, &why))
      << why;
}

// OpenAI's Responses API in PD mode: a response is stored and read back, a next turn continues
// it with previous_response_id (the earlier turn and its answer in the prompt), a stream ends
// with its final event and no [DONE], an aborted stream fails its response and frees both
// workers' blocks; a router that keeps no responses answers the same requests with 404s.
TEST_F(RouterEndpointsTest, ResponsesAreStoredContinuedStreamedAndAborted) {
  auto pd = Pd({"--api-key", kApiKey});
  const std::string key = Auth(kApiKey);
  const json first_request = {{"input", "Tell me a fortune."},
                              {"instructions", "Be brief."},
                              {"max_output_tokens", 4},
                              {"temperature", 0}};
  EXPECT_EQ(RouterRequest(pd->port, "POST", "/v1/responses", first_request.dump()).status, 401);
  ClientResponse first =
      RouterRequest(pd->port, "POST", "/v1/responses", first_request.dump(), key);
  ASSERT_EQ(first.status, 200) << first.body;
  const json response = json::parse(first.body);
  const std::string id = response["id"];
  EXPECT_EQ(response["object"], "response");
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["usage"]["output_tokens"], 4);
  EXPECT_FALSE(first.headers["x-request-id"].empty());
  ClientResponse stored = RouterRequest(pd->port, "GET", "/v1/responses/" + id, "", key);
  ASSERT_EQ(stored.status, 200) << stored.body;
  EXPECT_EQ(json::parse(stored.body), response);
  EXPECT_EQ(RouterRequest(pd->port, "GET", "/v1/responses/" + id).status, 401);
  // stream=false in any spelling (Python's requests sends "False"); stream=true is a 400.
  EXPECT_EQ(RouterRequest(pd->port, "GET", "/v1/responses/" + id + "?stream=False", "", key).status,
            200);
  EXPECT_EQ(RouterRequest(pd->port, "GET", "/v1/responses/" + id + "?stream=true", "", key).status,
            400);

  const json next_request = {{"input", "Another."},
                             {"previous_response_id", id},
                             {"max_output_tokens", 4},
                             {"temperature", 0}};
  ClientResponse next = RouterRequest(pd->port, "POST", "/v1/responses", next_request.dump(), key);
  ASSERT_EQ(next.status, 200) << next.body;
  // The instructions held for the first response only; its question and answer are in the
  // prompt now: more tokens than the first prompt without its instructions plus the answer.
  EXPECT_GT(json::parse(next.body)["usage"]["input_tokens"].get<int>(),
            response["usage"]["input_tokens"].get<int>())
      << next.body;

  json streamed_request = next_request;
  streamed_request["stream"] = true;
  ClientResponse streamed =
      RouterRequest(pd->port, "POST", "/v1/responses", streamed_request.dump(), key);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  bool done = false;
  const std::vector<json> events = SseEvents(streamed.body, &done);
  EXPECT_FALSE(done) << streamed.body;
  ASSERT_GE(events.size(), 3u) << streamed.body;
  EXPECT_EQ(events.front()["type"], "response.created");
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(events.back()["response"]["usage"]["output_tokens"], 4);
  EXPECT_NE(streamed.body.find("event: response.output_text.delta\n"), std::string::npos);

  // Aborted mid-stream: the response fails, and nothing is left held.
  std::optional<std::string> sse;
  for (int attempt = 0; attempt < 5 && !sse; ++attempt) {
    const std::string rid = "responses-cut-" + std::to_string(attempt);
    const json long_request = {{"input", "Tell me a long fortune about the sea."},
                               {"max_output_tokens", 480},
                               {"temperature", 0},
                               {"ignore_eos", true},
                               {"stream", true}};
    sse = StreamAndAbort(pd->port, "/v1/responses", long_request, rid,
                         key + "x-request-id: " + rid + "\r\n");
  }
  ASSERT_TRUE(sse.has_value()) << "every request finished before its abort";
  const std::vector<json> cut = SseEvents(*sse, &done);
  ASSERT_FALSE(cut.empty());
  EXPECT_EQ(cut.back()["type"], "response.failed") << *sse;
  EXPECT_EQ(cut.back()["response"]["status"], "failed");
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, prefill_->http_port, &why)) << why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(pd->port, kTestAdminKey, decode_->http_port, &why)) << why;

  // Three responses kept (the aborted one failed): the store's gauges show them.
  const std::string metrics = RouterRequest(pd->port, "GET", "/metrics").body;
  EXPECT_EQ(MetricValue(metrics, "tandem_router_stored_responses"), 3.0) << metrics;
  const std::optional<double> bytes = MetricValue(metrics, "tandem_router_stored_response_bytes");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_GT(*bytes, 1000);
  EXPECT_LT(*bytes, 64 << 20);
  EXPECT_EQ(RouterRequest(pd->port, "DELETE", "/v1/responses/" + id, "", key).status, 200);
  EXPECT_EQ(RouterRequest(pd->port, "GET", "/v1/responses/" + id, "", key).status, 404);

  auto keeps_none = Pd({"--response-store-mb", "0"});
  ClientResponse unkept =
      RouterRequest(keeps_none->port, "POST", "/v1/responses", first_request.dump());
  ASSERT_EQ(unkept.status, 200) << unkept.body;
  const std::string unkept_id = json::parse(unkept.body)["id"];
  EXPECT_EQ(RouterRequest(keeps_none->port, "GET", "/v1/responses/" + unkept_id).status, 404);
  json continued = next_request;
  continued["previous_response_id"] = unkept_id;
  ClientResponse refused =
      RouterRequest(keeps_none->port, "POST", "/v1/responses", continued.dump());
  EXPECT_EQ(refused.status, 404) << refused.body;
  EXPECT_THAT(refused.body, ::testing::HasSubstr("names no stored response"));
}

// With one admission slot, a request waiting in the queue is withdrawn by its abort (or, if the
// slot came free first, cancelled while it runs): either way its client hears of the abort.
TEST_F(RouterEndpointsTest, AbortRequestReachesARequestWaitingForASlot) {
  auto plain = Plain({"--max-concurrent-requests", "1", "--queue-size", "8"});
  std::optional<ClientResponse> answer;
  for (int attempt = 0; attempt < 5 && !answer; ++attempt) {
    const std::string rid = "abort-queued-" + std::to_string(attempt);
    ClientResponse first, queued;
    std::atomic<bool> answered{false};
    std::thread holder([&] {
      first = RouterRequest(plain->port, "POST", "/generate",
                            LongGenerate("slot-holder-" + std::to_string(attempt), false).dump());
    });
    std::thread client([&] {
      queued = RouterRequest(plain->port, "POST", "/generate", LongGenerate(rid, false).dump());
      answered = true;
    });
    for (int i = 0; i < 400 && !answered; ++i) {
      RouterRequest(plain->port, "POST", "/abort_request", json({{"rid", rid}}).dump());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    client.join();
    holder.join();
    EXPECT_EQ(first.status, 200) << first.body;  // only the named request is aborted
    if (queued.status != 200) answer = queued;
  }
  ASSERT_TRUE(answer.has_value()) << "every request finished before its abort";
  EXPECT_EQ(answer->status, 503) << answer->body;
  EXPECT_NE(answer->body.find("aborted by /abort_request"), std::string::npos) << answer->body;
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(plain->port, kTestAdminKey, colocated_->http_port, &why))
      << why;
}

}  // namespace
}  // namespace tandem::itest
