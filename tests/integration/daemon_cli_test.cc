// The daemons as an operator meets them: --help, bad flags and bad config files are refused with
// a clear message and exit code 2, good options start a process that serves /metrics and /health
// and exits 0 on SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

using std::chrono::seconds;

const char* const kDaemons[] = {"tandem-prefill", "tandem-decode", "tandem-router"};

// A minimal model directory: these daemons read config.json at start-up.
std::string ModelDir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/tandem-model-XXXXXX";
    std::string d = mkdtemp(tmpl);
    std::ofstream(d + "/config.json") << R"({"model_type": "llama", "architectures":
      ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
      "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
      "tie_word_embeddings": true})";
    return d;
  }();
  return dir;
}

std::string ShippedModel() { return SourcePath("models/tandem-tiny-english"); }

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = "/tmp/tandem-cli-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

const std::string kSecret = "0123456789abcdef0123";

std::vector<std::string> ValidArgs(const std::string& daemon, int http_port) {
  if (daemon == "tandem-router") {
    // The router loads the model directory's tokenizer; its one worker is unreachable.
    return {BinaryPath(daemon), "--port",        std::to_string(http_port), "--model-path",
            ShippedModel(),     "--worker-urls", "http://127.0.0.1:1"};
  }
  if (daemon == "tandem-decode") {
    // tandem-decode runs the serving engine: it loads a real model.
    return {BinaryPath(daemon),
            "--model-path",
            ShippedModel(),
            "--local-prefill",
            "--port",
            "0",
            "--http-port",
            std::to_string(http_port),
            "--kv-cache-memory",
            "8MiB"};
  }
  // tandem-prefill runs the serving engine too, and a bootstrap server (ephemeral here).
  return {BinaryPath(daemon),
          "--model-path",
          ShippedModel(),
          "--port",
          "0",
          "--http-port",
          std::to_string(http_port),
          "--disaggregation-bootstrap-port",
          "0",
          "--kv-cache-memory",
          "8MiB",
          "--cluster-secret",
          kSecret};
}

class DaemonCliTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DaemonCliTest, HelpExitsZeroAndListsFlags) {
  RunResult r = RunToExit({BinaryPath(GetParam()), "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--config"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--log-level"), std::string::npos) << r.out;
  const std::string must = std::string(GetParam()) == "tandem-router"
                               ? "--pd-disaggregation"
                               : "--disaggregation-transfer-backend";
  EXPECT_NE(r.out.find(must), std::string::npos) << r.out;
}

TEST_P(DaemonCliTest, UnknownFlagExitsTwoNamingIt) {
  RunResult r = RunToExit({BinaryPath(GetParam()), "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--no-such-flag"), std::string::npos) << r.out;
}

TEST_P(DaemonCliTest, BadValueExitsTwo) {
  RunResult r = RunToExit({BinaryPath(GetParam()), "--port", "seventy"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("seventy"), std::string::npos) << r.out;
}

TEST_P(DaemonCliTest, ConfigWithUnknownKeyExitsTwoNamingFileAndLine) {
  std::string cfg =
      WriteFile(std::string(GetParam()) + "-unknown.yaml", "port: 7000\nmodle-path: x\n");
  RunResult r = RunToExit({BinaryPath(GetParam()), "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(":2: unknown key 'modle-path'"), std::string::npos) << r.out;
  unlink(cfg.c_str());
}

TEST_P(DaemonCliTest, ConfigWithWrongTypeExitsTwo) {
  std::string cfg = WriteFile(std::string(GetParam()) + "-type.yaml", "port: abc\n");
  RunResult r = RunToExit({BinaryPath(GetParam()), "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(":1: key 'port' expects an integer"), std::string::npos) << r.out;
  unlink(cfg.c_str());
}

TEST_P(DaemonCliTest, MissingConfigFileExitsTwo) {
  RunResult r = RunToExit({BinaryPath(GetParam()), "--config", "/nonexistent/tandem.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/tandem.yaml"), std::string::npos) << r.out;
}

TEST_P(DaemonCliTest, StartsServesMetricsAndHealthAndStopsOnSigterm) {
  const int port = FreePort();
  Process p(ValidArgs(GetParam(), port));
  ASSERT_TRUE(WaitForHttp(port, "/metrics", 200, seconds(20))) << p.Output();
  HttpReply health = HttpGet(port, "/health");
  if (std::string(GetParam()) != "tandem-router") {
    // The workers serve: /health is 200 once the model answers a one-token probe.
    EXPECT_EQ(health.status, 200) << health.body;
  } else {
    // Its only worker is unreachable: /health must say so rather than report healthy.
    EXPECT_EQ(health.status, 503) << health.body;
    EXPECT_NE(health.body.find("no healthy worker"), std::string::npos) << health.body;
  }
  EXPECT_EQ(HttpGet(port, "/no/such/path").status, 404);
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0) << p.Output();
}

TEST_P(DaemonCliTest, PortInUseIsAClearStartupFailure) {
  const int port = FreePort();
  Process first(ValidArgs(GetParam(), port));
  ASSERT_TRUE(WaitForHttp(port, "/metrics", 200, seconds(20))) << first.Output();
  RunResult second = RunToExit(ValidArgs(GetParam(), port), seconds(20));
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_NE(second.out.find(std::to_string(port)), std::string::npos) << second.out;
}

INSTANTIATE_TEST_SUITE_P(Daemons, DaemonCliTest, ::testing::ValuesIn(kDaemons),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(WorkerCliTest, ConfigFileIsReadAndFlagsWin) {
  const int port = FreePort();
  std::string cfg = WriteFile("worker.yaml", "model-path: " + ShippedModel() +
                                                 "\nhttp_port: 1\ncluster-secret: " + kSecret +
                                                 "\nport: 0\nkv-cache-memory: 8MiB\n");
  // The file says http port 1 (privileged, would fail); the flag must win.
  Process p({BinaryPath("tandem-decode"), "--config", cfg, "--http-port", std::to_string(port)});
  EXPECT_TRUE(WaitForHttp(port, "/metrics", 200, seconds(20))) << p.Output();
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0) << p.Output();
  unlink(cfg.c_str());
}

TEST(WorkerCliTest, SglangCpuLaunchLineStartsAWorker) {
  // An operator's SGLang launch line for a CPU host, as pasted, plus our colocated switch.
  const int port = FreePort();
  Process p({BinaryPath("tandem-decode"),
             "--model-path",
             ShippedModel(),
             "--disaggregation-mode",
             "decode",
             "--device",
             "cpu",
             "--tp",
             "1",
             "--trust-remote-code",
             "--mem-fraction-static",
             "0.5",
             "--max-total-tokens",
             "4096",
             "--dtype",
             "bfloat16",
             "--attention-backend",
             "triton",
             "--cuda-graph-max-bs",
             "16",
             "--host",
             "127.0.0.1",
             "--port",
             "0",
             "--http-port",
             std::to_string(port),
             "--local-prefill"});
  ASSERT_TRUE(WaitForHttp(port, "/health", 200, seconds(30))) << p.Output();
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0) << p.Output();
  const std::string log = p.Output();
  EXPECT_NE(log.find("--trust-remote-code: ignored: Tandem runs no code"), std::string::npos)
      << log;
  EXPECT_NE(log.find("--attention-backend triton: ignored"), std::string::npos) << log;
  // --max-total-tokens 4096 caps the cache the memory fraction would give: 256 pages of 16.
  EXPECT_NE(log.find("256 KV blocks of 16 tokens"), std::string::npos) << log;
}

TEST(WorkerCliTest, DecodeGrpcPortInUseIsAClearStartupFailure) {
  const int grpc_port = FreePort();
  const int http_port = FreePort();
  auto args = [&](int http) {
    return std::vector<std::string>{BinaryPath("tandem-decode"),
                                    "--model-path",
                                    ShippedModel(),
                                    "--local-prefill",
                                    "--kv-cache-memory",
                                    "8MiB",
                                    "--port",
                                    std::to_string(grpc_port),
                                    "--http-port",
                                    std::to_string(http)};
  };
  Process first(args(http_port));
  ASSERT_TRUE(WaitForHttp(http_port, "/metrics", 200, seconds(20))) << first.Output();
  RunResult second = RunToExit(args(0), seconds(20));
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_NE(second.out.find("--port"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find(std::to_string(grpc_port)), std::string::npos) << second.out;
}

TEST(WorkerCliTest, OperatorMistakesAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  } cases[] = {
      {{BinaryPath("tandem-prefill"), "--model-path", "/nonexistent", "--cluster-secret", kSecret},
       "--model-path: '/nonexistent' is not a directory"},
      {{BinaryPath("tandem-prefill"), "--model-path", "/tmp", "--cluster-secret", kSecret},
       "has no config.json"},
      {{BinaryPath("tandem-prefill"), "--model-path", ModelDir(), "--cluster-secret", "short"},
       "at least 16 bytes"},
      {{BinaryPath("tandem-decode"), "--model-path", ModelDir(), "--disaggregation-mode",
        "prefill"},
       "tandem-decode only runs the decode role"},
      {{BinaryPath("tandem-decode"), "--model-path", ModelDir(), "--local-prefill",
        "--kv-cache-memory", "lots"},
       "--kv-cache-memory: invalid memory size 'lots'"},
      {{BinaryPath("tandem-decode"), "--model-path", ModelDir(), "--local-prefill",
        "--disaggregation-transfer-backend", "carrier-pigeon"},
       "carrier-pigeon"},
      {{BinaryPath("tandem-decode"), "--local-prefill"}, "--model-path is required"},
      {{BinaryPath("tandem-decode"), "--model-path", ModelDir(), "--local-prefill", "--tp-size",
        "8"},
       "--tp-size: '8': Tandem has no tensor parallelism"},
      {{BinaryPath("tandem-prefill"), "--model-path", ModelDir(), "--cluster-secret", kSecret,
        "--speculative-algorithm", "NEXTN"},
       "--speculative-algorithm: Tandem has no speculative decoding"},
      {{BinaryPath("tandem-router"), "--worker-urls", "http://127.0.0.1:1", "--dp-aware"},
       "--dp-aware: "},
      {{BinaryPath("tandem-router"), "--pd-disaggregation", "--decode", "http://127.0.0.1:1"},
       "--pd-disaggregation needs at least one --prefill"},
  };
  for (const Case& c : cases) {
    RunResult r = RunToExit(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expected), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace tandem::itest
