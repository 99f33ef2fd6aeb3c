// The official OpenAI Node SDK (tests/clients/openai_sdk, pinned by its package-lock.json) runs
// its calls (models, completions and chat with n, logprobs, echo, streams with usage, tool calls
// with tool_choice required or named (parameters with $ref, integer bounds and string lengths)
// and response_format json_schema, validated, the stream helper and parse(), completions with
// response_format, typed errors; the Responses API: create, retrieve, input items, delete, the
// stream helper, previous_response_id, function tools, text.format) against tandem-router in PD
// mode
// (tandem-prefill + tandem-decode) and in plain mode (a tandem-decode --local-prefill worker),
// behind an API key. check.mjs asserts what the SDK parsed; this test fails with its output when
// any check failed.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

const char kApiKey[] = "sdk-client-key-5";

struct SdkRun {
  int exit_code = -1;
  std::string output;
};

// Runs check.mjs against `port`'s /v1 with the API key.
SdkRun RunSdkChecks(int port) {
  const std::string dir = SourcePath("tests/clients/openai_sdk");
  const std::string command = "cd '" + dir +
                              "' && node check.mjs http://127.0.0.1:" + std::to_string(port) +
                              "/v1 " + kApiKey + " 2>&1";
  SdkRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, got);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class OpenAiSdkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v node >/dev/null 2>&1") != 0) {
      GTEST_FAIL() << "node is not installed: scripts/install-deps.sh installs it";
    }
    std::FILE* probe = std::fopen(
        SourcePath("tests/clients/openai_sdk/node_modules/openai/package.json").c_str(), "r");
    if (probe == nullptr) {
      GTEST_FAIL() << "the OpenAI SDK is not installed: scripts/install-deps.sh runs npm ci in "
                      "tests/clients/openai_sdk";
    }
    std::fclose(probe);
  }
};

TEST_F(OpenAiSdkTest, EveryCallWorksInPdMode) {
  auto prefill = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router = StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation",
                             "--prefill", prefill->url(), std::to_string(prefill->bootstrap_port),
                             "--decode", decode->url(), "--api-key", kApiKey});
  const SdkRun run = RunSdkChecks(router->port);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("FAIL"), std::string::npos) << run.output;
}

TEST_F(OpenAiSdkTest, EveryCallWorksInPlainMode) {
  auto colocated = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret});
  auto router = StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls",
                             colocated->url(), "--api-key", kApiKey});
  const SdkRun run = RunSdkChecks(router->port);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("FAIL"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem::itest
