#include "common/flags.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// A daemon-like set of options bound to fields, parsed with captured output.
class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() : flags_("tandem-test", "Test daemon") {
    flags_.SetOutput(&out_, &err_);
    flags_.Add("--model-path", &model_path_, "model directory");
    flags_.Add("--port", &port_, "port");
    flags_.Add("--max-running-requests", &max_running_, "limit");
    flags_.Add("--mem-fraction", &mem_fraction_, "fraction of RAM")->check(CLI::Range(0.0, 1.0));
    flags_.Add("--disable-radix-cache", &disable_radix_, "no prefix cache");
    flags_.Add("--prefill", &prefill_, "URL BOOTSTRAP_PORT");
    flags_.Add("--big", &big_, "a 64-bit value");
  }

  // Writes `text` to a fresh file and returns its path.
  std::string WriteConfig(const std::string& text) {
    std::string path = ::testing::TempDir() + "flags_test_" + std::to_string(::getpid()) + "_" +
                       std::to_string(file_counter_++) + ".yaml";
    std::ofstream(path) << text;
    return path;
  }

  std::optional<int> ParseWithConfig(const std::string& yaml, std::vector<std::string> args = {}) {
    config_ = WriteConfig(yaml);
    args.insert(args.begin(), {"--config", config_});
    return flags_.Parse(args);
  }

  Flags flags_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::string config_;
  int file_counter_ = 0;
  std::string model_path_ = "default-model";
  uint16_t port_ = 8000;
  int max_running_ = 16;
  double mem_fraction_ = 0.5;
  bool disable_radix_ = false;
  std::vector<std::string> prefill_;
  int64_t big_ = 0;
};

TEST_F(FlagsTest, CommandLineOnly) {
  EXPECT_EQ(flags_.Parse({"--model-path", "/m", "--port=9000", "--disable-radix-cache"}),
            std::nullopt);
  EXPECT_EQ(model_path_, "/m");
  EXPECT_EQ(port_, 9000);
  EXPECT_TRUE(disable_radix_);
  EXPECT_EQ(max_running_, 16);  // default kept
  EXPECT_EQ(flags_.config_path(), "");
}

TEST_F(FlagsTest, ConfigFileSetsValuesWithDashOrUnderscore) {
  EXPECT_EQ(ParseWithConfig("model_path: /models/qwen\n"
                            "port: 9001\n"
                            "max-running-requests: 64\n"
                            "mem_fraction: 0.75\n"
                            "disable-radix-cache: true\n"
                            "big: -9000000000\n"),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(model_path_, "/models/qwen");
  EXPECT_EQ(port_, 9001);
  EXPECT_EQ(max_running_, 64);
  EXPECT_DOUBLE_EQ(mem_fraction_, 0.75);
  EXPECT_TRUE(disable_radix_);
  EXPECT_EQ(big_, -9000000000LL);
  EXPECT_EQ(flags_.config_path(), config_);
}

TEST_F(FlagsTest, CommandLineWinsOverFile) {
  EXPECT_EQ(ParseWithConfig("port: 9001\nmodel-path: /from/file\n", {"--port", "7000"}),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(port_, 7000);
  EXPECT_EQ(model_path_, "/from/file");
}

TEST_F(FlagsTest, CommandLineFlagWinsOverFileBool) {
  disable_radix_ = false;
  EXPECT_EQ(ParseWithConfig("disable-radix-cache: false\n", {"--disable-radix-cache"}),
            std::nullopt);
  EXPECT_TRUE(disable_radix_);
}

TEST_F(FlagsTest, BoolFalseFromFile) {
  disable_radix_ = true;
  EXPECT_EQ(ParseWithConfig("disable_radix_cache: False\n"), std::nullopt) << err_.str();
  EXPECT_FALSE(disable_radix_);
}

TEST_F(FlagsTest, NestedSequencesFlattenToTokens) {
  EXPECT_EQ(ParseWithConfig("prefill: [[\"http://h:8000\", 8998], [\"http://g:8000\", 8999]]\n"),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(prefill_, (std::vector<std::string>{"http://h:8000", "8998", "http://g:8000", "8999"}));
}

TEST_F(FlagsTest, BlockSequence) {
  EXPECT_EQ(ParseWithConfig("prefill:\n  - a\n  - b\n"), std::nullopt) << err_.str();
  EXPECT_EQ(prefill_, (std::vector<std::string>{"a", "b"}));
}

TEST_F(FlagsTest, EmptyFileSetsNothing) {
  EXPECT_EQ(ParseWithConfig(""), std::nullopt) << err_.str();
  EXPECT_EQ(port_, 8000);
}

TEST_F(FlagsTest, UnknownKeyNamesFileAndLine) {
  EXPECT_EQ(ParseWithConfig("port: 1\n# comment\nmodle-path: /x\n"), 2);
  EXPECT_EQ(flags_.error(), config_ + ":3: unknown key 'modle-path'");
  EXPECT_THAT(err_.str(), HasSubstr("tandem-test: error: " + config_ + ":3: unknown key"));
}

TEST_F(FlagsTest, WrongTypeNamesKeyAndLine) {
  EXPECT_EQ(ParseWithConfig("model-path: /m\n\n\n\nport: abc\n"), 2);
  EXPECT_EQ(flags_.error(), config_ + ":5: key 'port' expects an integer, got 'abc'");
}

TEST_F(FlagsTest, OutOfRangeNamesRange) {
  EXPECT_EQ(ParseWithConfig("port: 70000\n"), 2);
  EXPECT_EQ(flags_.error(),
            config_ + ":1: key 'port' expects an integer in [0, 65535], got '70000'");
}

TEST_F(FlagsTest, NegativeIntoUnsignedIsOutOfRange) {
  EXPECT_EQ(ParseWithConfig("port: -1\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("expects an integer in [0, 65535], got '-1'"));
}

TEST_F(FlagsTest, Int64OverflowIsOutOfRange) {
  EXPECT_EQ(ParseWithConfig("big: 99999999999999999999\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("key 'big' expects an integer in ["));
}

TEST_F(FlagsTest, FloatTypeError) {
  EXPECT_EQ(ParseWithConfig("mem-fraction: lots\n"), 2);
  EXPECT_EQ(flags_.error(), config_ + ":1: key 'mem-fraction' expects a number, got 'lots'");
}

TEST_F(FlagsTest, CallerValidatorErrorNamesLine) {
  EXPECT_EQ(ParseWithConfig("port: 1\nmem-fraction: 1.5\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr(config_ + ":2: key 'mem-fraction': "));
  EXPECT_THAT(flags_.error(), HasSubstr("1.5"));
}

TEST_F(FlagsTest, BoolRejectsOtherWords) {
  EXPECT_EQ(ParseWithConfig("disable-radix-cache: maybe\n"), 2);
  EXPECT_EQ(flags_.error(),
            config_ + ":1: key 'disable-radix-cache' expects true or false, got 'maybe'");
}

TEST_F(FlagsTest, SequenceForScalarOption) {
  EXPECT_EQ(ParseWithConfig("port: [1, 2]\n"), 2);
  EXPECT_EQ(flags_.error(), config_ + ":1: key 'port' expects a single value, got a sequence");
}

TEST_F(FlagsTest, MappingValueRejected) {
  EXPECT_EQ(ParseWithConfig("model-path:\n  a: b\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("key 'model-path' has a mapping"));
}

TEST_F(FlagsTest, MissingValueRejected) {
  EXPECT_EQ(ParseWithConfig("port:\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr(":1: key 'port' has no value"));
}

TEST_F(FlagsTest, DuplicateKeyAcrossSpellings) {
  EXPECT_EQ(ParseWithConfig("model-path: /a\nmodel_path: /b\n"), 2);
  EXPECT_EQ(flags_.error(), config_ + ":2: key 'model_path' given twice (first on line 1)");
}

TEST_F(FlagsTest, ConfigKeyItselfNotAllowed) {
  EXPECT_EQ(ParseWithConfig("config: other.yaml\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("key 'config' cannot be set in a config file"));
}

TEST_F(FlagsTest, TopLevelMustBeMapping) {
  EXPECT_EQ(ParseWithConfig("- a\n- b\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("expected a mapping"));
  EXPECT_THAT(flags_.error(), HasSubstr(config_ + ":1:"));
}

TEST_F(FlagsTest, YamlSyntaxErrorNamesFileAndLine) {
  EXPECT_EQ(ParseWithConfig("port: 1\nmodel-path: [unclosed\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr(config_ + ":"));
  EXPECT_THAT(flags_.error(), HasSubstr("invalid YAML"));
}

TEST_F(FlagsTest, MissingFileNamesFile) {
  EXPECT_EQ(flags_.Parse({"--config", "/nonexistent/dir/c.yaml"}), 2);
  EXPECT_EQ(flags_.error(),
            "/nonexistent/dir/c.yaml: cannot read config file: No such file or directory");
}

TEST_F(FlagsTest, DirectoryAsConfigFile) {
  EXPECT_EQ(flags_.Parse({"--config", ::testing::TempDir()}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("it is a directory"));
}

TEST_F(FlagsTest, UnknownFlagIsExitCode2) {
  EXPECT_EQ(flags_.Parse({"--no-such-flag"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("tandem-test: error:"));
  EXPECT_THAT(err_.str(), HasSubstr("--no-such-flag"));
}

TEST_F(FlagsTest, BadValueOnCommandLine) {
  EXPECT_EQ(flags_.Parse({"--port", "12x"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--port"));
  EXPECT_THAT(flags_.error(), HasSubstr("expects an integer, got '12x'"));
  EXPECT_EQ(flags_.Parse({"--port", "-5"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("expects an integer in [0, 65535], got '-5'"));
}

TEST_F(FlagsTest, HelpAndVersionExitZero) {
  EXPECT_EQ(flags_.Parse({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("--model-path"));
  EXPECT_THAT(out_.str(), HasSubstr("--config"));
  EXPECT_EQ(err_.str(), "");
  Flags other("tandem-other", "other");
  std::ostringstream out;
  other.SetOutput(&out, &err_);
  EXPECT_EQ(other.Parse({"--version"}), 0);
  EXPECT_THAT(out.str(), HasSubstr("tandem-other "));
}

TEST_F(FlagsTest, LogLevelFlag) {
  EXPECT_EQ(flags_.Parse({"--log-level", "debug"}), std::nullopt);
  EXPECT_EQ(flags_.log_level(), "debug");
}

TEST_F(FlagsTest, BadLogLevelRejected) {
  EXPECT_EQ(ParseWithConfig("log-level: loud\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("unknown log level 'loud'"));
}

// Another server's flags (SGLang's): accepted without effect and noted, or refused by name.
class ForeignFlagsTest : public FlagsTest {
 protected:
  ForeignFlagsTest() {
    flags_.AddIgnored<int>("--cuda-graph-bs", "ignored: GPU only", /*many=*/true);
    flags_.AddIgnored<int>("--tp-size,--tp", "one process")
        ->check(CLI::Validator(
            [](std::string& v) { return v == "1" ? std::string() : "must be 1"; }, "", "one"));
    flags_.AddIgnored("--attention-backend", "ignored: GPU kernels");
    flags_.AddIgnoredSwitch("--trust-remote-code", "ignored: no checkpoint code");
    flags_.AddRefused("--speculative-algorithm", /*takes_value=*/true, "no speculative decoding");
    flags_.AddRefused("--enable-dp-attention", /*takes_value=*/false, "no DP attention");
  }
};

TEST_F(ForeignFlagsTest, IgnoredFlagsParseAndAreNotedOnlyWhenGiven) {
  ASSERT_FALSE(flags_.Parse({"--port", "9"}).has_value()) << err_.str();
  EXPECT_TRUE(flags_.IgnoredNotes().empty());

  ASSERT_FALSE(flags_
                   .Parse({"--cuda-graph-bs", "8", "16", "--tp", "1", "--attention-backend",
                           "ascend", "--trust-remote-code", "--port", "9"})
                   .has_value())
      << err_.str();
  EXPECT_EQ(port_, 9);
  EXPECT_THAT(
      flags_.IgnoredNotes(),
      ::testing::ElementsAre("--cuda-graph-bs 8 16: ignored: GPU only", "--tp-size 1: one process",
                             "--attention-backend ascend: ignored: GPU kernels",
                             "--trust-remote-code: ignored: no checkpoint code"));
}

TEST_F(ForeignFlagsTest, IgnoredValuesMustStillParse) {
  EXPECT_EQ(flags_.Parse({"--cuda-graph-bs", "8", "l6"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--cuda-graph-bs: expects an integer, got 'l6'"));
  EXPECT_EQ(flags_.Parse({"--tp-size", "8"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--tp-size: must be 1"));
}

TEST_F(ForeignFlagsTest, RefusedFlagsNameThemselvesAndWhy) {
  EXPECT_EQ(flags_.Parse({"--speculative-algorithm", "EAGLE"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--speculative-algorithm: no speculative decoding"));
  EXPECT_EQ(flags_.Parse({"--enable-dp-attention"}), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--enable-dp-attention: no DP attention"));
  EXPECT_FALSE(flags_.Parse({"--enable-dp-attention=false"}).has_value()) << err_.str();
}

TEST_F(ForeignFlagsTest, ConfigFileKeysBehaveLikeTheFlags) {
  ASSERT_FALSE(
      ParseWithConfig("tp: 1\ncuda_graph_bs: [4, 8]\ntrust-remote-code: true\n").has_value())
      << err_.str();
  EXPECT_THAT(
      flags_.IgnoredNotes(),
      ::testing::ElementsAre("--cuda-graph-bs 4 8: ignored: GPU only", "--tp-size 1: one process",
                             "--trust-remote-code: ignored: no checkpoint code"));
  EXPECT_EQ(ParseWithConfig("port: 9\nspeculative-algorithm: NEXTN\n"), 2);
  EXPECT_THAT(flags_.error(),
              HasSubstr(":2: key 'speculative-algorithm': no speculative decoding"));
  EXPECT_EQ(ParseWithConfig("enable-dp-attention: true\n"), 2);
  EXPECT_THAT(flags_.error(), HasSubstr("--enable-dp-attention: no DP attention"));
}

TEST(FlagsRequiredTest, RequiredOptionSatisfiedByFile) {
  Flags flags("tandem-req", "required from file");
  std::ostringstream out, err;
  flags.SetOutput(&out, &err);
  std::string model;
  flags.Add("--model-path", &model, "model")->required();
  std::string path =
      ::testing::TempDir() + "flags_required_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "model-path: /m\n";
  EXPECT_EQ(flags.Parse({"--config", path}), std::nullopt) << err.str();
  EXPECT_EQ(model, "/m");

  Flags missing("tandem-req", "required missing");
  missing.SetOutput(&out, &err);
  std::string model2;
  missing.Add("--model-path", &model2, "model")->required();
  EXPECT_EQ(missing.Parse(std::vector<std::string>{}), 2);
  EXPECT_THAT(missing.error(), HasSubstr("--model-path"));
}

TEST(FlagsArgvTest, ParsesArgv) {
  Flags flags("tandem-argv", "argv");
  int port = 0;
  flags.Add("--port", &port, "port");
  std::vector<std::string> storage = {"tandem-argv", "--port", "31"};
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  EXPECT_EQ(flags.Parse(static_cast<int>(argv.size()), argv.data()), std::nullopt);
  EXPECT_EQ(port, 31);
}

}  // namespace
}  // namespace tandem
