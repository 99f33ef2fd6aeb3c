// Runs the tandem-bench binary against the in-test SGLang-shaped server (FakeSglangServer) and
// checks the printed table against what the server itself served.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/bench/fake_sglang_server.h"

namespace tandem::bench {
namespace {

using testing::FakeSglangServer;

const std::string kBinary = std::string(TANDEM_BINARY_DIR) + "/bin/tandem-bench";
const std::string kModel = std::string(TANDEM_SOURCE_DIR) + "/models/tandem-tiny-english";

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunBench(const std::string& args) {
  // ctest runs each test case as its own process, several at once: one file per process.
  const std::string err_path =
      ::testing::TempDir() + "/tandem_bench_stderr." + std::to_string(getpid()) + ".txt";
  const std::string command = kBinary + " " + args + " 2>" + err_path;
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::remove(err_path.c_str());
  return result;
}

// The value column of a table row, e.g. Row(out, "Successful requests:") == "20".
std::string Row(const std::string& table, const std::string& name) {
  size_t at = table.find("\n" + name);
  if (at == std::string::npos) return "";
  size_t start = at + 1 + 41;
  size_t end = table.find('\n', start);
  std::string value = table.substr(start, end - start);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

std::string Common(uint16_t port) {
  return "--host 127.0.0.1 --port " + std::to_string(port) + " --model " + kModel +
         " --dataset-name random --num-prompts 20 --random-input-len 32 --random-output-len 8"
         " --seed 1";
}

TEST(TandemBenchCliTest, TableCountsMatchTheServer) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  const std::string record_path = ::testing::TempDir() + "/tandem_bench_records.jsonl";
  std::remove(record_path.c_str());
  CommandResult run = RunBench("--backend sglang " + Common(server.port()) +
                               " --warmup-requests 0 --output-file " + record_path);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;

  // The server saw 20 prompts; the input total is the dataset's lengths, as bench_serving
  // counts it (the seed-1 draw of 20 lengths in [1, 32], bench_serving_golden_test's).
  const long long input_tokens = 273;
  EXPECT_EQ(server.requests(), 20);
  EXPECT_EQ(Row(run.out, "Backend:"), "sglang");
  EXPECT_EQ(Row(run.out, "Traffic request rate:"), "inf");
  EXPECT_EQ(Row(run.out, "Max request concurrency:"), "not set");
  EXPECT_EQ(Row(run.out, "Successful requests:"), "20");
  EXPECT_EQ(Row(run.out, "Total input tokens:"), std::to_string(input_tokens));
  EXPECT_EQ(Row(run.out, "Total generated tokens:"), std::to_string(server.tokens_sent()));
  EXPECT_NE(run.out.find("#Input tokens: " + std::to_string(input_tokens)), std::string::npos);
  EXPECT_NE(run.out.find("============ Serving Benchmark Result ============"), std::string::npos);
  EXPECT_NE(run.out.find("P99 ITL (ms):"), std::string::npos);
  // Piped: no progress bar.
  EXPECT_EQ(run.err.find("it/s]"), std::string::npos) << run.err;

  std::ifstream records(record_path);
  std::string line;
  ASSERT_TRUE(std::getline(records, line));
  nlohmann::json record = nlohmann::json::parse(line);
  EXPECT_EQ(record["completed"], 20);
  EXPECT_EQ(record["total_input_tokens"], input_tokens);
  EXPECT_EQ(record["total_output_tokens"], server.tokens_sent());
}

TEST(TandemBenchCliTest, ChatBackendWithConcurrencyRateAndPlot) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  const std::string plot_path = ::testing::TempDir() + "/tandem_bench_plot.png";
  std::remove(plot_path.c_str());
  CommandResult run =
      RunBench("--backend sglang-oai-chat " + Common(server.port()) +
               " --random-range-ratio 1 --max-concurrency 4 --request-rate 200 --warmup-requests 2"
               " --plot " +
               plot_path);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(server.requests(), 22);  // 2 warm-up + 20
  EXPECT_LE(server.max_in_flight(), 4);
  EXPECT_NE(run.out.find("Starting warmup with 2 sequences..."), std::string::npos);
  EXPECT_EQ(Row(run.out, "Backend:"), "sglang-oai-chat");
  EXPECT_EQ(Row(run.out, "Traffic request rate:"), "200.0");
  EXPECT_EQ(Row(run.out, "Max request concurrency:"), "4");
  EXPECT_EQ(Row(run.out, "Successful requests:"), "20");
  EXPECT_EQ(Row(run.out, "Total generated tokens:"), "160");  // ignore_eos: 8 each
  std::ifstream png(plot_path, std::ios::binary);
  ASSERT_TRUE(png.good()) << run.err;
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
}

TEST(TandemBenchCliTest, MixedDatasetWithGoodput) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  const std::string record_path = ::testing::TempDir() + "/tandem_bench_mixed.jsonl";
  std::remove(record_path.c_str());
  // 10 prompts, 2 long (40 in, 2 out) and 8 short (5..9 in, 6 out), sent as ids. Bounds of
  // 60 s hold for every request; an ITL bound of 0.0001 ms for none (every request has at least
  // one gap, and the fake server streams its tokens 1 ms apart).
  auto run_with = [&](const std::string& itl_bound) {
    return RunBench("--backend sglang --host 127.0.0.1 --port " + std::to_string(server.port()) +
                    " --model " + kModel +
                    " --dataset-name mixed --tokenize-prompt --num-prompts 10"
                    " --mixed-long-fraction 0.2 --mixed-long-input-len 40"
                    " --mixed-long-output-len 2 --mixed-short-input-min 5"
                    " --mixed-short-input-max 9 --mixed-short-output-len 6"
                    " --warmup-requests 0 --time-tokens-without-text --goodput-ttft-ms 60000"
                    " --goodput-itl-p99-ms " +
                    itl_bound + " --output-file " + record_path);
  };
  CommandResult good = run_with("60000");
  ASSERT_EQ(good.exit_code, 0) << good.out << good.err;
  EXPECT_EQ(Row(good.out, "Successful requests:"), "10");
  EXPECT_EQ(Row(good.out, "Total generated tokens:"), "52");  // 2 x 2 + 8 x 6
  EXPECT_NE(good.out.find("(10 of 10 requests good)"), std::string::npos) << good.out;
  CommandResult none = run_with("0.0001");
  ASSERT_EQ(none.exit_code, 0) << none.out << none.err;
  EXPECT_NE(none.out.find("(0 of 10 requests good)"), std::string::npos) << none.out;

  std::ifstream records(record_path);
  std::string line;
  ASSERT_TRUE(std::getline(records, line));
  nlohmann::json record = nlohmann::json::parse(line);
  EXPECT_EQ(record["dataset_name"], "mixed");
  EXPECT_EQ(record["goodput_requests"], 10);
  EXPECT_EQ(record["goodput_fraction"], 1.0);
  EXPECT_GT(record["goodput_request_throughput"].get<double>(), 0.0);
  EXPECT_EQ(record["slo_itl_p99_ms"], 60000.0);
  EXPECT_EQ(record["mixed_long_input_len"], 40);
  const long long input = record["total_input_tokens"];
  EXPECT_GE(input, 2 * 40 + 8 * 5);
  EXPECT_LE(input, 2 * 40 + 8 * 9);
  ASSERT_TRUE(std::getline(records, line));
  EXPECT_EQ(nlohmann::json::parse(line)["goodput_requests"], 0);
}

TEST(TandemBenchCliTest, FailuresAreReportedNotHidden) {
  FakeSglangServer::Options options;
  options.fail_every = 5;
  FakeSglangServer server(options);
  ASSERT_TRUE(server.Start().ok());
  CommandResult run =
      RunBench("--backend sglang " + Common(server.port()) + " --warmup-requests 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(Row(run.out, "Successful requests:"), "16");
  EXPECT_NE(run.err.find("4 of 20 requests failed"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("injected failure"), std::string::npos) << run.err;
}

TEST(TandemBenchCliTest, ClearErrors) {
  // Nobody listens: the warm-up fails and says why.
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  const uint16_t port = server.port();
  server.Stop();
  CommandResult run = RunBench("--backend sglang " + Common(port));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("Warmup failed"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << run.err;

  // Usage errors exit 2, like every other Tandem binary (and argparse).
  run = RunBench("--backend trt " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--backend"), std::string::npos) << run.err;

  run = RunBench("--backend sglang --port 1 --dataset-name random --num-prompts 2");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--model or --tokenizer"), std::string::npos) << run.err;

  run = RunBench("--request-rate fast " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--request-rate"), std::string::npos) << run.err;

  run = RunBench("--no-such-flag " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  run = RunBench("--num-prompts 0 " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  run = RunBench("--random-range-ratio 2 " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  run = RunBench(Common(port) + " --random-input-len 0");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--random-input-len"), std::string::npos) << run.err;
  run = RunBench(Common(port) + " --extra-request-body '[1]'");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--extra-request-body"), std::string::npos) << run.err;
  run = RunBench("--backend sglang-oai --tokenize-prompt " + Common(port));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--tokenize-prompt"), std::string::npos) << run.err;
  run = RunBench(Common(port) + " --lora-name a b");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("LoRA"), std::string::npos) << run.err;
  EXPECT_EQ(RunBench("--help").exit_code, 0);

  run = RunBench("--model /nonexistent-model --dataset-name random --num-prompts 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("/nonexistent-model"), std::string::npos) << run.err;
}

// bench_serving's other flags: the cheap ones work, the rest are accepted with a note.
TEST(TandemBenchCliTest, UpstreamFlagsWorkOrSayTheyDoNothing) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  const std::string record_path = ::testing::TempDir() + "/tandem_bench_details.jsonl";
  std::remove(record_path.c_str());
  CommandResult run =
      RunBench("--backend sglang " + Common(server.port()) +
               " --warmup-requests 1 --flush-cache --extra-request-body '{\"top_p\": 0.5}'"
               " --tokenize-prompt --return-logprob --output-details --tag nightly --output-file " +
               record_path +
               " --profile --profile-activities CPU GPU --apply-chat-template --pd-separated"
               " --header X-Test=1 --served-model-name served");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(server.flushes(), 1);
  EXPECT_EQ(server.requests(), 21);
  const nlohmann::json body = server.last_body();
  EXPECT_EQ(body["top_p"], 0.5);
  EXPECT_TRUE(body["input_ids"].is_array()) << body.dump();
  EXPECT_FALSE(body.contains("text"));
  EXPECT_EQ(body["return_logprob"], true);
  for (const char* flag :
       {"--profile ", "--profile-activities ", "--apply-chat-template ", "--pd-separated "}) {
    EXPECT_NE(run.err.find(std::string("note: ") + flag + "does nothing here"), std::string::npos)
        << flag << "\n"
        << run.err;
  }
  std::ifstream records(record_path);
  std::string line;
  ASSERT_TRUE(std::getline(records, line));
  const nlohmann::json record = nlohmann::json::parse(line);
  EXPECT_EQ(record["tag"], "nightly");
  ASSERT_EQ(record["output_lens"].size(), 20u);
  ASSERT_EQ(record["generated_texts"].size(), 20u);
  EXPECT_EQ(record["errors"][0], "");
}

// --random-output-len 0: every request asks for no token; an empty answer is a success.
TEST(TandemBenchCliTest, ZeroTokenRequestsSucceed) {
  FakeSglangServer server(FakeSglangServer::Options{});
  ASSERT_TRUE(server.Start().ok());
  for (const char* backend : {"sglang", "sglang-oai", "sglang-oai-chat"}) {
    CommandResult run = RunBench(std::string("--backend ") + backend + " --host 127.0.0.1 --port " +
                                 std::to_string(server.port()) + " --model " + kModel +
                                 " --dataset-name random --num-prompts 5 --random-input-len 16"
                                 " --random-output-len 0");
    ASSERT_EQ(run.exit_code, 0) << backend << run.out << run.err;
    EXPECT_EQ(Row(run.out, "Successful requests:"), "5") << backend;
    EXPECT_EQ(Row(run.out, "Total generated tokens:"), "0") << backend;
  }
}

}  // namespace
}  // namespace tandem::bench
