// Fault injection on real processes (tandem-router, tandem-prefill, tandem-decode on the shipped
// model, loopback): kill -9 of a prefill worker mid-transfer, of a decode worker mid-stream and of
// the router with requests in flight, worker restarts that re-register, and a decode worker
// stopped (SIGSTOP) mid-stream until the router's stall timeout ends its streams. For every fault:
// each client call returns before its deadline with a success equal to the clean run's greedy
// output or a clear error (status and message), surviving workers end with every KV block free
// (their /metrics), and the router's view of worker health converges. Each test prints one
// "[fault-summary]" line with the faults it injected and what its requests saw.
// The network faults (partition, slow lossy link) are in fault_netns_test.sh.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/faults/fault_harness.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest::faults {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Waits (bounded) until `done()`; false on timeout.
template <typename Fn>
bool WaitUntil(Fn done, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

class ProcessFaultsTest : public ::testing::Test {
 protected:
  // A PD router over `prefills` and `decodes`, with the suite's request timeout and `extra` flags.
  std::unique_ptr<RouterProcess> PdRouter(const std::vector<WorkerProcess*>& prefills,
                                          const std::vector<WorkerProcess*>& decodes,
                                          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"--pd-disaggregation", "--request-timeout-secs",
                                     std::to_string(kRequestTimeoutSecs), "--cluster-secret-file",
                                     secret_.path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (WorkerProcess* p : prefills) {
      argv.insert(argv.end(), {"--prefill", p->url(), std::to_string(p->bootstrap_port)});
    }
    for (WorkerProcess* d : decodes) argv.insert(argv.end(), {"--decode", d->url()});
    return StartRouter(argv);
  }

  // Runs `bodies` concurrently; `on_first_chunk` as in Generate().
  static std::vector<CallResult> RunConcurrently(const std::vector<json>& bodies, int port,
                                                 const std::function<void()>& on_first_chunk,
                                                 const std::function<void()>& inject) {
    std::vector<CallResult> results(bodies.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < bodies.size(); ++i) {
      clients.emplace_back([&, i] { results[i] = Generate(port, bodies[i], on_first_chunk); });
    }
    inject();
    for (auto& t : clients) t.join();
    return results;
  }

  static void ExpectAllFree(int router_port, const std::vector<WorkerProcess*>& workers) {
    for (WorkerProcess* w : workers) {
      std::string why;
      EXPECT_TRUE(BlocksFreeEqualTotal(router_port, *w, &why)) << why;
    }
  }

  static void ExpectHealth(int router_port, const std::map<std::string, bool>& healthy) {
    std::string why;
    EXPECT_TRUE(HealthConverges(router_port, healthy, &why)) << why;
  }

  // How every fault test ends: the router's view of worker health converges to `healthy`, the
  // `survivors` have every KV block free, and the summary line is printed with the router's
  // retry count.
  static void ExpectRecovered(int router_port, const std::map<std::string, bool>& healthy,
                              const std::vector<WorkerProcess*>& survivors, Tally& tally,
                              const std::string& name) {
    ExpectHealth(router_port, healthy);
    ExpectAllFree(router_port, survivors);
    tally.retries = static_cast<int>(Metric(router_port, "tandem_router_retries_total"));
    tally.Print(name);
  }

  SecretFile secret_;
};

// 1. A prefill worker is killed while its legs compute and push KV. Requests on it are retried
// on the other prefill worker (a new room) or fail with a 5xx naming the worker; the survivor and
// the decode worker end with every block free; the router marks the dead worker unhealthy.
TEST_F(ProcessFaultsTest, PrefillKilledMidTransfer) {
  auto survivor = StartWorker("prefill");
  auto doomed = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router = PdRouter({survivor.get(), doomed.get()}, {decode.get()});
  ASSERT_FALSE(HasFailure()) << "the cluster did not start";
  constexpr int kRequests = 12;
  std::vector<json> bodies;
  for (int i = 0; i < kRequests; ++i) bodies.push_back(LongPromptBody(i, 440, 6));
  const std::vector<json> expected = ReferenceOutputs(router->port, bodies);
  const double prompts_before = Metric(doomed->http_port, "tandem_engine_prompt_tokens_total");

  Tally tally;
  std::vector<CallResult> results = RunConcurrently(bodies, router->port, {}, [&] {
    // Mid-transfer: once the doomed worker admitted a new prompt of this round.
    EXPECT_TRUE(WaitUntil(
        [&] {
          return Metric(doomed->http_port, "tandem_engine_prompt_tokens_total") > prompts_before;
        },
        seconds(30)));
    doomed->Kill();
    ++tally.faults;
  });
  for (int i = 0; i < kRequests; ++i) {
    const std::string problem = tally.Add(results[i], expected[i]);
    EXPECT_TRUE(problem.empty()) << "request " << i << ": " << problem;
    if (results[i].status >= 500) {
      EXPECT_NE(results[i].error.find("worker"), std::string::npos) << results[i].body;
    }
  }
  // The kill hit legs in flight: they were retried on the survivor or failed.
  EXPECT_GE(Metric(router->port, "tandem_router_retries_total") + tally.errors, 1);
  // Afterwards the survivor takes everything.
  for (int i = 0; i < 4; ++i) {
    const std::string problem = tally.Add(Generate(router->port, bodies[i]), expected[i]);
    EXPECT_TRUE(problem.empty()) << "after the kill, request " << i << ": " << problem;
  }
  ExpectRecovered(router->port,
                  {{survivor->url(), true}, {doomed->url(), false}, {decode->url(), true}},
                  {survivor.get(), decode.get()}, tally, "prefill_killed_mid_transfer");
}

// 2. A decode worker is killed while streams on it are delivering tokens. Tokens already streamed
// are not retried: those clients get an error event naming the failure; streams on the other
// decode worker finish with the clean output; new requests succeed.
TEST_F(ProcessFaultsTest, DecodeKilledMidStream) {
  auto prefill = StartWorker("prefill");
  auto survivor = StartWorker("decode");
  auto doomed = StartWorker("decode");
  auto router = PdRouter({prefill.get()}, {survivor.get(), doomed.get()});
  ASSERT_FALSE(HasFailure()) << "the cluster did not start";
  constexpr int kRequests = 6;
  constexpr int kMaxNew = 440;  // long streams (the model's context is 512 tokens)
  std::vector<json> bodies;
  for (int i = 0; i < kRequests; ++i) bodies.push_back(GreedyBody(i, kMaxNew, true));
  const std::vector<json> expected = ReferenceOutputs(router->port, bodies);

  Tally tally;
  std::atomic<int> streaming{0};
  std::vector<CallResult> results = RunConcurrently(
      bodies, router->port, [&] { ++streaming; },
      [&] {
        EXPECT_TRUE(WaitUntil([&] { return streaming.load() == kRequests; }, seconds(30)));
        doomed->Kill();
        ++tally.faults;
      });
  int cut = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string problem = tally.Add(results[i], expected[i]);
    EXPECT_TRUE(problem.empty()) << "request " << i << ": " << problem;
    if (results[i].status == 200 && !results[i].error.empty()) ++cut;
  }
  // Round robin put half of the streams on the killed worker; a stream that finished before the
  // kill landed is a success, so at least one cut stream shows the fault hit mid-stream.
  EXPECT_GE(cut, 1) << "no stream was cut: the kill came after every stream finished";
  for (int i = 0; i < 4; ++i) {
    json body = bodies[i];
    body["stream"] = false;
    const std::string problem = tally.Add(Generate(router->port, body), expected[i]);
    EXPECT_TRUE(problem.empty()) << "after the kill, request " << i << ": " << problem;
  }
  ExpectRecovered(router->port,
                  {{prefill->url(), true}, {survivor->url(), true}, {doomed->url(), false}},
                  {prefill.get(), survivor.get()}, tally, "decode_killed_mid_stream");
}

// 3. The router is killed with streams in flight. Clients see the connection drop (no hang); the
// workers notice their cancelled gRPC legs (cancelled legs counted on /metrics) and free every
// block; a new router on the same port serves again.
TEST_F(ProcessFaultsTest, RouterKilledWithRequestsInFlight) {
  auto prefill = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router = PdRouter({prefill.get()}, {decode.get()});
  ASSERT_FALSE(HasFailure()) << "the cluster did not start";
  constexpr int kRequests = 6;
  std::vector<json> bodies;
  for (int i = 0; i < kRequests; ++i) bodies.push_back(GreedyBody(i, 440, true));
  const std::vector<json> expected = ReferenceOutputs(router->port, bodies);
  const std::string cancelled = R"(tandem_worker_requests_total{outcome="cancelled"})";
  const double cancelled_before = std::max(0.0, Metric(decode->http_port, cancelled));

  Tally tally;
  std::atomic<int> streaming{0};
  std::vector<CallResult> results = RunConcurrently(
      bodies, router->port, [&] { ++streaming; },
      [&] {
        EXPECT_TRUE(WaitUntil([&] { return streaming.load() == kRequests; }, seconds(30)));
        router->Kill();
        ++tally.faults;
      });
  for (int i = 0; i < kRequests; ++i) {
    const std::string problem = tally.Add(results[i], expected[i], /*drop_allowed=*/true);
    EXPECT_TRUE(problem.empty()) << "request " << i << ": " << problem;
  }
  EXPECT_GE(tally.dropped, 1) << "no stream was in flight when the router died";
  // The decode worker saw its streams' callers go away: the cancelled legs are counted and their
  // blocks come back without any router (the decode worker keeps no prefix cache).
  EXPECT_TRUE(WaitUntil(
      [&] { return Metric(decode->http_port, cancelled) >= cancelled_before + tally.dropped; },
      seconds(30)))
      << "cancelled legs on the decode worker: " << Metric(decode->http_port, cancelled)
      << ", dropped streams: " << tally.dropped;
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric(decode->http_port, "tandem_engine_kv_free_blocks") ==
               Metric(decode->http_port, "tandem_engine_kv_total_blocks");
      },
      seconds(30)));

  std::string why;
  ASSERT_TRUE(router->Launch(&why)) << "a new router on port " << router->port << ":\n" << why;
  ++tally.faults;  // the restart
  ExpectHealth(router->port, {{prefill->url(), true}, {decode->url(), true}});
  for (int i = 0; i < 3; ++i) {
    const std::string problem = tally.Add(Generate(router->port, bodies[i]), expected[i]);
    EXPECT_TRUE(problem.empty()) << "through the new router, request " << i << ": " << problem;
  }
  ExpectAllFree(router->port, {prefill.get(), decode.get()});
  tally.retries = static_cast<int>(Metric(router->port, "tandem_router_retries_total"));
  tally.Print("router_killed_in_flight");
}

// 6. Workers restart and re-register. A decode worker killed, removed, restarted and added back
// through the admin API is served again; a prefill worker killed and restarted on the same ports
// is marked unhealthy, then healthy again. Requests sent while a worker is down get a retried
// success or a clear error; after a restart that the pair recovers from they all succeed.
class WorkerRestartTest : public ProcessFaultsTest {
 protected:
  void SetUp() override {
    prefill_ = StartWorker("prefill");
    decode_ = StartWorker("decode");
    router_ = PdRouter({prefill_.get()}, {decode_.get()}, RouterFlags());
    ASSERT_FALSE(HasFailure()) << "the cluster did not start";
    for (int i = 0; i < 4; ++i) bodies_.push_back(GreedyBody(i, 8, false));
    expected_ = ReferenceOutputs(router_->port, bodies_);
  }
  void SendAll(const std::string& when, bool must_succeed) {
    for (int i = 0; i < 4; ++i) {
      CallResult r = Generate(router_->port, bodies_[i]);
      const std::string problem = tally_.Add(r, expected_[i]);
      EXPECT_TRUE(problem.empty()) << when << ", request " << i << ": " << problem;
      if (must_succeed) {
        EXPECT_EQ(r.status, 200) << when << ": " << r.body;
      }
    }
  }
  // Both workers healthy and with every block free, and the summary printed.
  void ExpectPairRecovered(const std::string& name) {
    ExpectRecovered(router_->port, {{prefill_->url(), true}, {decode_->url(), true}},
                    {prefill_.get(), decode_.get()}, tally_, name);
  }

  virtual std::vector<std::string> RouterFlags() const { return {}; }
  // The prefill worker's circuit as the router's /workers shows it ("" if not listed).
  std::string PrefillCircuit() const {
    json j = json::parse(RouterAdmin(router_->port, "GET", "/workers").body, nullptr, false);
    if (j.is_discarded() || !j.contains("workers")) return "";
    for (const json& w : j["workers"]) {
      if (w.value("url", "") == prefill_->url()) return w.value("circuit", "");
    }
    return "";
  }

  std::unique_ptr<WorkerProcess> prefill_, decode_;
  std::unique_ptr<RouterProcess> router_;
  std::vector<json> bodies_, expected_;
  Tally tally_;
};

TEST_F(WorkerRestartTest, DecodeRestartedAndAddedBack) {
  decode_->Kill();
  ++tally_.faults;
  SendAll("decode down", false);
  HttpReply removed =
      RouterAdmin(router_->port, "DELETE", "/workers", json({{"url", decode_->url()}}).dump());
  EXPECT_EQ(removed.status, 200) << removed.body;
  ExpectHealth(router_->port, {{prefill_->url(), true}});
  SendAll("no decode worker", false);
  std::string why;
  ASSERT_TRUE(decode_->Launch(&why)) << why;
  HttpReply added = RouterAdmin(router_->port, "POST", "/workers",
                                json({{"url", decode_->url()}, {"worker_type", "decode"}}).dump());
  EXPECT_EQ(added.status, 200) << added.body;
  ExpectHealth(router_->port, {{prefill_->url(), true}, {decode_->url(), true}});
  SendAll("decode added back", true);
  ExpectPairRecovered("decode_restarted_and_added_back");
}

// The restarted prefill worker does not know the decode worker: it answers the first room with
// RegisterAgain, and the decode worker registers again on its open bootstrap connection and
// resends the room, so every request after the restart succeeds.
TEST_F(WorkerRestartTest, PrefillRestartedOnSamePortsServesAgain) {
  prefill_->Kill();
  ++tally_.faults;
  ExpectHealth(router_->port, {{prefill_->url(), false}, {decode_->url(), true}});
  SendAll("prefill down", false);
  std::string why;
  ASSERT_TRUE(prefill_->Launch(&why)) << why;
  ExpectHealth(router_->port, {{prefill_->url(), true}, {decode_->url(), true}});
  SendAll("prefill restarted", true);
  ExpectPairRecovered("prefill_restarted_on_same_ports");
}

// A worker whose circuit opened when it died is back in rotation within about one health check of
// its restart, not after --cb-timeout-duration-secs (an hour here): the passing health check
// half-opens the circuit and the requests after it close it.
class CircuitRestartTest : public WorkerRestartTest {
 protected:
  std::vector<std::string> RouterFlags() const override {
    return {"--cb-failure-threshold",       "1",
            "--cb-timeout-duration-secs",   "3600",
            "--health-check-interval-secs", std::to_string(kIntervalSecs)};
  }
  static constexpr int kIntervalSecs = 2;
};

TEST_F(CircuitRestartTest, RestartedWorkerTakesRequestsWithinAHealthCheck) {
  prefill_->Kill();
  ++tally_.faults;
  // The first leg on the dead worker fails and opens its circuit (threshold 1).
  SendAll("prefill down", false);
  ASSERT_EQ(PrefillCircuit(), "open") << "the failed legs did not open the circuit";
  std::string why;
  ASSERT_TRUE(prefill_->Launch(&why)) << why;
  const auto restarted = std::chrono::steady_clock::now();
  // Recovery probes a second apart (two to turn healthy), or the next round: a few seconds. The
  // bound leaves slack for a loaded host and is far below the hour-long open timeout.
  const bool back = WaitUntil(
      [&] {
        const std::string circuit = PrefillCircuit();
        return circuit == "half_open" || circuit == "closed";
      },
      seconds(kIntervalSecs + 15));
  ASSERT_TRUE(back) << "still " << PrefillCircuit() << " after the restart";
  std::printf("[circuit-restart] half_open %lld ms after the restart\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(
                                         std::chrono::steady_clock::now() - restarted)
                                         .count()));
  ExpectHealth(router_->port, {{prefill_->url(), true}, {decode_->url(), true}});
  SendAll("prefill restarted", true);
  EXPECT_EQ(PrefillCircuit(), "closed");  // 4 successes >= --cb-success-threshold (3)
  ExpectPairRecovered("circuit_closed_after_restart");
}

// 7. A decode worker stops (SIGSTOP) with streams on it: with --stall-timeout-secs 2 every
// stream ends with an error event about 2 s after its last token, not at the request timeout;
// non-streamed requests on it get a clear error (the stalled streams reported the worker, so its
// waiting legs fail and their retries find no decode worker). Once it runs again (SIGCONT) it
// frees every block of the aborted rooms and serves new requests.
TEST_F(ProcessFaultsTest, StalledDecodeWorkerEndsItsStreams) {
  constexpr int kStallSecs = 2;
  auto prefill = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router = PdRouter({prefill.get()}, {decode.get()},
                         {"--stall-timeout-secs", std::to_string(kStallSecs)});
  ASSERT_FALSE(HasFailure()) << "the cluster did not start";
  // However the test ends, the worker runs again (a stopped process would outlive the test).
  struct Resume {
    WorkerProcess* w;
    ~Resume() {
      if (w->process) w->process->Signal(SIGCONT);
    }
  } resume{decode.get()};

  constexpr int kStreams = 4;
  constexpr int kPlain = 2;
  std::vector<json> bodies;
  for (int i = 0; i < kStreams + kPlain; ++i) bodies.push_back(GreedyBody(i, 440, i < kStreams));
  std::vector<CallResult> results(bodies.size());
  std::vector<std::chrono::steady_clock::time_point> ended(bodies.size());
  std::atomic<int> streaming{0};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i) {
    clients.emplace_back([&, i] {
      results[i] = Generate(router->port, bodies[i], [&] { ++streaming; });
      ended[i] = std::chrono::steady_clock::now();
    });
  }
  EXPECT_TRUE(WaitUntil([&] { return streaming.load() == kStreams; }, seconds(30)));
  decode->process->Signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  for (auto& t : clients) t.join();
  Tally tally;
  ++tally.faults;
  long long slowest_stream_ms = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    const long long after_stop_ms =
        std::chrono::duration_cast<milliseconds>(ended[i] - stopped).count();
    const std::string problem = tally.Add(results[i], nullptr);
    EXPECT_TRUE(problem.empty()) << "request " << i << ": " << problem;
    if (static_cast<int>(i) < kStreams) {
      slowest_stream_ms = std::max(slowest_stream_ms, after_stop_ms);
      EXPECT_EQ(results[i].status, 200) << results[i].body;
      EXPECT_NE(results[i].error.find("stall"), std::string::npos) << results[i].body;
      // The lease, plus slack for a loaded host; the request timeout is 20 s.
      EXPECT_LT(after_stop_ms, (kStallSecs + 4) * 1000) << "stream " << i;
    } else {
      std::printf("[stall] non-streamed request %zu: status %d %lld ms after the SIGSTOP: %s\n", i,
                  results[i].status, after_stop_ms, results[i].error.c_str());
    }
    if (static_cast<int>(i) >= kStreams && results[i].status != 200) {
      // A 200 here finished before the stop.
      EXPECT_GE(results[i].status, 500) << results[i].body;
      EXPECT_LT(after_stop_ms, (kStallSecs + 8) * 1000) << "request " << i;
    }
  }
  std::printf("[stall] streams ended within %lld ms of the SIGSTOP\n", slowest_stream_ms);
  decode->process->Signal(SIGCONT);
  ExpectHealth(router->port, {{prefill->url(), true}, {decode->url(), true}});
  for (WorkerProcess* w : {prefill.get(), decode.get()}) {
    std::string why;
    EXPECT_TRUE(WaitForAllKvBlocksFree(router->port, kTestAdminKey, w->http_port, &why))
        << w->role << ": " << why;
  }
  const std::vector<json> after = {GreedyBody(0, 8, true), GreedyBody(1, 8, false)};
  for (const json& body : after) {
    CallResult r = Generate(router->port, body);
    const std::string problem = tally.Add(r, nullptr);
    EXPECT_TRUE(problem.empty()) << "after SIGCONT: " << problem;
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(r.error.empty()) << r.body;
  }
  tally.retries = static_cast<int>(Metric(router->port, "tandem_router_retries_total"));
  tally.Print("decode_stalled_mid_stream");
}

}  // namespace
}  // namespace tandem::itest::faults
