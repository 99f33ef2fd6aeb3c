// Test support for tandem-router's end-to-end tests (tests/router/router_*_itest.cc): a gtest
// fixture whose test suite shares one set of real workers on loopback (two colocated workers,
// tandem-decode --local-prefill, and a tandem-prefill + tandem-decode pair) and starts routers
// over them, plus the requests and checks several suites make.
//
// The workers live for one test suite: a suite's SetUpTestSuite calls StartCluster, the
// fixture's TearDownTestSuite kills them, so a suite may kill or restart a worker without
// touching other suites. The fixture owns what StartCluster starts; a router a test starts with
// Plain(), Pd() or StartClusterRouter() belongs to the test. Every wait is bounded. Integration
// tests only; call from the test's own thread.
#ifndef TANDEM_TESTS_ROUTER_CLUSTER_FIXTURE_H_
#define TANDEM_TESTS_ROUTER_CLUSTER_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/worker.pb.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {

// A prompt every suite may send (a few tokens, one KV block).
inline constexpr char kPrompt[] = "Tell me a fortune about the sea.";

// StartRouter (router_process.h) with the test cluster secret: the router trusts only workers
// that prove it, as every worker StartWorker starts does.
std::unique_ptr<RouterProcess> StartClusterRouter(std::vector<std::string> extra = {});

class ClusterTest : public ::testing::Test {
 public:
  struct Options {
    bool second_colocated = false;  // colocated2_ too
    bool shared_routers = false;    // plain_ (Plain()) and pd_ (Pd()) for the whole suite
  };

 protected:
  // Starts colocated_, prefill_ and decode_, and what `options` adds; for SetUpTestSuite. A
  // process that does not come up is a test failure (StartWorker, StartRouter) and stays null.
  static void StartCluster(const Options& options);
  // Kills the routers, then the workers, StartCluster started.
  static void TearDownTestSuite();

  // A router over colocated_ alone; `extra` flags follow (StartRouter's rules).
  static std::unique_ptr<RouterProcess> Plain(std::vector<std::string> extra = {});
  // A PD router over prefill_ and decode_; `extra` flags follow.
  static std::unique_ptr<RouterProcess> Pd(std::vector<std::string> extra = {});

  // With shared_routers: flushes every prefix cache through plain_ and pd_ until each worker
  // behind them shows every KV block free (WaitForAllKvBlocksFree, up to 60 s a worker). False
  // when one never did, with the figures in `why`.
  static bool SharedWorkersBlocksFree(std::string* why);

  inline static std::unique_ptr<WorkerProcess> colocated_, colocated2_, prefill_, decode_;
  inline static std::unique_ptr<RouterProcess> plain_, pd_;
};

// A /generate body: kPrompt, greedy, exactly `max_new` tokens (ignore_eos).
nlohmann::json GenerateBody(int max_new, bool stream);

// The request header that presents `key` ("Authorization: Bearer <key>\r\n").
std::string Auth(const std::string& key);

// `w`'s load report over gRPC (proving the cluster secret); a test failure when it does not
// answer within 10 s.
proto::LoadReport Load(const WorkerProcess& w);

// Flushes `w`'s prefix cache over gRPC until every KV block is free; false after 30 s.
bool AllBlocksFree(const WorkerProcess& w);

// Legs `w` has ended, by any outcome (its /metrics tandem_worker_requests_total).
double LegsEnded(const WorkerProcess& w);

// A prompt of several KV blocks no cache has seen (`tag` makes it unique per use).
std::string LongPrompt(const std::string& tag);

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_ROUTER_CLUSTER_FIXTURE_H_
