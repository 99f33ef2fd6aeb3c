// tandem-router end to end, its limits and admin API over real workers (cluster_fixture.h): a
// full queue is a 429, client and admin keys are checked, workers are added, listed and removed,
// and /get_server_info has the shape SGLang's tools read, in plain and PD mode; large bodies are
// bounded and leave no memory behind. Bounded waits only.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/router/cluster_fixture.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::ClientResponse;
using testing::TestClient;

const char kApiKey[] = "client-key-1";
const char kAdminKey[] = "admin-key-2";

class RouterLimitsTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster({.second_colocated = true}); }
};

TEST_F(RouterLimitsTest, QueueFullIs429AndKeysAreChecked) {
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

// The router's tandem_router_http_body_bytes_held.
std::optional<double> BodyBytesHeld(int port) {
  return MetricValue(RouterRequest(port, "GET", "/metrics").body,
                     "tandem_router_http_body_bytes_held");
}

// Waits (bounded) until the router's body memory gauge reads `bytes`.
bool WaitBodyBytesHeld(int port, double bytes) {
  for (int i = 0; i < 500; ++i) {
    if (BodyBytesHeld(port) == bytes) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// --http-max-body-memory bounds the bodies held over all connections: with room for two
// largest bodies, two clients that send all but the last byte of one hold it, and a third is
// answered 503 from its head alone (counted in the metrics), while requests without a body are
// served. Once the two leave, their share is free again. A bound below --max-payload-size is
// refused at start.
TEST_F(RouterLimitsTest, BodiesHeldAtOnceAreBounded) {
  constexpr int kPayload = 1 << 20;
  auto plain = Plain({"--max-payload-size", std::to_string(kPayload), "--http-max-body-memory",
                      std::to_string(2 * kPayload), "--api-key", kApiKey});
  const std::string head = "POST /generate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                           std::string(kApiKey) +
                           "\r\nContent-Length: " + std::to_string(kPayload) + "\r\n\r\n";
  EXPECT_EQ(BodyBytesHeld(plain->port), 0);
  {
    std::vector<std::unique_ptr<TestClient>> holders;
    for (int i = 0; i < 2; ++i) {
      holders.push_back(std::make_unique<TestClient>(static_cast<uint16_t>(plain->port), 30));
      ASSERT_TRUE(holders.back()->Send(head + std::string(kPayload - 1, ' ')));
    }
    // Both holders' heads are taken (their bodies leased) before the third arrives.
    ASSERT_TRUE(WaitBodyBytesHeld(plain->port, 2 * kPayload));
    TestClient third(static_cast<uint16_t>(plain->port), 30);
    ASSERT_TRUE(third.Send(head));
    std::optional<ClientResponse> r = third.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(r->headers["retry-after"], "1");
    EXPECT_NE(r->body.find("limit of request bodies (2097152 bytes"), std::string::npos) << r->body;
    EXPECT_EQ(MetricValue(RouterRequest(plain->port, "GET", "/metrics").body,
                          "tandem_router_errors_total{kind=\"body_memory\"}"),
              1);
    EXPECT_EQ(RouterRequest(plain->port, "GET", "/health").status, 200);
  }
  EXPECT_TRUE(WaitBodyBytesHeld(plain->port, 0));
  // The holders left: their share comes back (bounded wait) and a request is served.
  int status = 0;
  for (int attempt = 0; attempt < 100 && status != 200; ++attempt) {
    status = RouterRequest(plain->port, "POST", "/generate", GenerateBody(2, false).dump(),
                           Auth(kApiKey))
                 .status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);

  std::vector<std::string> argv = plain->argv;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--http-max-body-memory") argv[i + 1] = std::to_string(kPayload - 1);
  }
  Process refused_start(argv);
  const std::optional<int> code = refused_start.Wait(std::chrono::milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << "a router with a body memory below one payload started";
  EXPECT_NE(*code, 0);
  EXPECT_NE(refused_start.Output().find("must be at least the largest request body"),
            std::string::npos)
      << refused_start.Output();
}

// A body's parsed JSON is bounded too (8x --max-payload-size, estimated before parsing): a body
// of millions of empty objects, which nlohmann::json would take ~50x its size to hold, is a 400
// naming the bound, a smaller one is served, and the router's peak memory stays far below what
// parsing the large one would take (~0.9 GB).
TEST_F(RouterLimitsTest, ParsedBodiesAreBounded) {
  constexpr int kPayload = 16 << 20;  // parsed bodies up to 128 MiB
  auto plain = Plain({"--max-payload-size", std::to_string(kPayload)});
  auto with_extra = [](int objects) {
    std::string body = GenerateBody(2, false).dump();
    body.pop_back();
    body += ",\"extra\":[";
    for (int i = 0; i < objects; ++i) body += i ? ",{}" : "{}";
    return body + "]}";
  };
  const ClientResponse refused =
      RouterRequest(plain->port, "POST", "/generate", with_extra(5'000'000));
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("too many JSON values"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("more than the 128 MiB allowed"), std::string::npos) << refused.body;
  const ClientResponse served =
      RouterRequest(plain->port, "POST", "/generate", with_extra(300'000));
  EXPECT_EQ(served.status, 200) << served.body;

  const int64_t peak = ProcStatusBytes(plain->process->pid(), "VmHWM");
  std::printf("router VmHWM after a refused 15 MB body of objects: %lld MiB\n",
              static_cast<long long>(peak >> 20));
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, int64_t{400} << 20);
}

// A large request's memory goes back to the system once it is handled (common/release_memory.h):
// before, one 17 MB body of token ids left the router ~25 MB larger and a few more ~60 MB.
TEST_F(RouterLimitsTest, LargeRequestsDoNotLeaveTheRouterLarger) {
  auto plain = Plain();
  json body = GenerateBody(1, false);
  body.erase("text");
  body["input_ids"] = json::array();
  for (int i = 0; i < 3'000'000; ++i) body["input_ids"].push_back(i % 1000);
  const std::string text = body.dump();
  const pid_t pid = plain->process->pid();
  auto large = [&] {
    const ClientResponse refused = RouterRequest(plain->port, "POST", "/generate", text);
    EXPECT_EQ(refused.status, 400);
    EXPECT_NE(refused.body.find("longer than the model's context length"), std::string::npos)
        << refused.body.substr(0, 300);
  };
  large();  // first-use allocations (threads' arenas) count in the baseline
  const int64_t before = ProcStatusBytes(pid, "VmRSS");
  for (int i = 0; i < 4; ++i) large();
  const int64_t after = ProcStatusBytes(pid, "VmRSS");
  const int64_t peak = ProcStatusBytes(pid, "VmHWM");
  std::printf("router VmRSS %lld -> %lld MiB over 4 requests of %zu MB (VmHWM %lld MiB)\n",
              static_cast<long long>(before >> 20), static_cast<long long>(after >> 20),
              text.size() >> 20, static_cast<long long>(peak >> 20));
  ASSERT_GT(before, 0);
  EXPECT_LT(after, before + (int64_t{16} << 20));
}

// sgl-router's Prometheus port (--prometheus-port): the router's /metrics there too, and nothing
// else: not the client API (key or no key), not the probes, no body read.
TEST_F(RouterLimitsTest, PrometheusPortServesMetricsAndNothingElse) {
  const int prometheus = FreePort();
  ASSERT_GT(prometheus, 0);
  auto plain = Plain({"--api-key", kApiKey, "--prometheus-port", std::to_string(prometheus)});
  ASSERT_EQ(
      RouterRequest(plain->port, "POST", "/generate", GenerateBody(2, false).dump(), Auth(kApiKey))
          .status,
      200);
  const ClientResponse scraped = RouterRequest(prometheus, "GET", "/metrics");
  ASSERT_EQ(scraped.status, 200);
  EXPECT_GE(MetricValue(scraped.body, "sgl_router_requests_total{route=\"/generate\"").value_or(0),
            1)
      << scraped.body.substr(0, 500);
  EXPECT_GE(MetricValue(scraped.body, "sgl_router_active_workers").value_or(0), 1);
  {
    TestClient head(static_cast<uint16_t>(prometheus), 60);
    ASSERT_TRUE(head.SendRequest("HEAD", "/metrics"));
    const auto answer = head.ReadHead();
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 200);
  }
  // A body is refused unread (the port takes none), whatever the route.
  EXPECT_EQ(
      RouterRequest(prometheus, "POST", "/generate", GenerateBody(2, false).dump(), Auth(kApiKey))
          .status,
      413);
  EXPECT_EQ(RouterRequest(prometheus, "POST", "/generate", "", Auth(kApiKey)).status, 404);
  EXPECT_EQ(RouterRequest(prometheus, "GET", "/v1/models", "", Auth(kApiKey)).status, 404);
  EXPECT_EQ(RouterRequest(prometheus, "GET", "/health").status, 404);
  EXPECT_EQ(RouterRequest(prometheus, "POST", "/metrics").status, 405);
  // Silent connections neither fill the port (more than a few dozen are let in) nor stay: each
  // is closed after the listener's 5 s timeout.
  std::vector<std::unique_ptr<TestClient>> silent;
  for (int i = 0; i < 100; ++i) {
    silent.push_back(std::make_unique<TestClient>(static_cast<uint16_t>(prometheus), 15));
    ASSERT_TRUE(silent.back()->connected());
  }
  EXPECT_EQ(RouterRequest(prometheus, "GET", "/metrics").status, 200);
  char byte = 0;
  // 0: closed by the router (-1 would be this client's own 15 s receive timeout).
  EXPECT_EQ(::recv(silent.front()->fd(), &byte, 1, 0), 0);
  EXPECT_EQ(RouterRequest(plain->port, "GET", "/metrics").status, 200);
}

TEST_F(RouterLimitsTest, AdminAddListRemoveAndServerInfo) {
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

}  // namespace
}  // namespace tandem::itest
