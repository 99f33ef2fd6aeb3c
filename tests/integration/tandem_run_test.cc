// tandem-run as an operator runs it: the shipped model, one prompt or a batch file, greedy, and
// the errors a wrong invocation gets.
#include <cctype>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

std::vector<std::string> Base() {
  return {BinaryPath("tandem-run"),
          "--model-path",
          SourcePath("models/tandem-tiny-english"),
          "--temperature",
          "0",
          "--max-new-tokens",
          "24",
          "--threads",
          "2"};
}

// The generated text of a single-prompt run: stdout up to the stats line on stderr.
std::string SingleText(const std::string& prompt) {
  auto argv = Base();
  argv.insert(argv.end(), {"--prompt", prompt});
  RunResult r = RunToExit(argv, std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const size_t stats = r.out.find("[tandem-run]");
  EXPECT_NE(stats, std::string::npos) << r.out;
  std::string text = r.out.substr(0, stats);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

TEST(TandemRunTest, WritesEnglishFromTheShippedModel) {
  const std::string text = SingleText("The meaning of life is");
  int letters = 0, spaces = 0;
  for (unsigned char c : text) {
    letters += std::isalpha(c) != 0;
    spaces += c == ' ';
  }
  EXPECT_GE(letters, 30) << text;
  EXPECT_GE(spaces, 5) << text;
}

TEST(TandemRunTest, BatchFileRunsConcurrentlyAndMatchesSingleRuns) {
  const std::vector<std::string> prompts = {
      "You will be", "A fool and his money", "Love is", "The best way to", "Never", "Q: Why"};
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tandem_run_batch_" + std::to_string(::getpid()) + ".txt"))
                               .string();
  {
    std::ofstream f(path);
    for (const auto& p : prompts) f << p << "\n\n";  // blank lines are skipped
  }
  auto argv = Base();
  argv.insert(argv.end(), {"--batch-file", path});
  RunResult r = RunToExit(argv, std::chrono::seconds(60));
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string header = "=== " + std::to_string(i + 1) + ": " + prompts[i] + "\n";
    const size_t at = r.out.find(header);
    ASSERT_NE(at, std::string::npos) << header << r.out;
    const size_t begin = at + header.size();
    const size_t end = i + 1 < prompts.size()
                           ? r.out.find("=== " + std::to_string(i + 2) + ": ", begin)
                           : r.out.find("[tandem-run]", begin);
    ASSERT_NE(end, std::string::npos) << r.out;
    std::string text = r.out.substr(begin, end - begin);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    EXPECT_EQ(text, SingleText(prompts[i])) << prompts[i];
  }
}

TEST(TandemRunTest, WrongInvocationsNameTheProblem) {
  auto missing = Base();
  missing.insert(missing.end(), {"--batch-file", "/nonexistent/prompts.txt"});
  RunResult r = RunToExit(missing);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/nonexistent/prompts.txt"), std::string::npos) << r.out;

  auto both = Base();
  both.insert(both.end(), {"--prompt", "x", "--batch-file", "/dev/null"});
  r = RunToExit(both);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("not both"), std::string::npos) << r.out;

  auto empty = Base();
  empty.insert(empty.end(), {"--batch-file", "/dev/null"});
  r = RunToExit(empty);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("no prompt"), std::string::npos) << r.out;

  auto bad = Base();
  bad.insert(bad.end(), {"--prompt", "x", "--top-p", "1.5"});
  r = RunToExit(bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("top_p"), std::string::npos) << r.out;

  r = RunToExit({BinaryPath("tandem-run"), "--model-path", "/nonexistent/model", "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
}

// --input-ids --jsonl: token ids in, one JSON object per prompt out.
TEST(TandemRunTest, TokenIdsInJsonLinesOut) {
  auto text = Base();
  text.insert(text.end(), {"--prompt", "Once upon a time", "--jsonl", "--ignore-eos"});
  RunResult by_text = RunToExit(text, std::chrono::seconds(60));
  ASSERT_EQ(by_text.exit_code, 0) << by_text.out;
  const std::string ids_path = ::testing::TempDir() + "/tandem_run_ids.txt";
  {
    std::ofstream out(ids_path);
    out << "10 20 30\n7\n";
  }
  auto ids = Base();
  ids.insert(ids.end(), {"--batch-file", ids_path, "--input-ids", "--jsonl", "--ignore-eos"});
  RunResult by_ids = RunToExit(ids, std::chrono::seconds(60));
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.out;
  int lines = 0;
  for (const RunResult* r : {&by_text, &by_ids}) {
    size_t at = 0;
    while ((at = r->out.find("{\"finish_reason\":{\"length\":24,\"type\":\"length\"},\"index\":",
                             at)) != std::string::npos) {
      ++lines;
      ++at;
    }
  }
  EXPECT_EQ(lines, 3) << by_text.out << by_ids.out;
  EXPECT_NE(by_ids.out.find("\"index\":1,\"output_ids\":["), std::string::npos) << by_ids.out;

  auto bad = Base();
  bad.insert(bad.end(), {"--prompt", "10 -3", "--input-ids"});
  RunResult r = RunToExit(bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("'-3' is not a token id in [0, "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tandem::itest
