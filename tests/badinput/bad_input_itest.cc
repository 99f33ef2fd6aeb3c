// The bad-input suite: a real tandem-router in plain mode in front of a tandem-decode
// --local-prefill worker, and one in PD mode in front of a tandem-prefill + tandem-decode pair,
// all on the shipped model, receive malformed JSON, wrong types, unknown fields, bodies and
// headers over the limits, prompts over the context length, invalid UTF-8, bad sampling
// parameters, unknown models, missing keys, wrong methods and routes, broken HTTP framing,
// slow and idle clients, clients that leave early, and bodies sent to the workers' status
// ports. Each answer must be the documented status with a message that names the problem;
// meanwhile background clients keep sending valid requests to both routers and every one of
// them must succeed; at the end every worker has all of its KV blocks free. The parsers'
// function-level cases live in tests/router/api; these go over the wire through the daemons.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/badinput/background_load.h"
#include "tests/badinput/bad_input_cases.h"
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

const char kApiKey[] = "badinput-client-key-0123";
const char kAdminKey[] = "badinput-admin-key-4567";
constexpr int kReadTimeoutSecs = 3;  // the routers' --http-read-timeout-secs
constexpr int kIdleTimeoutSecs = 4;  // the routers' --http-idle-timeout-secs

std::atomic<int> bad_inputs_tried{0};

std::string Auth(const std::string& key = kApiKey) {
  return "Authorization: Bearer " + key + "\r\n";
}

// The "error.message" of a JSON error body; "" (with a test failure) when the body is not one.
std::string ErrorMessage(const ClientResponse& r) {
  const json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  const bool shaped = !body.is_discarded() && body.is_object() && body.contains("error") &&
                      body["error"].is_object() && body["error"].contains("message") &&
                      body["error"]["message"].is_string();
  EXPECT_TRUE(shaped) << "error body is not {\"error\":{\"message\":...}}: " << r.body;
  return shaped ? body["error"]["message"].get<std::string>() : "";
}

// One request on a fresh connection (Connection: close); status 0 when nothing came back.
ClientResponse Post(int port, const std::string& route, const std::string& body,
                    const std::string& headers) {
  TestClient c(static_cast<uint16_t>(port), 120);
  EXPECT_TRUE(c.connected());
  c.SendRequest("POST", route, body,
                "Content-Type: application/json\r\nConnection: close\r\n" + headers);
  return c.ReadResponse().value_or(ClientResponse{});
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

// Waits up to `limit` for the server to close `fd` (EOF or reset). Bytes that arrive instead are
// appended to `received`. True when it closed.
bool WaitForClose(int fd, std::chrono::milliseconds limit, std::string* received) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
    received->append(buf, static_cast<size_t>(n));
  }
  return false;
}

// The daemons under test and the clients that must be served throughout.
struct Cluster {
  std::unique_ptr<WorkerProcess> colocated;
  std::unique_ptr<WorkerProcess> prefill;
  std::unique_ptr<WorkerProcess> decode;
  std::unique_ptr<RouterProcess> plain;
  std::unique_ptr<RouterProcess> pd;
  std::unique_ptr<BackgroundLoad> load;
  std::string secret_file;

  Cluster() {
    colocated = StartWorker("colocated");
    prefill = StartWorker("prefill");
    decode = StartWorker("decode");
    secret_file = ::testing::TempDir() + "badinput_cluster_secret";
    std::ofstream(secret_file) << kTestClusterSecret << "\n";
    const std::vector<std::string> common = {"--api-key",
                                             kApiKey,
                                             "--admin-key",
                                             kAdminKey,
                                             "--max-payload-size",
                                             std::to_string(kMaxPayloadBytes),
                                             "--http-read-timeout-secs",
                                             std::to_string(kReadTimeoutSecs),
                                             "--http-idle-timeout-secs",
                                             std::to_string(kIdleTimeoutSecs)};
    std::vector<std::string> plain_args = {"--worker-urls", colocated->url()};
    plain_args.insert(plain_args.end(), common.begin(), common.end());
    plain = StartRouter(plain_args);
    std::vector<std::string> pd_args = {"--pd-disaggregation",
                                        "--prefill",
                                        prefill->url(),
                                        std::to_string(prefill->bootstrap_port),
                                        "--decode",
                                        decode->url(),
                                        "--cluster-secret-file",
                                        secret_file};
    pd_args.insert(pd_args.end(), common.begin(), common.end());
    pd = StartRouter(pd_args);
    load = std::make_unique<BackgroundLoad>(std::vector<int>{plain->port, pd->port}, kApiKey);
  }
  ~Cluster() {
    load.reset();
    std::remove(secret_file.c_str());
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
};

// Sends `c` to the router on `port` and checks the answer.
void Check(int port, const BodyCase& c) {
  SCOPED_TRACE(c.name + " (" + c.route + ", port " + std::to_string(port) + ")");
  ++bad_inputs_tried;
  const ClientResponse r = Post(port, c.route, c.body, (c.auth ? Auth() : "") + c.headers);
  EXPECT_EQ(r.status, c.status) << r.body;
  if (c.status >= 400) {
    const std::string message = ErrorMessage(r);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "message does not name the problem: " << message;
  }
}

// Every KV block of `w` free once the caches are flushed through `router` (bounded wait).
bool AllBlocksFree(const RouterProcess& router, const WorkerProcess& w, std::string* why) {
  const bool free = WaitForAllKvBlocksFree(router.port, kAdminKey, w.http_port, why);
  *why = w.role + ": " + *why;
  return free;
}

void BodiesGetTheDocumentedStatusAndNameTheProblem(const Cluster& cluster) {
  for (const BodyCase& c : BodyCases()) {
    Check(cluster.plain->port, c);
    Check(cluster.pd->port, c);  // the PD path validates the same way, and reaches two workers
  }
}

void MalformedHttpGetsTheDocumentedStatus(const Cluster& cluster) {
  for (const RawCase& c : RawCases()) {
    SCOPED_TRACE(c.name);
    ++bad_inputs_tried;
    TestClient client(static_cast<uint16_t>(cluster.plain->port), 60);
    ASSERT_TRUE(client.connected());
    std::string bytes = c.bytes;
    ReplaceAll(&bytes, "api_key", kApiKey);
    client.Send(bytes);  // may fail part-way once the server has answered and closed: fine
    const std::optional<ClientResponse> r = client.ReadResponse();
    if (c.status == 0) {
      EXPECT_FALSE(r.has_value()) << r->status << " " << r->body;
      continue;
    }
    ASSERT_TRUE(r.has_value()) << "no answer";
    EXPECT_EQ(r->status, c.status) << r->body;
    if (c.status >= 400) {
      const std::string message = ErrorMessage(*r);
      EXPECT_NE(message.find(c.message), std::string::npos) << message;
    }
  }
}

void HugeMaxTokensIsClampedToTheContextLeft(const Cluster& cluster) {
  constexpr int kPromptTokens = 400;
  json ids = json::array();
  for (int i = 0; i < kPromptTokens; ++i) ids.push_back(10 + (i * 37) % 3000);
  for (const RouterProcess* router : {cluster.plain.get(), cluster.pd.get()}) {
    ++bad_inputs_tried;
    const json body = {
        {"input_ids", ids},
        {"sampling_params",
         {{"temperature", 0}, {"max_new_tokens", 2147483647}, {"ignore_eos", true}}}};
    const ClientResponse r = Post(router->port, "/generate", body.dump(), Auth());
    ASSERT_EQ(r.status, 200) << r.body;
    const json out = json::parse(r.body);
    EXPECT_EQ(out["meta_info"]["prompt_tokens"], kPromptTokens);
    const int completion = out["meta_info"]["completion_tokens"].get<int>();
    EXPECT_GT(completion, 0);
    EXPECT_LE(completion, kContextLength - kPromptTokens) << r.body;

    ++bad_inputs_tried;
    const json chat = {{"model", "tandem-tiny-english"},
                       {"messages", {{{"role", "user"}, {"content", "A long fortune, please."}}}},
                       {"max_tokens", 1000000000},
                       {"temperature", 0}};
    const ClientResponse c = Post(router->port, "/v1/chat/completions", chat.dump(), Auth());
    ASSERT_EQ(c.status, 200) << c.body;
    const json usage = json::parse(c.body)["usage"];
    EXPECT_LE(usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>(),
              kContextLength)
        << c.body;
  }
}

void Http10AndPipelinedRequests(const Cluster& cluster) {
  const std::string ok = R"({"text":"hi","sampling_params":{"max_new_tokens":3}})";
  const std::string ok_stream =
      R"({"text":"hi","stream":true,"sampling_params":{"max_new_tokens":3}})";
  auto request = [](const std::string& version, const std::string& body,
                    const std::string& extra = "") {
    return "POST /generate " + version + "\r\nHost: t\r\n" + Auth() + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  {  // HTTP/1.0: answered with a length, then the connection closes.
    ++bad_inputs_tried;
    TestClient c(static_cast<uint16_t>(cluster.plain->port), 60);
    ASSERT_TRUE(c.Send(request("HTTP/1.0", ok)));
    std::optional<ClientResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_TRUE(c.ReadsEof());
  }
  {  // HTTP/1.0 stream: no chunked encoding; the body ends when the connection closes.
    ++bad_inputs_tried;
    TestClient c(static_cast<uint16_t>(cluster.pd->port), 60);
    ASSERT_TRUE(c.Send(request("HTTP/1.0", ok_stream)));
    std::optional<ClientResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->headers.count("transfer-encoding"), 0u);
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  }
  {  // HTTP/1.0 with a bad body: still a 400 naming it.
    ++bad_inputs_tried;
    TestClient c(static_cast<uint16_t>(cluster.plain->port), 60);
    ASSERT_TRUE(c.Send(request("HTTP/1.0", R"({"text":5})")));
    std::optional<ClientResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(ErrorMessage(*r).find("text must be a string"), std::string::npos);
  }
  {  // Pipelined: good, bad, streamed, good, all in one write; answered in order.
    bad_inputs_tried += 4;
    TestClient c(static_cast<uint16_t>(cluster.pd->port), 60);
    ASSERT_TRUE(c.Send(request("HTTP/1.1", ok) + request("HTTP/1.1", "{broken") +
                       request("HTTP/1.1", ok_stream) +
                       request("HTTP/1.1", ok, "Connection: close\r\n")));
    std::vector<int> statuses;
    for (int i = 0; i < 4; ++i) {
      std::optional<ClientResponse> r = c.ReadResponse();
      ASSERT_TRUE(r.has_value()) << "response " << i;
      statuses.push_back(r->status);
      if (i == 1) {
        EXPECT_NE(ErrorMessage(*r).find("not valid JSON"), std::string::npos);
      }
      if (i == 2) {
        EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
      }
    }
    EXPECT_EQ(statuses, (std::vector<int>{200, 400, 200, 200}));
    EXPECT_TRUE(c.ReadsEof());
  }
  {  // Pipelined after malformed HTTP: the 400 closes the connection; the rest is not served.
    ++bad_inputs_tried;
    TestClient c(static_cast<uint16_t>(cluster.plain->port), 60);
    ASSERT_TRUE(c.Send("BROKEN\r\n\r\n" + request("HTTP/1.1", ok)));
    std::optional<ClientResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 400);
    EXPECT_TRUE(c.ReadsEof());
  }
}

void SlowlorisIsCutOffAfterTheReadTimeout(const Cluster& cluster) {
  ++bad_inputs_tried;
  const int fd = ConnectLoopback(cluster.plain->port);
  ASSERT_GE(fd, 0);
  // Headers one byte per 100 ms, never finished: the router must close the connection (after
  // --http-read-timeout-secs) instead of waiting forever. The bound is generous on purpose.
  const std::string head = "POST /generate HTTP/1.1\r\nHost: t\r\nX-Slow: ";
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  bool closed = false;
  std::string received;
  for (size_t i = 0; !closed && std::chrono::steady_clock::now() < deadline; ++i) {
    const char byte = i < head.size() ? head[i] : 'a';
    if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) {
      closed = true;
      break;
    }
    closed = WaitForClose(fd, std::chrono::milliseconds(100), &received);
  }
  ::close(fd);
  EXPECT_TRUE(closed) << "a client sending one byte per 100 ms kept its connection";
  EXPECT_EQ(received, "") << "nothing is answered to a request that never arrived";
}

void IdleAndHalfSentConnectionsAreClosed(const Cluster& cluster) {
  {  // Connected, never sends a byte.
    ++bad_inputs_tried;
    const int fd = ConnectLoopback(cluster.plain->port);
    ASSERT_GE(fd, 0);
    std::string received;
    EXPECT_TRUE(WaitForClose(fd, seconds(60), &received));
    EXPECT_EQ(received, "");
    ::close(fd);
  }
  {  // Headers announcing a body that never comes.
    ++bad_inputs_tried;
    const int fd = ConnectLoopback(cluster.pd->port);
    ASSERT_GE(fd, 0);
    const std::string half =
        "POST /generate HTTP/1.1\r\nHost: t\r\n" + Auth() + "Content-Length: 100\r\n\r\n{\"text\":";
    ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(half.size()));
    std::string received;
    EXPECT_TRUE(WaitForClose(fd, seconds(60), &received));
    EXPECT_EQ(received, "");
    ::close(fd);
  }
  {  // Expect: 100-continue, then silence.
    ++bad_inputs_tried;
    TestClient c(static_cast<uint16_t>(cluster.plain->port), 60);
    ASSERT_TRUE(c.Send("POST /generate HTTP/1.1\r\nHost: t\r\n" + Auth() +
                       "Expect: 100-continue\r\nContent-Length: 50\r\n\r\n"));
    std::optional<ClientResponse> cont = c.ReadHead();
    ASSERT_TRUE(cont.has_value());
    EXPECT_EQ(cont->status, 100);
    EXPECT_TRUE(c.ReadsEof());  // closed after the read timeout
  }
}

void ClientsThatLeaveEarlyFreeTheirWork(const Cluster& cluster) {
  const json stream_body = {
      {"text", "Tell me a long fortune about the sea."},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 300}, {"ignore_eos", true}}},
      {"stream", true}};
  for (const RouterProcess* router : {cluster.plain.get(), cluster.pd.get()}) {
    for (int i = 0; i < 3; ++i) {  // gone mid-stream
      ++bad_inputs_tried;
      TestClient c(static_cast<uint16_t>(router->port), 60);
      ASSERT_TRUE(c.SendRequest("POST", "/generate", stream_body.dump(), Auth()));
      std::optional<ClientResponse> head = c.ReadHead();
      ASSERT_TRUE(head.has_value());
      ASSERT_EQ(head->status, 200);
      ASSERT_TRUE(c.ReadChunk().has_value());
    }
    {  // gone right after sending, before any answer
      ++bad_inputs_tried;
      TestClient c(static_cast<uint16_t>(router->port), 60);
      ASSERT_TRUE(c.SendRequest("POST", "/generate", stream_body.dump(), Auth()));
    }
    {  // a non-streamed request abandoned while it runs
      ++bad_inputs_tried;
      json body = stream_body;
      body["stream"] = false;
      TestClient c(static_cast<uint16_t>(router->port), 60);
      ASSERT_TRUE(c.SendRequest("POST", "/generate", body.dump(), Auth()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // The routers still answer.
  const ClientResponse r = Post(cluster.pd->port, "/generate",
                                R"({"text":"hi","sampling_params":{"max_new_tokens":2}})", Auth());
  EXPECT_EQ(r.status, 200) << r.body;
}

// At --http-max-connections a newcomer takes the place of the connection that has waited longest
// for a request: silent connections are displaced oldest first, newcomers are served, and the
// rest keep working. (The exact order, and refusal when every connection has a request in
// progress: HttpConnectionCapTest.)
void ConnectionsBeyondTheMaximumDisplaceTheLongestIdle(const Cluster& cluster) {
  constexpr int kMax = 4;
  std::unique_ptr<RouterProcess> router = StartRouter(
      {"--worker-urls", cluster.colocated->url(), "--http-max-connections", std::to_string(kMax)});
  const std::string health = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
  const auto served = [&](TestClient& c) {
    if (!c.Send(health)) return false;
    std::optional<ClientResponse> r = c.ReadResponse();
    return r.has_value() && r->status == 200;
  };
  // Silent: each waits from its accept, in the order they connect.
  std::vector<std::unique_ptr<TestClient>> held;
  for (int i = 0; i < kMax; ++i) {
    held.push_back(std::make_unique<TestClient>(static_cast<uint16_t>(router->port), 30));
    ASSERT_TRUE(held.back()->connected()) << i;
  }
  bad_inputs_tried += 3;
  std::vector<std::unique_ptr<TestClient>> newcomers;
  for (int i = 0; i < 3; ++i) {
    newcomers.push_back(std::make_unique<TestClient>(static_cast<uint16_t>(router->port), 30));
    EXPECT_TRUE(served(*newcomers.back())) << "newcomer " << i << " at the maximum not served";
  }
  // The oldest went first (a start-up probe's connection still open would have gone before it);
  // the newest silent one outlived three evictions and works.
  EXPECT_FALSE(served(*held[0])) << "the oldest silent connection was not displaced";
  EXPECT_TRUE(served(*held[3]));
  for (auto& c : newcomers) EXPECT_TRUE(served(*c));
  EXPECT_GE(MetricValue(HttpGet(router->port, "/metrics").body,
                        "tandem_router_http_connections_at_limit_total{action=\"evicted\"")
                .value_or(0),
            3);
}

// Inputs that once made Beast throw inside an I/O handler (a rid echoed into x-request-id past
// the 64 KiB field limit: the router terminated, or with Connection: close left the client
// hanging) and other oversized values the router echoes. Each is answered with the documented
// status, the connection behaves (kept open, or closed after the answer), and the router serves
// valid requests afterwards. A router with the default --max-payload-size, so megabyte bodies
// reach the parser.
void ThrowingInputsAreAnsweredAndTheRouterKeepsServing(const Cluster& cluster) {
  std::unique_ptr<RouterProcess> router =
      StartRouter({"--worker-urls", cluster.colocated->url(), "--api-key", kApiKey});
  const std::string ok = R"({"text":"hi","sampling_params":{"max_new_tokens":2}})";
  struct Throwing {
    std::string name;
    std::string route;
    std::string body;
    std::string headers;
    int status;
    std::string message;
  };
  const std::string role = std::string(1 << 20, 'x');
  const std::vector<Throwing> cases = {
      {"70 KB rid", "/generate", R"({"text":"hi","rid":")" + std::string(70000, 'r') + R"("})", "",
       400, "rid must be at most 256 bytes of printable ASCII, got 70000 bytes"},
      {"1 MB rid", "/generate", R"({"text":"hi","rid":")" + std::string(1 << 20, 'r') + R"("})", "",
       400, "rid must be at most 256 bytes of printable ASCII, got 1048576 bytes"},
      {"15 KB x-request-id header", "/generate", ok,
       "X-Request-Id: " + std::string(15000, 'h') + "\r\n", 400,
       "the x-request-id header must be at most 256 bytes of printable ASCII, got 15000 bytes"},
      {"15 KB request-id header", "/v1/completions", R"({"prompt":"hi","max_tokens":2})",
       "Request-Id: " + std::string(15000, 'h') + "\r\n", 400,
       "the request-id header must be at most 256 bytes"},
      {"20 KB header", "/generate", ok, "X-Request-Id: " + std::string(20000, 'h') + "\r\n", 431,
       "request headers exceed the limit of 16384 bytes"},
      {"1 MB model", "/v1/completions",
       R"({"model":")" + std::string(1 << 20, 'm') + R"(","prompt":"hi","max_tokens":2})", "", 400,
       "model must be at most 256 bytes, got 1048576 bytes"},
      {"1 MB role", "/v1/chat/completions",
       R"({"messages":[{"role":")" + role + R"(","content":"hi"}],"max_tokens":2})", "", 400,
       "xxx...' is not supported"},
  };
  for (const Throwing& c : cases) {
    for (const bool close : {false, true}) {
      SCOPED_TRACE(c.name + (close ? ", Connection: close" : ", keep-alive"));
      ++bad_inputs_tried;
      TestClient client(static_cast<uint16_t>(router->port), 120);
      ASSERT_TRUE(client.connected());
      client.SendRequest("POST", c.route, c.body,
                         "Content-Type: application/json\r\n" + Auth() + c.headers +
                             (close ? "Connection: close\r\n" : ""));
      const std::optional<ClientResponse> r = client.ReadResponse();
      ASSERT_TRUE(r.has_value()) << "no answer";
      EXPECT_EQ(r->status, c.status) << r->body.substr(0, 300);
      EXPECT_NE(ErrorMessage(*r).find(c.message), std::string::npos) << r->body.substr(0, 300);
      EXPECT_EQ(r->headers.count("x-request-id"), 0u) << "a refused id was echoed";
      if (close || c.status == 431) {
        EXPECT_TRUE(client.ReadsEof());  // closed after the answer, as asked (431 always closes)
        continue;
      }
      // The same connection goes on serving.
      ASSERT_TRUE(client.SendRequest("POST", "/generate", ok,
                                     "Content-Type: application/json\r\n" + Auth()));
      const std::optional<ClientResponse> next = client.ReadResponse();
      ASSERT_TRUE(next.has_value());
      EXPECT_EQ(next->status, 200) << next->body;
    }
  }
  EXPECT_EQ(HttpGet(router->port, "/health").status, 200);
  const ClientResponse after = Post(router->port, "/generate", ok, Auth());
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_FALSE(router->process->Wait(std::chrono::milliseconds(0)).has_value())
      << "the router exited: " << router->process->Output();
}

// A prompt that cannot fit is refused by the router before any leg: no worker is chosen (the
// policy's decision counter stays absent), while a valid request afterwards is counted there.
// Default --max-payload-size (32 MiB): a 30 MB prompt arrives, a 33 MiB body does not.
void HugePromptIsRefusedBeforeAnyLeg(const Cluster& cluster) {
  std::unique_ptr<RouterProcess> router =
      StartRouter({"--worker-urls", cluster.colocated->url(), "--api-key", kApiKey});
  const auto decisions = [&] {
    return MetricValue(HttpGet(router->port, "/metrics").body,
                       "tandem_router_policy_decisions_total")
        .value_or(0);
  };
  {
    ++bad_inputs_tried;
    const ClientResponse r = Post(router->port, "/generate",
                                  R"({"text":")" + std::string(30 << 20, 'a') + R"("})", Auth());
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    // "at least": refused on its byte length, before the tokenizer ran.
    EXPECT_NE(ErrorMessage(r).find("The input (at least "), std::string::npos);
    EXPECT_NE(ErrorMessage(r).find("is longer than the model's context length (512 tokens)"),
              std::string::npos);
  }
  {
    ++bad_inputs_tried;
    json ids = json::array();
    for (int i = 0; i < 100000; ++i) ids.push_back(10 + i % 3000);
    const ClientResponse r =
        Post(router->port, "/generate", json({{"input_ids", ids}}).dump(), Auth());
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    EXPECT_NE(ErrorMessage(r).find("The input (100000 tokens) is longer than the model's context "
                                   "length (512 tokens)."),
              std::string::npos);
  }
  {
    ++bad_inputs_tried;
    const ClientResponse r = Post(router->port, "/generate",
                                  R"({"text":")" + std::string(33 << 20, 'a') + R"("})", Auth());
    EXPECT_EQ(r.status, 413);
    EXPECT_NE(ErrorMessage(r).find("body exceeds the limit of 33554432 bytes"), std::string::npos);
  }
  EXPECT_EQ(decisions(), 0) << "a refused prompt reached the worker selection";
  const ClientResponse ok = Post(router->port, "/generate",
                                 R"({"text":"hi","sampling_params":{"max_new_tokens":2}})", Auth());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_GT(decisions(), 0) << "the decision counter does not count legs";
}

// Workers key a request's state by rid: a second request with the rid of one in progress is a
// 409 at once naming the field, and the rid is free again once the first one ended.
void DuplicateLiveRidIs409(const Cluster& cluster) {
  for (const RouterProcess* router : {cluster.plain.get(), cluster.pd.get()}) {
    SCOPED_TRACE("port " + std::to_string(router->port));
    const std::string rid = "dup-rid-" + std::to_string(router->port);
    const json long_stream = {
        {"text", "Tell me a long fortune about the sea."},
        {"rid", rid},
        {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 300}, {"ignore_eos", true}}},
        {"stream", true}};
    {
      TestClient first(static_cast<uint16_t>(router->port), 60);
      ASSERT_TRUE(first.SendRequest("POST", "/generate", long_stream.dump(), Auth()));
      std::optional<ClientResponse> head = first.ReadHead();
      ASSERT_TRUE(head.has_value());
      ASSERT_EQ(head->status, 200);
      ASSERT_TRUE(first.ReadChunk().has_value());  // live: its first event arrived

      bad_inputs_tried += 2;
      const ClientResponse body_rid = Post(
          router->port, "/generate",
          json({{"text", "hi"}, {"rid", rid}, {"sampling_params", {{"max_new_tokens", 2}}}}).dump(),
          Auth());
      EXPECT_EQ(body_rid.status, 409) << body_rid.body;
      EXPECT_NE(ErrorMessage(body_rid).find("rid '" + rid +
                                            "' is already used by a request in "
                                            "progress"),
                std::string::npos);
      const ClientResponse header_rid =
          Post(router->port, "/v1/completions", R"({"prompt":"hi","max_tokens":2})",
               Auth() + "X-Request-Id: " + rid + "\r\n");
      EXPECT_EQ(header_rid.status, 409) << header_rid.body;
      EXPECT_NE(ErrorMessage(header_rid).find("rid '" + rid + "'"), std::string::npos);
    }  // the first client leaves: its request is cancelled and its rid freed
    bool reused = false;
    for (int i = 0; i < 100 && !reused; ++i) {
      const ClientResponse again = Post(
          router->port, "/generate",
          json({{"text", "hi"}, {"rid", rid}, {"sampling_params", {{"max_new_tokens", 2}}}}).dump(),
          Auth());
      reused = again.status == 200;
      if (!reused) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(reused) << "the rid stayed taken after its request ended";
  }
}

// A worker's /metrics and /health port has no key and its routes take no body: a request
// announcing one is answered from its head (never read, so a stranger cannot make a worker
// buffer a body per connection), and the port goes on serving.
void WorkerStatusPortsReadNoBody(const Cluster& cluster) {
  const std::string announce = " HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n";
  for (const WorkerProcess* w :
       {cluster.colocated.get(), cluster.prefill.get(), cluster.decode.get()}) {
    SCOPED_TRACE(w->role);
    for (const auto& [request, status] :
         std::vector<std::pair<std::string, int>>{{"GET /metrics", 413}, {"POST /health", 413}}) {
      ++bad_inputs_tried;
      TestClient c(static_cast<uint16_t>(w->http_port), 60);
      ASSERT_TRUE(c.Send(request + announce));
      const std::optional<ClientResponse> r = c.ReadResponse();
      ASSERT_TRUE(r.has_value()) << request << ": not answered before the body";
      EXPECT_EQ(r->status, status) << request << ": " << r->body;
      EXPECT_TRUE(c.ReadsEof()) << request;
    }
    EXPECT_EQ(HttpGet(w->http_port, "/health").status, 200);
  }
}

// The verdict of the background clients and the workers' KV blocks, after everything else.
void OthersWereServedThroughoutAndEveryBlockIsFree(const Cluster& cluster) {
  cluster.load->Stop();
  std::printf("background requests: %d sent, %d succeeded\n", cluster.load->sent(),
              cluster.load->succeeded());
  EXPECT_GT(cluster.load->succeeded(), 0);
  for (const std::string& f : cluster.load->failures())
    ADD_FAILURE() << "valid request failed: " << f;
  EXPECT_EQ(cluster.load->succeeded(), cluster.load->sent());
  std::string why;
  EXPECT_TRUE(AllBlocksFree(*cluster.plain, *cluster.colocated, &why)) << why;
  EXPECT_TRUE(AllBlocksFree(*cluster.pd, *cluster.prefill, &why)) << why;
  EXPECT_TRUE(AllBlocksFree(*cluster.pd, *cluster.decode, &why)) << why;
  // Still up and well.
  for (const RouterProcess* router : {cluster.plain.get(), cluster.pd.get()}) {
    EXPECT_EQ(HttpGet(router->port, "/health").status, 200);
  }
}

// One test, so that the background clients run through every section (ctest runs each test in
// a process of its own) and the daemons start once.
TEST(BadInput, EveryBadInputIsAnsweredWhileOthersAreServed) {
  Cluster cluster;
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the cluster did not come up";
  using Section = void (*)(const Cluster&);
  const std::vector<std::pair<const char*, Section>> sections = {
      {"bodies", BodiesGetTheDocumentedStatusAndNameTheProblem},
      {"malformed HTTP", MalformedHttpGetsTheDocumentedStatus},
      {"huge max_tokens", HugeMaxTokensIsClampedToTheContextLeft},
      {"HTTP/1.0 and pipelining", Http10AndPipelinedRequests},
      {"slowloris", SlowlorisIsCutOffAfterTheReadTimeout},
      {"idle and half-sent", IdleAndHalfSentConnectionsAreClosed},
      {"clients that leave early", ClientsThatLeaveEarlyFreeTheirWork},
      {"max connections", ConnectionsBeyondTheMaximumDisplaceTheLongestIdle},
      {"worker status ports", WorkerStatusPortsReadNoBody},
      {"throwing inputs", ThrowingInputsAreAnsweredAndTheRouterKeepsServing},
      {"huge prompt", HugePromptIsRefusedBeforeAnyLeg},
      {"duplicate rid", DuplicateLiveRidIs409},
      {"verdict", OthersWereServedThroughoutAndEveryBlockIsFree},
  };
  for (const auto& [name, section] : sections) {
    SCOPED_TRACE(name);
    section(cluster);
  }
  std::printf("bad inputs tried: %d\n", bad_inputs_tried.load());
}

}  // namespace
}  // namespace tandem::itest
