// tandem-bench in the seed-004 shape (../shared/seeds/004: 200 random prompts, 64 in / 16 out,
// --random-range-ratio 0, seed 1, unbounded rate, one warm-up) through a real PD cluster
// (tandem-router --pd-disaggregation, tandem-prefill, tandem-decode on the shipped model): it
// draws bench_serving's dataset (the report's 5661 / 1653 tokens) and every request succeeds.
// Then zero-token requests (--random-output-len 0) on every backend, after which no KV block
// is held on either worker.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

// The value column of a table row, e.g. Row(out, "Successful requests:") == "200".
std::string Row(const std::string& table, const std::string& name) {
  const size_t at = table.find("\n" + name);
  if (at == std::string::npos) return "";
  const size_t start = at + 1 + 41;
  std::string value = table.substr(start, table.find('\n', start) - start);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

class TandemBenchSeed004Itest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
    router_ = StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation",
                           "--prefill", prefill_->url(), std::to_string(prefill_->bootstrap_port),
                           "--decode", decode_->url()})
                  .release();
  }
  static void TearDownTestSuite() {
    delete router_;
    delete prefill_;
    delete decode_;
  }

  static std::vector<std::string> Bench(const std::string& backend) {
    return {BinaryPath("tandem-bench"),
            "--backend",
            backend,
            "--host",
            "127.0.0.1",
            "--port",
            std::to_string(router_->port),
            "--model",
            SourcePath("models/tandem-tiny-english"),
            "--dataset-name",
            "random"};
  }

  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
  static RouterProcess* router_;
};
WorkerProcess* TandemBenchSeed004Itest::prefill_ = nullptr;
WorkerProcess* TandemBenchSeed004Itest::decode_ = nullptr;
RouterProcess* TandemBenchSeed004Itest::router_ = nullptr;

TEST_F(TandemBenchSeed004Itest, EveryRequestOfTheSeed004ShapeSucceeds) {
  const std::string key_file = ::testing::TempDir() + "/seed004_admin_key";
  std::ofstream(key_file) << kTestAdminKey << "\n";
  std::vector<std::string> argv = Bench("sglang");
  for (const char* arg : {"--num-prompts", "200", "--random-input-len", "64", "--random-output-len",
                          "16", "--random-range-ratio", "0", "--seed", "1", "--flush-cache"}) {
    argv.push_back(arg);
  }
  argv.push_back("--admin-key-file");
  argv.push_back(key_file);
  const RunResult run = RunToExit(argv, seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("#Input tokens: 5661\n#Output tokens: 1653\n"), std::string::npos)
      << run.out;
  EXPECT_EQ(Row(run.out, "Successful requests:"), "200") << run.out;
  EXPECT_EQ(Row(run.out, "Total input tokens:"), "5661") << run.out;
  EXPECT_EQ(Row(run.out, "Total generated tokens:"), "1653") << run.out;  // ignore_eos
  EXPECT_EQ(run.out.find("requests failed"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("--flush-cache:"), std::string::npos) << run.out;  // the flush worked
}

TEST_F(TandemBenchSeed004Itest, ZeroTokenRequestsSucceedAndHoldNoKv) {
  for (const char* backend : {"sglang", "sglang-oai", "sglang-oai-chat"}) {
    std::vector<std::string> argv = Bench(backend);
    for (const char* arg : {"--num-prompts", "20", "--random-input-len", "64",
                            "--random-output-len", "0", "--seed", "4"}) {
      argv.push_back(arg);
    }
    const RunResult run = RunToExit(argv, seconds(120));
    ASSERT_EQ(run.exit_code, 0) << backend << "\n" << run.out;
    EXPECT_EQ(Row(run.out, "Successful requests:"), "20") << backend << "\n" << run.out;
    EXPECT_EQ(Row(run.out, "Total generated tokens:"), "0") << backend << "\n" << run.out;
    EXPECT_EQ(run.out.find("requests failed"), std::string::npos) << run.out;
  }
  std::string why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(router_->port, kTestAdminKey, prefill_->http_port, &why))
      << why;
  EXPECT_TRUE(WaitForAllKvBlocksFree(router_->port, kTestAdminKey, decode_->http_port, &why))
      << why;
}

}  // namespace
}  // namespace tandem::itest
