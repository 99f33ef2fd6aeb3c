// deploy/local-cluster.sh and tandemctl against a real cluster: 1 prefill + 1 decode worker and
// tandem-router on loopback, in a temporary run directory on free ports. Covers every command,
// the error paths (wrong admin key, unknown worker, no healthy decode worker, unreachable router,
// usage errors) and that `stop` leaves no process behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

namespace fs = std::filesystem;
constexpr char kAdminKey[] = "local-cluster-admin";

// Gone: no such process, or a zombie waiting for a parent that is not us.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

class LocalClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-local-cluster-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    run_dir_ = tmpl;
    // Router + 2 workers: P, then 3 ports per worker.
    base_port_ = FreePortRange(3 * 2 + 3);
    ASSERT_NE(base_port_, 0) << "no free port range on 127.0.0.1";
    router_ = "http://127.0.0.1:" + std::to_string(base_port_);
  }

  void TearDown() override {
    if (started_) Cluster({"stop"});
    std::error_code ec;
    fs::remove_all(run_dir_, ec);
  }

  RunResult Cluster(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env",
                                     "TANDEM_BIN=" + std::string(TANDEM_BINARY_DIR) + "/bin",
                                     std::string("TANDEM_ADMIN_KEY=") + kAdminKey,
                                     "TANDEM_KV_CACHE_MEMORY=16MiB",
                                     "bash",
                                     SourcePath("deploy/local-cluster.sh")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--run-dir", run_dir_});
    return RunToExit(argv, std::chrono::seconds(240));
  }

  RunResult Ctl(const std::vector<std::string>& args, bool with_key = true) {
    std::vector<std::string> argv = {BinaryPath("tandemctl"), "--router", router_};
    if (with_key) argv.insert(argv.end(), {"--admin-key", kAdminKey});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunToExit(argv, std::chrono::seconds(60));
  }

  std::vector<pid_t> RecordedPids() {
    std::vector<pid_t> pids;
    for (const auto& entry : fs::directory_iterator(run_dir_)) {
      if (entry.path().extension() != ".pid") continue;
      std::ifstream in(entry.path());
      pid_t pid = 0;
      if (in >> pid && pid > 0) pids.push_back(pid);
    }
    return pids;
  }

  bool WaitHealthy() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Ctl({"health"}).exit_code == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return false;
  }

  std::string run_dir_;
  int base_port_ = 0;
  std::string router_;
  bool started_ = false;
};

TEST_F(LocalClusterTest, TandemctlDrivesALocalCluster) {
  RunResult r = Cluster({"start", "--prefill", "1", "--decode", "1", "--base-port",
                         std::to_string(base_port_), "--wait-secs", "120"});
  started_ = true;
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string prefill = "http://127.0.0.1:" + std::to_string(base_port_ + 3);
  const std::string decode = "http://127.0.0.1:" + std::to_string(base_port_ + 6);

  // The secret is private to the operator.
  EXPECT_EQ(fs::status(run_dir_ + "/cluster-secret").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // So is the admin key, which tandemctl finds in the run directory or the environment: the
  // admin API is closed without one.
  EXPECT_EQ(fs::status(run_dir_ + "/admin-key").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  r = Ctl({"--run-dir", run_dir_, "workers", "list"}, /*with_key=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunToExit({"/usr/bin/env", "TANDEM_RUN_DIR=" + run_dir_, BinaryPath("tandemctl"), "--router",
                 router_, "workers", "list"},
                std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunToExit({"/usr/bin/env", std::string("TANDEM_ADMIN_KEY=") + kAdminKey,
                 BinaryPath("tandemctl"), "--router", router_, "workers", "list"},
                std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // A second start is refused while the first cluster runs.
  r = Cluster({"start", "--base-port", std::to_string(base_port_)});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("already running"), std::string::npos) << r.out;

  r = Cluster({"status"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("router"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alive"), std::string::npos) << r.out;

  ASSERT_TRUE(WaitHealthy());
  r = Ctl({"health"});
  EXPECT_NE(r.out.find("ok (2/2 workers healthy)"), std::string::npos) << r.out;

  r = Ctl({"workers", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  ASSERT_EQ(j["workers"].size(), 2u) << r.out;
  std::map<std::string, std::string> types;
  for (const auto& w : j["workers"]) {
    types[w["url"]] = w["worker_type"];
    // A healthy worker does not show the refusals of its start-up (the router starts before the
    // workers listen). (A probe that timed out on a loaded machine may show until the next one.)
    if (w.value("healthy", false)) {
      const std::string error = w.value("last_error", "");
      EXPECT_EQ(error.find("Connection refused"), std::string::npos) << r.out;
      EXPECT_EQ(error.find("unverified"), std::string::npos) << r.out;
    }
  }
  EXPECT_EQ(types[prefill], "prefill") << r.out;
  EXPECT_EQ(types[decode], "decode") << r.out;

  // The router learns each worker's session socket at a health check (bounded wait).
  std::map<std::string, int> session_ports;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
    j = nlohmann::json::parse(Ctl({"workers", "list", "--json"}).out, nullptr, false);
    session_ports.clear();
    for (const auto& w : j["workers"]) {
      if (w.value("session_port", 0) > 0) session_ports[w["url"]] = w["session_port"];
    }
    if (session_ports.size() == 2) break;
  }
  ASSERT_EQ(session_ports.size(), 2u) << j.dump();

  r = Ctl({"workers", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("URL", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("SESSION"), std::string::npos) << r.out;
  for (const auto& [url, port] : session_ports) {
    const size_t row = r.out.find(url);
    ASSERT_NE(row, std::string::npos) << r.out;
    const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
    EXPECT_NE(line.find(" " + std::to_string(port) + " "), std::string::npos) << line;
  }

  r = Ctl({"generate", "Once upon a time", "--max-new-tokens", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GT(r.out.size(), 1u);
  // Sampled at the default temperature the model may end early on EOS; greedy with
  // --ignore-eos runs to the limit and repeats itself.
  r = Ctl({"generate", "Once upon a time", "--max-new-tokens", "8", "--temperature", "0",
           "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["meta_info"]["completion_tokens"], 8) << r.out;
  EXPECT_EQ(j["meta_info"]["finish_reason"]["type"], "length") << r.out;
  const nlohmann::json greedy_ids = j["output_ids"];
  r = Ctl({"generate", "Once upon a time", "--max-new-tokens", "8", "--temperature", "0",
           "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["output_ids"], greedy_ids) << r.out;
  EXPECT_EQ(Ctl({"generate", "Hello", "--temperature", "-1"}).exit_code, 2);
  r = Ctl({"generate", "Hello", "--max-new-tokens", "8", "--stream"});
  EXPECT_EQ(r.exit_code, 0) << r.out;

  r = Ctl({"loads"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(decode), std::string::npos) << r.out;

  r = Ctl({"flush-cache"});
  EXPECT_EQ(r.exit_code, 0) << r.out;

  r = Ctl({"metrics"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("/generate"), std::string::npos) << r.out;
  r = Ctl({"metrics", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  int generate_ok = 0;
  for (const auto& route : j["requests"]["by_route"]) {
    if (route["route"] == "/generate") generate_ok = route["2xx"].get<int>();
  }
  EXPECT_EQ(generate_ok, 4) << r.out;
  EXPECT_EQ(j["latency_seconds"]["ttft"]["count"], 4) << r.out;
  EXPECT_FALSE(j["latency_seconds"]["ttft"]["p50"].is_null()) << r.out;
  EXPECT_EQ(j["workers"].size(), 2u) << r.out;

  // Error answers from the router: exit 1 with its message.
  r = Ctl({"workers", "list"}, /*with_key=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("missing admin key"), std::string::npos) << r.out;
  r = Ctl({"--admin-key", "wrong", "workers", "list"}, /*with_key=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("incorrect admin key"), std::string::npos) << r.out;
  r = Ctl({"workers", "remove", "http://127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("not registered"), std::string::npos) << r.out;

  // Remove the decode worker: nothing can be routed; add it back: routing resumes.
  r = Ctl({"workers", "remove", decode});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Ctl({"health"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  r = Ctl({"generate", "Hello", "--max-new-tokens", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  r = Ctl({"workers", "add", decode, "--type", "decode"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Ctl({"workers", "add", decode, "--type", "decode"});
  EXPECT_EQ(r.exit_code, 1) << r.out;  // already registered
  ASSERT_TRUE(WaitHealthy());
  r = Ctl({"generate", "Hello", "--max-new-tokens", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Ctl({"workers", "drain", decode});
  EXPECT_EQ(r.exit_code, 0) << r.out;

  // Usage errors: 2.
  EXPECT_EQ(Ctl({"workers"}).exit_code, 2);
  EXPECT_EQ(Ctl({"workers", "add", decode, "--type", "prefill"}).exit_code, 2);
  EXPECT_EQ(Ctl({"generate"}).exit_code, 2);

  const std::vector<pid_t> pids = RecordedPids();
  ASSERT_EQ(pids.size(), 3u);
  r = Cluster({"stop"});
  started_ = false;
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << "pid " << pid << " survived stop";
  r = Cluster({"status"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("no cluster"), std::string::npos) << r.out;

  // The router is gone: exit 3 naming the URL.
  r = Ctl({"health"});
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find(router_), std::string::npos) << r.out;
}

TEST(LocalClusterScriptTest, RejectsBadArguments) {
  const std::string script = SourcePath("deploy/local-cluster.sh");
  RunResult r = RunToExit({"/bin/bash", script, "restart"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = RunToExit({"/bin/bash", script, "start", "--prefill", "two"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("non-negative integer"), std::string::npos) << r.out;
  r = RunToExit({"/bin/bash", script, "start", "--prefill", "0", "--run-dir", "/tmp/unused"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = RunToExit({"/usr/bin/env", "TANDEM_BIN=/nonexistent", "bash", script, "start", "--run-dir",
                 "/tmp/unused"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/tandem-router is missing"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tandem::itest
