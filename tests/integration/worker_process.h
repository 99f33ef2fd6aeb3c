// Test support: a real tandem-prefill / tandem-decode process on loopback, started on the shipped
// model with flags that start fast on a 2-core machine, and a gRPC stub to it. Integration tests
// only (the cluster, handoff and router tests share it).
#ifndef TANDEM_TESTS_INTEGRATION_WORKER_PROCESS_H_
#define TANDEM_TESTS_INTEGRATION_WORKER_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "proto/worker.grpc.pb.h"
#include "tests/integration/process.h"

namespace tandem::itest {

// The cluster secret test workers share unless a test passes its own --cluster-secret.
inline constexpr char kTestClusterSecret[] = "tandem-test-cluster-secret-0123456789";

struct WorkerProcess {
  std::string role;  // "prefill", "decode" (disaggregated) or "colocated" (--local-prefill)
  int grpc_port = 0;
  int http_port = 0;
  int bootstrap_port = 0;         // prefill workers
  std::vector<std::string> argv;  // as started, for Restart()
  std::unique_ptr<Process> process;
  std::unique_ptr<proto::Worker::Stub> stub;  // proves the worker's --cluster-secret, if any
  std::string instance_id;  // from the worker's proof (empty without a secret); tokens name it

  std::string grpc_address() const { return "127.0.0.1:" + std::to_string(grpc_port); }
  std::string url() const { return "http://" + grpc_address(); }  // as the router takes it
  // SIGKILL and reap.
  void Kill();
  // The same command line again (same ports); waits for /health. False (with the process's
  // output in `why`) if it does not come up.
  bool Launch(std::string* why = nullptr);
  // Kill(), then Launch().
  bool Restart(std::string* why = nullptr);
};

// Starts `role` on free loopback ports and waits (up to 60 s) for /health 200; a test failure is
// recorded if it does not come up. Defaults: 16 MiB of KV, 64-token prefill chunks, 1 thread,
// --bootstrap-timeout 3, --transfer-timeout 6, the test cluster secret. A "--flag value" pair in
// `extra` replaces the default value of a flag already given; anything else is appended.
// `launcher`, when given, is a command line the worker's own is appended to (e.g. /usr/bin/env
// with variables to set); it is started through it, and again on Restart().
std::unique_ptr<WorkerProcess> StartWorker(const std::string& role,
                                           const std::vector<std::string>& extra = {},
                                           const std::vector<std::string>& launcher = {});

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_INTEGRATION_WORKER_PROCESS_H_
