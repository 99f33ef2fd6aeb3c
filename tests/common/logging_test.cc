#include "common/logging.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// Captures log lines for one test and restores a default logger afterwards.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kLogLevelEnv);
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
  }
  void TearDown() override {
    unsetenv(kLogLevelEnv);
    spdlog::set_default_logger(spdlog::stderr_color_mt("restored-" + std::to_string(++counter_)));
  }

  std::ostringstream out_;
  spdlog::sink_ptr sink_;
  static inline int counter_ = 0;
};

TEST_F(LoggingTest, LineFormatHasTimeLevelProgramThread) {
  ASSERT_TRUE(InitLogging("tandem-test", "info", sink_).ok());
  spdlog::info("listening on {}", 30000);
  const std::string line = out_.str();
  // gtest's POSIX extended regex (std::regex drew GCC 12 -Wmaybe-uninitialized false positives
  // in the sanitizer build).
  EXPECT_THAT(line, testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                                          "\\.[0-9]{6}Z info tandem-test\\[[0-9]+\\] "
                                          "listening on 30000\n"));
}

TEST_F(LoggingTest, RequestIdTag) {
  ASSERT_TRUE(InitLogging("tandem-test", "debug", sink_).ok());
  LOG_RID(warn, "3f2a", "prefill {} failed: {}", "http://h:8000", "timeout");
  LOG_RID(info, uint64_t{42}, "no args");
  LOG_RID(err, "r9", "code {}", 500);
  EXPECT_THAT(out_.str(), HasSubstr(" warning tandem-test["));
  EXPECT_THAT(out_.str(), HasSubstr("] rid=3f2a prefill http://h:8000 failed: timeout\n"));
  EXPECT_THAT(out_.str(), HasSubstr("] rid=42 no args\n"));
  EXPECT_THAT(out_.str(), HasSubstr(" error tandem-test["));
  EXPECT_THAT(out_.str(), HasSubstr("] rid=r9 code 500\n"));
}

TEST_F(LoggingTest, MultiLineMessageStaysOneLine) {
  ASSERT_TRUE(InitLogging("tandem-test", "info", sink_).ok());
  spdlog::warn("bad request body: {}", "line one\nline two\r\n");
  const std::string text = out_.str();
  EXPECT_THAT(text, HasSubstr("bad request body: line one\\nline two\\r\\n\n"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST_F(LoggingTest, LevelFiltersLines) {
  ASSERT_TRUE(InitLogging("tandem-test", "warn", sink_).ok());
  spdlog::info("hidden");
  LOG_RID(debug, "r", "hidden too");
  spdlog::error("shown");
  EXPECT_THAT(out_.str(), ::testing::Not(HasSubstr("hidden")));
  EXPECT_THAT(out_.str(), HasSubstr("shown"));
}

TEST_F(LoggingTest, EnvironmentUsedWhenFlagEmpty) {
  setenv(kLogLevelEnv, "error", 1);
  ASSERT_TRUE(InitLogging("tandem-test", "", sink_).ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  // The flag wins over the environment.
  ASSERT_TRUE(InitLogging("tandem-test", "debug", sink_).ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
}

TEST_F(LoggingTest, DefaultIsInfo) {
  ASSERT_TRUE(InitLogging("tandem-test", "", sink_).ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
}

TEST_F(LoggingTest, UnknownLevelIsAnErrorNamingItsSource) {
  absl::Status status = InitLogging("tandem-test", "loud", sink_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--log-level: unknown log level 'loud'"));
  setenv(kLogLevelEnv, "chatty", 1);
  status = InitLogging("tandem-test", "", sink_);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("TANDEM_LOG_LEVEL: unknown log level 'chatty'"));
}

TEST(ParseLogLevelTest, Names) {
  EXPECT_EQ(*ParseLogLevel("WARNING"), spdlog::level::warn);
  EXPECT_EQ(*ParseLogLevel("err"), spdlog::level::err);
  EXPECT_EQ(*ParseLogLevel("off"), spdlog::level::off);
  EXPECT_FALSE(ParseLogLevel("").ok());
}

}  // namespace
}  // namespace tandem
