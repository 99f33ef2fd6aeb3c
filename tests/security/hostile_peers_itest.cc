// The hostile-peer suite: a router in front of a prefill + decode pair, all real processes on the
// shipped model. While background clients keep generating through the router, strangers without
// the cluster secret throw everything they can at each port a worker opens to the cluster: worker
// gRPC, the session socket, the prefill worker's bootstrap channel and both KV transfer
// endpoints. Garbage bytes, other protocols, frames announcing huge sizes, calls with missing or
// forged cluster tokens, forged handshakes, floods of half-open connections and of KV Hellos.
// Every background request must succeed throughout; at the end every process is alive and
// healthy, every worker has all its KV blocks free, and its open descriptors and resident memory
// are back within the bounds stated below.
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/frames.h"
#include "gtest/gtest.h"
#include "kvtransfer/frame.h"
#include "proto/worker.grpc.pb.h"
#include "tests/badinput/background_load.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const char kApiKey[] = "hostile-client-key-0123";
const char kAdminKey[] = "hostile-admin-key-4567";

// How far a worker may end above where it started once the strangers are gone. The descriptor
// bound covers connections the router opens on its own (health checks, a re-dialled session);
// the memory bound covers allocator growth from the background traffic itself.
constexpr int kFdSlack = 24;
constexpr int64_t kRssSlackBytes = int64_t{96} << 20;

// Cases tried, per surface; printed at the end.
std::map<std::string, int> cases_tried;

// Sends `bytes` (as far as the peer takes them within `limit`) and waits up to `limit` for the
// peer to close. True when it closed (EOF or reset); bytes that arrived go to `received`.
bool SendAndWaitForClose(int fd, const std::string& bytes, milliseconds limit,
                         std::string* received) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t sent = 0;
  while (sent < bytes.size() && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (p.revents & (POLLERR | POLLHUP)) return true;
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) return true;  // reset while sending: closed on us
    sent += static_cast<size_t>(n);
  }
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
    if (received->size() < (1 << 20)) received->append(buf, static_cast<size_t>(n));
  }
  return false;
}

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

std::string FrameHeader4(uint32_t size) {
  std::string out;
  AppendFrameHeader(&out, size);
  return out;
}

// Byte streams a stranger sends to a TCP port, whatever protocol it speaks. `must_close`: every
// one of Tandem's cluster ports must hang up on it within the wait.
struct RawCase {
  std::string name;
  std::string bytes;
  bool must_close;
};

std::vector<RawCase> RawCases() {
  const std::string http2_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const std::string zmtp_greeting = std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10);
  return {
      {"nothing, then close", "", false},
      {"one NUL byte", std::string(1, '\0'), false},
      {"64 random bytes", Random(64, 1), true},
      {"64 KiB of random bytes", Random(64 << 10, 2), true},
      {"an HTTP/1.1 request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
      {"an HTTP/1.1 POST with a huge Content-Length",
       "POST /tandem.proto.Worker/Session HTTP/1.1\r\nHost: x\r\nContent-Length: "
       "99999999999\r\n\r\n",
       true},
      {"the HTTP/2 preface, then garbage", http2_preface + Random(256, 3), true},
      {"the HTTP/2 preface and a 16 MiB frame header",
       http2_preface + std::string("\xff\xff\xff\x00\x00\x00\x00\x00\x01", 9) + Random(4096, 4),
       true},
      {"a ZMTP greeting, then garbage", zmtp_greeting + Random(512, 5), true},
      {"a TLS ClientHello",
       std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11) + Random(160, 6), true},
      {"a frame header announcing 4 GiB", FrameHeader4(0xffffffffu) + Random(1024, 7), true},
      {"a frame header announcing 60 MiB and 2 MiB of it",
       FrameHeader4(60u << 20) + Random(2 << 20, 8), true},
      {"the session protocol name and a forged token",
       FrameHeader4(64) + "tandem-session-v1 " + Random(46, 9), true},
      {"many empty frames",
       [] {
         std::string s;
         for (int i = 0; i < 4096; ++i) s += FrameHeader4(0);
         return s;
       }(),
       true},
  };
}

// A cluster port and what it is.
struct Surface {
  std::string name;  // "gRPC", "session socket", "bootstrap", "KV transfer"
  std::string owner;
  int port;
};

// The daemons under test and the clients that must be served throughout.
struct Cluster {
  std::unique_ptr<WorkerProcess> prefill;
  std::unique_ptr<WorkerProcess> decode;
  std::unique_ptr<RouterProcess> router;
  std::unique_ptr<BackgroundLoad> load;
  std::string secret_file;
  std::map<std::string, int> session_port, transfer_port;

  Cluster() {
    for (const char* role : {"prefill", "decode"}) {
      session_port[role] = FreePort();
      transfer_port[role] = FreePort();
    }
    prefill = StartWorker("prefill", {"--session-port", std::to_string(session_port["prefill"]),
                                      "--transfer-port", std::to_string(transfer_port["prefill"])});
    decode = StartWorker("decode", {"--session-port", std::to_string(session_port["decode"]),
                                    "--transfer-port", std::to_string(transfer_port["decode"])});
    secret_file = ::testing::TempDir() + "hostile_peers_cluster_secret";
    std::ofstream(secret_file) << kTestClusterSecret << "\n";
    router = StartRouter({"--pd-disaggregation", "--prefill", prefill->url(),
                          std::to_string(prefill->bootstrap_port), "--decode", decode->url(),
                          "--cluster-secret-file", secret_file, "--api-key", kApiKey, "--admin-key",
                          kAdminKey});
    load = std::make_unique<BackgroundLoad>(std::vector<int>{router->port, router->port}, kApiKey);
  }
  ~Cluster() {
    load.reset();
    std::remove(secret_file.c_str());
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  std::vector<Surface> Surfaces() const {
    return {
        {"gRPC", "prefill", prefill->grpc_port},
        {"gRPC", "decode", decode->grpc_port},
        {"session socket", "prefill", session_port.at("prefill")},
        {"session socket", "decode", session_port.at("decode")},
        {"bootstrap", "prefill", prefill->bootstrap_port},
        {"KV transfer", "prefill", transfer_port.at("prefill")},
        {"KV transfer", "decode", transfer_port.at("decode")},
    };
  }
  std::vector<const WorkerProcess*> workers() const { return {prefill.get(), decode.get()}; }
};

bool Alive(const WorkerProcess& w) { return HttpGet(w.http_port, "/health").status == 200; }

// Every raw case against every port at once (a ZMQ port hangs up on a connection that never
// completes the ZMTP handshake only after its handshake interval, so one after the other would
// take minutes).
void RawBytesAreRefused(const Cluster& cluster) {
  struct Outcome {
    std::string what;
    bool must_close = false;
    bool connected = false;
    bool closed = false;
    std::string received;
  };
  const std::vector<RawCase> cases = RawCases();
  std::vector<Surface> surfaces = cluster.Surfaces();
  std::vector<Outcome> outcomes(surfaces.size() * cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < surfaces.size(); ++i) {
    for (size_t j = 0; j < cases.size(); ++j) {
      Outcome& o = outcomes[i * cases.size() + j];
      o.what = surfaces[i].owner + " " + surfaces[i].name + ": " + cases[j].name;
      o.must_close = cases[j].must_close;
      ++cases_tried[surfaces[i].name];
      threads.emplace_back([&o, port = surfaces[i].port, &c = cases[j]] {
        const int fd = ConnectLoopback(port);
        o.connected = fd >= 0;
        if (fd < 0) return;
        o.closed = SendAndWaitForClose(fd, c.bytes, seconds(c.must_close ? 20 : 1), &o.received);
        ::close(fd);
      });
    }
  }
  for (std::thread& t : threads) t.join();
  for (const Outcome& o : outcomes) {
    SCOPED_TRACE(o.what);
    EXPECT_TRUE(o.connected) << "cannot connect";
    if (o.must_close) {
      EXPECT_TRUE(o.closed) << "the port kept a stranger's connection open";
    }
    // Whatever came back is a greeting, a challenge or a refusal: never a leg's output, a model
    // id or the KV geometry.
    EXPECT_EQ(o.received.find("tandem-tiny"), std::string::npos) << o.received;
  }
}

// gRPC calls that carry no valid cluster token: each must end UNAUTHENTICATED.
void ForgedTokensAreRefused(const Cluster& cluster) {
  const auto ms = std::to_string(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  const std::string zeros(64, '0');
  const std::vector<std::pair<std::string, std::optional<std::string>>> tokens = {
      {"no token", std::nullopt},
      {"an empty token", ""},
      {"a bare version", "v1"},
      {"garbage", "not-a-token"},
      {"a v1 token with a zero MAC", "v1." + ms + "." + zeros},
      {"a v2 token with a zero MAC", "v2." + ms + "." + zeros},
      {"a token from 1970", "v1.0." + zeros},
      {"a token from the far future", "v1.99999999999999." + zeros},
      {"a non-numeric time", "v1.abc." + zeros},
      {"a MAC that is not hex", "v1." + ms + "." + std::string(64, 'z')},
      {"a 6 KiB token", "v1." + ms + "." + std::string(6 << 10, 'a')},
  };
  for (const WorkerProcess* w : cluster.workers()) {
    auto stub = proto::Worker::NewStub(
        grpc::CreateChannel(w->grpc_address(), grpc::InsecureChannelCredentials()));
    for (const auto& [name, token] : tokens) {
      SCOPED_TRACE(w->role + ": " + name);
      auto call = [&](auto&& invoke) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
        if (token) ctx.AddMetadata("x-tandem-auth", *token);
        const grpc::Status st = invoke(&ctx);
        ++cases_tried["gRPC"];
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
      };
      call([&](grpc::ClientContext* ctx) {
        proto::HealthResponse r;
        return stub->Health(ctx, proto::HealthRequest(), &r);
      });
      call([&](grpc::ClientContext* ctx) {
        proto::LoadReport r;
        return stub->GetLoad(ctx, proto::LoadRequest(), &r);
      });
      call([&](grpc::ClientContext* ctx) {
        proto::AbortResponse r;
        proto::AbortRequest req;
        req.set_rid("someone-elses-request");
        return stub->Abort(ctx, req, &r);
      });
      call([&](grpc::ClientContext* ctx) {
        proto::FlushCacheResponse r;
        return stub->FlushCache(ctx, proto::FlushCacheRequest(), &r);
      });
      call([&](grpc::ClientContext* ctx) {
        proto::ServerInfo r;
        return stub->GetServerInfo(ctx, proto::ServerInfoRequest(), &r);
      });
      call([&](grpc::ClientContext* ctx) {
        proto::KvEventsReply r;
        proto::KvEventsRequest req;
        req.set_snapshot(true);
        return stub->GetKvEvents(ctx, req, &r);
      });
      call([&](grpc::ClientContext* ctx) {
        auto session = stub->Session(ctx);
        proto::SessionUp up;
        session->Write(up);
        session->WritesDone();
        proto::SessionDown down;
        EXPECT_FALSE(session->Read(&down)) << "a stranger's session was answered";
        return session->Finish();
      });
    }
  }
}

// ZMQ peers on the bootstrap channel and the KV transfer endpoints: messages of the wrong shape,
// unsealed or forged control messages, forged handshakes, frames without a session.
void ForgedZmqMessagesAreIgnored(const Cluster& cluster) {
  zmq::context_t ctx(1);
  auto dealer = [&](int port) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 300);
    s.connect("tcp://127.0.0.1:" + std::to_string(port));
    return s;
  };
  auto send_parts = [](zmq::socket_t& s, const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      s.send(zmq::buffer(parts[i]),
             i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  // Bootstrap: anything without the cluster's seal is dropped.
  {
    const std::vector<std::vector<std::string>> messages = {
        {""},
        {"garbage"},
        {std::string(32, '\0') + "not a control message"},
        {Random(32, 11) + Random(200, 12)},
        {"a", "b", "c"},
        {Random(1 << 20, 13)},        // at the size limit
        {Random((1 << 20) + 1, 14)},  // over it: the connection is dropped
    };
    for (const auto& m : messages) {
      zmq::socket_t s = dealer(cluster.prefill->bootstrap_port);
      send_parts(s, m);
      ++cases_tried["bootstrap"];
      // At most a sealed refusal comes back, which names nothing of the worker's.
      zmq::message_t reply;
      if (s.recv(reply).has_value()) {
        EXPECT_EQ(reply.to_string().find("tandem-tiny"), std::string::npos);
      }
    }
  }
  // KV transfer: without the handshake nothing is applied and nothing sensitive is said.
  for (const char* role : {"prefill", "decode"}) {
    const int port = cluster.transfer_port.at(role);
    kv::FrameHeader h;
    auto header = [](const kv::FrameHeader& fh) {
      auto a = kv::EncodeHeader(fh);
      return std::string(a.data(), a.size());
    };
    kv::HelloBody hello;
    hello.client_nonce = Random(kv::kNonceSize, 21);
    hello.client_name = "stranger";
    h.type = kv::FrameType::kHello;
    const std::string hello_frame = header(h);
    kv::FrameHeader write;
    write.type = kv::FrameType::kWrite;
    write.session = 12345;
    write.length = 16;
    kv::FrameHeader auth;
    auth.type = kv::FrameType::kAuth;
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"one part", {"x"}},
        {"three parts", {"a", "b", "c"}},
        {"a short header", {"TKVF", ""}},
        {"a header of random bytes", {Random(kv::kFrameHeaderSize, 22), ""}},
        {"a Hello with an empty body", {hello_frame, ""}},
        {"a Hello with a garbage body", {hello_frame, Random(300, 23)}},
        {"an Auth before any Hello", {header(auth), Random(kv::kProofSize, 24)}},
        {"a write without a session", {header(write), std::string(16, 'x')}},
        {"a well-formed Hello from a stranger, then a forged Auth",
         {hello_frame, kv::EncodeHello(hello)}},
    };
    for (const auto& [name, parts] : cases) {
      SCOPED_TRACE(std::string(role) + " KV transfer: " + name);
      zmq::socket_t s = dealer(port);
      send_parts(s, parts);
      ++cases_tried["KV transfer"];
      zmq::message_t head;
      while (s.recv(head).has_value()) {
        std::string body;
        zmq::message_t part;
        while (s.get(zmq::sockopt::rcvmore) && s.recv(part).has_value()) body += part.to_string();
        auto parsed = kv::ParseHeader(head.data(), head.size());
        ASSERT_TRUE(parsed.ok());
        // A stranger is never welcomed and never told the model or the KV geometry.
        EXPECT_NE(parsed->type, kv::FrameType::kWelcome);
        EXPECT_EQ(body.find("tandem-tiny"), std::string::npos) << body;
        EXPECT_EQ(body.find("layers"), std::string::npos) << body;
        if (parsed->type == kv::FrameType::kChallenge) {
          send_parts(s, {header(auth), Random(kv::kProofSize, 25)});  // a forged proof
        }
      }
    }
  }
}

// Connections held open without a word, a few hundred at a time, on every port; the background
// clients must keep being served while they are held.
void HalfOpenConnectionFloods(const Cluster& cluster) {
  constexpr int kPerPort = 100;
  std::vector<int> held;
  for (const Surface& s : cluster.Surfaces()) {
    for (int i = 0; i < kPerPort; ++i) {
      const int fd = ConnectLoopback(s.port);
      if (fd >= 0) held.push_back(fd);
    }
    ++cases_tried[s.name];
  }
  const int before = cluster.load->succeeded();
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (cluster.load->succeeded() < before + 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_GE(cluster.load->succeeded(), before + 4) << "no request finished while connections "
                                                      "were held open";
  for (int fd : held) ::close(fd);
}

// Thousands of KV Hellos from strangers, each on its own connection: the authenticated pair
// keeps transferring (background requests keep finishing) during and after.
void HelloFloodLeavesTheAuthenticatedPairWorking(const Cluster& cluster) {
  constexpr int kHellos = 5000;
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::max_sockets, 4096);
  kv::FrameHeader h;
  h.type = kv::FrameType::kHello;
  const auto head = kv::EncodeHeader(h);
  kv::HelloBody hello;
  hello.client_name = "stranger";
  const int before = cluster.load->succeeded();
  for (const char* role : {"decode", "prefill"}) {
    const std::string endpoint =
        "tcp://127.0.0.1:" + std::to_string(cluster.transfer_port.at(role));
    std::vector<zmq::socket_t> open;
    for (int i = 0; i < kHellos; ++i) {
      // A fresh routing id per Hello, as many connections would have.
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::routing_id, "stranger-" + std::to_string(i));
      s.connect(endpoint);
      hello.client_nonce = Random(kv::kNonceSize, static_cast<uint32_t>(i));
      s.send(zmq::buffer(head.data(), head.size()), zmq::send_flags::sndmore);
      s.send(zmq::buffer(kv::EncodeHello(hello)), zmq::send_flags::none);
      open.push_back(std::move(s));
      if (open.size() == 100) {
        // Bounded descriptors on this side: ZMQ closes sockets in the background, so wait for
        // it to catch up before opening more.
        open.clear();
        for (int wait = 0; wait < 100 && OpenFds(getpid()) > 1000; ++wait) {
          std::this_thread::sleep_for(milliseconds(50));
        }
      }
    }
    ++cases_tried["KV transfer"];
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(90);
  while (cluster.load->succeeded() < before + 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_GE(cluster.load->succeeded(), before + 8)
      << "requests stopped finishing after a Hello flood";
}

// One test, so the background clients run through every section and the daemons start once.
TEST(HostilePeers, StrangersAreRefusedWhileTheClusterServes) {
  Cluster cluster;
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the cluster did not come up";
  // Let the pair warm up (first requests, sessions open) before taking the baseline.
  const auto warm = std::chrono::steady_clock::now() + seconds(60);
  while (cluster.load->succeeded() < 4 && std::chrono::steady_clock::now() < warm) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::map<std::string, std::pair<int64_t, int>> start;  // role -> (RSS bytes, fds)
  for (const WorkerProcess* w : cluster.workers()) {
    start[w->role] = {ProcStatusBytes(w->process->pid(), "VmRSS"), OpenFds(w->process->pid())};
  }
  using Section = void (*)(const Cluster&);
  const std::vector<std::pair<const char*, Section>> sections = {
      {"raw bytes", RawBytesAreRefused},
      {"forged tokens", ForgedTokensAreRefused},
      {"forged ZMQ messages", ForgedZmqMessagesAreIgnored},
      {"half-open floods", HalfOpenConnectionFloods},
      {"Hello flood", HelloFloodLeavesTheAuthenticatedPairWorking},
  };
  for (const auto& [name, section] : sections) {
    SCOPED_TRACE(name);
    section(cluster);
    for (const WorkerProcess* w : cluster.workers()) {
      ASSERT_TRUE(Alive(*w)) << w->role << " died or stopped answering after " << name;
    }
  }
  cluster.load->Stop();
  std::printf("background requests: %d sent, %d succeeded\n", cluster.load->sent(),
              cluster.load->succeeded());
  EXPECT_GT(cluster.load->succeeded(), 0);
  for (const std::string& f : cluster.load->failures()) {
    ADD_FAILURE() << "valid request failed: " << f;
  }
  EXPECT_EQ(cluster.load->succeeded(), cluster.load->sent());
  EXPECT_EQ(HttpGet(cluster.router->port, "/health").status, 200);
  for (const WorkerProcess* w : cluster.workers()) {
    std::string why;
    EXPECT_TRUE(WaitForAllKvBlocksFree(cluster.router->port, kAdminKey, w->http_port, &why))
        << w->role << ": " << why;
    // Descriptors of the strangers' connections are closed once they are gone (the servers
    // notice a peer's close at their next read: allow them a moment).
    const pid_t pid = w->process->pid();
    const auto deadline = std::chrono::steady_clock::now() + seconds(30);
    while (OpenFds(pid) > start[w->role].second + kFdSlack &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(200));
    }
    const int64_t rss = ProcStatusBytes(pid, "VmRSS");
    const int fds = OpenFds(pid);
    std::printf("%s: RSS %lld -> %lld KiB, open fds %d -> %d\n", w->role.c_str(),
                static_cast<long long>(start[w->role].first >> 10),
                static_cast<long long>(rss >> 10), start[w->role].second, fds);
    EXPECT_LE(fds, start[w->role].second + kFdSlack) << w->role;
    EXPECT_LE(rss, start[w->role].first + kRssSlackBytes) << w->role;
  }
  int total = 0;
  for (const auto& [surface, n] : cases_tried) {
    std::printf("hostile cases on %s: %d\n", surface.c_str(), n);
    total += n;
  }
  std::printf("hostile cases in all: %d\n", total);
}

// A worker's refusal reaches the client naming the role that failed, never where the worker is:
// workers started with a shorter context than the model's refuse a prompt the router let through.
TEST(HostilePeers, ClientErrorsNameTheRoleNotTheWorker) {
  const std::vector<std::string> short_context = {"--context-length", "32"};
  std::unique_ptr<WorkerProcess> prefill = StartWorker("prefill", short_context);
  std::unique_ptr<WorkerProcess> decode = StartWorker("decode", short_context);
  const std::string secret_file = ::testing::TempDir() + "hostile_errors_cluster_secret";
  std::ofstream(secret_file) << kTestClusterSecret << "\n";
  std::unique_ptr<RouterProcess> router = StartRouter(
      {"--pd-disaggregation", "--prefill", prefill->url(), std::to_string(prefill->bootstrap_port),
       "--decode", decode->url(), "--cluster-secret-file", secret_file});
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the cluster did not come up";
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "Tell me a fortune. ";
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    testing::TestClient c(static_cast<uint16_t>(router->port), 60);
    c.SendRequest("POST", "/generate",
                  std::string(R"({"text":")") + prompt +
                      R"(","sampling_params":{"max_new_tokens":4},"stream":)" +
                      (stream ? "true" : "false") + "}",
                  "Content-Type: application/json\r\nConnection: close\r\n");
    const std::optional<testing::ClientResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("worker failed"), std::string::npos) << r->body;
    for (const WorkerProcess* w : {prefill.get(), decode.get()}) {
      for (int port : {w->grpc_port, w->http_port, w->bootstrap_port}) {
        if (port == 0) continue;
        EXPECT_EQ(r->body.find(std::to_string(port)), std::string::npos) << r->body;
      }
    }
    EXPECT_EQ(r->body.find("127.0.0.1"), std::string::npos) << r->body;
  }
  std::remove(secret_file.c_str());
}

}  // namespace
}  // namespace tandem::itest
