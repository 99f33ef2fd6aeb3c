// Runs the tandem-bench binary against the in-test SGLang-shaped server (FakeSglangServer) and
// checks the printed table against what the server itself served.
#include <sys/wait.h>

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
const std::string kModel = std::string(TANDEM_SOURCE_DIR) + "/models/tandem-tiny-fortunes";

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunBench(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "/tandem_bench_stderr.txt";
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

  // The server saw 20 prompts; their token counts add up to the table's input total.
  auto tokenizer = engine::Tokenizer::FromModelDir(kModel);
  ASSERT_TRUE(tokenizer.ok());
  long long input_tokens = 0;
  for (const auto& prompt : server.prompts()) {
    input_tokens += static_cast<long long>((*tokenizer)->Encode(prompt, false).size());
  }
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

  run = RunBench("--backend vllm " + Common(port));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--backend"), std::string::npos) << run.err;

  run = RunBench("--backend sglang --port 1 --dataset-name random --num-prompts 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("--model or --tokenizer"), std::string::npos) << run.err;

  run = RunBench("--request-rate fast " + Common(port));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("--request-rate"), std::string::npos) << run.err;

  run = RunBench("--model /nonexistent-model --dataset-name random --num-prompts 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("/nonexistent-model"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace tandem::bench
