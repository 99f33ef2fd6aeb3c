#include "tests/integration/worker_process.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "router/workers/cluster_credentials.h"

namespace tandem::itest {
namespace {

// Healthy: /health answers 200 and the gRPC port accepts a connection (the worker opens gRPC
// before HTTP, so this holds unless the /health answer came from another process).
bool WaitHealthy(WorkerProcess* w) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!WaitForHttp(w->http_port, "/health", 200, std::chrono::seconds(1))) {
    // Exited (e.g. a port was taken), or out of time.
    if (w->process->Wait(std::chrono::milliseconds(0)).has_value()) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
  // Authenticated with the secret the worker was started with (none: a plain channel).
  std::string secret;
  auto flag = std::find(w->argv.begin(), w->argv.end(), "--cluster-secret");
  if (flag != w->argv.end() && flag + 1 != w->argv.end()) secret = *(flag + 1);
  auto audience = std::make_shared<router::ClusterAudience>();
  auto channel = router::CreateWorkerChannel(w->grpc_address(), secret, audience);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    return false;
  }
  w->instance_id.clear();
  if (!secret.empty()) {
    // Tokens name the worker's instance id, which its proof reports (new at every start).
    // A few attempts: right after a restart on the same port the first connection may still
    // break ("Socket closed").
    absl::StatusOr<std::string> id;
    for (int attempt = 0; attempt < 20; ++attempt) {
      id =
          router::ProveWorker(*channel, w->grpc_address(), secret, absl::Now() + absl::Seconds(10));
      if (id.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!id.ok()) {
      ADD_FAILURE() << w->role << " on " << w->grpc_address() << ": " << id.status();
      return false;
    }
    w->instance_id = *id;
    audience->Set(*id);
  }
  w->stub = proto::Worker::NewStub(channel);
  return true;
}

// The worker exited at startup because a port FreePort() chose was taken in between: FreePort
// keeps its ports out of the ephemeral range and away from other test processes, so only a
// program outside the tests binding one at that moment can do this.
bool LostPortRace(WorkerProcess* w) {
  if (!w->process->Wait(std::chrono::milliseconds(0)).has_value()) return false;
  const std::string out = w->process->Output();
  return out.find("in use") != std::string::npos;
}

// One launch on fresh ports; stub is null unless the worker came up.
std::unique_ptr<WorkerProcess> StartWorkerOnce(const std::string& role,
                                               const std::vector<std::string>& extra,
                                               const std::vector<std::string>& launcher) {
  auto w = std::make_unique<WorkerProcess>();
  w->role = role;
  w->grpc_port = FreePort();
  w->http_port = FreePort();
  std::vector<std::string>& argv = w->argv;
  argv = {BinaryPath(role == "prefill" ? "tandem-prefill" : "tandem-decode"),
          "--model-path",
          SourcePath("models/tandem-tiny-english"),
          "--port",
          std::to_string(w->grpc_port),
          "--http-port",
          std::to_string(w->http_port),
          "--kv-cache-memory",
          "16MiB",
          "--chunked-prefill-size",
          "64",
          "--threads",
          "1",
          "--bootstrap-timeout",
          "3",
          "--transfer-timeout",
          "6"};
  if (role == "prefill") {
    w->bootstrap_port = FreePort();
    argv.insert(argv.end(), {"--disaggregation-bootstrap-port", std::to_string(w->bootstrap_port)});
  }
  if (role == "colocated") argv.push_back("--local-prefill");
  const bool own_secret = std::find(extra.begin(), extra.end(), "--cluster-secret") != extra.end();
  if (role != "colocated" && !own_secret) {
    argv.insert(argv.end(), {"--cluster-secret", kTestClusterSecret});
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    auto given = std::find(argv.begin(), argv.end(), extra[i]);
    if (given != argv.end() && given + 1 != argv.end() && i + 1 < extra.size() &&
        extra[i + 1].rfind("--", 0) != 0) {
      *(given + 1) = extra[++i];
    } else {
      argv.push_back(extra[i]);
    }
  }
  argv.insert(argv.begin(), launcher.begin(), launcher.end());
  w->process = std::make_unique<Process>(argv);
  WaitHealthy(w.get());
  return w;
}

}  // namespace

std::unique_ptr<WorkerProcess> StartWorker(const std::string& role,
                                           const std::vector<std::string>& extra,
                                           const std::vector<std::string>& launcher) {
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    auto w = StartWorkerOnce(role, extra, launcher);
    if (w->stub != nullptr || attempt == kAttempts || !LostPortRace(w.get())) {
      EXPECT_NE(w->stub, nullptr) << role << " did not come up:\n" << w->process->Output();
      return w;
    }
  }
}

void WorkerProcess::Kill() {
  process->Signal(SIGKILL);
  process->Wait(std::chrono::seconds(10));
}

bool WorkerProcess::Launch(std::string* why) {
  process = std::make_unique<Process>(argv);
  if (WaitHealthy(this)) return true;
  if (why != nullptr) *why = process->Output();
  return false;
}

bool WorkerProcess::Restart(std::string* why) {
  Kill();
  return Launch(why);
}

}  // namespace tandem::itest
