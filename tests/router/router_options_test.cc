#include "router/router_options.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

struct Parsed {
  std::optional<int> exit_code;
  std::string error;
  std::vector<std::string> notes;
  RouterOptions options;
};

Parsed Parse(const std::vector<std::string>& args) {
  Parsed p;
  Flags flags("tandem-router", "test");
  std::ostringstream out, err;
  flags.SetOutput(&out, &err);
  RegisterRouterFlags(flags, &p.options);
  p.exit_code = flags.Parse(args);
  p.error = err.str();
  p.notes = flags.IgnoredNotes();
  return p;
}

TEST(RouterOptionsTest, SglangPdCommandLineTranslatesAsIs) {
  // The router line of the seeds' launch scripts, with our binary's name.
  Parsed p = Parse({"--pd-disaggregation", "--policy", "cache_aware", "--prefill",
                    "http://10.0.0.1:8000", "8998", "--prefill", "http://10.0.0.2:8000", "8999",
                    "--decode", "http://10.0.0.3:8001", "--decode", "http://10.0.0.4:8001",
                    "--host", "127.0.0.1", "--port", "6688"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  ASSERT_EQ(p.options.prefill.size(), 2u);
  EXPECT_EQ(p.options.prefill[0].url, "http://10.0.0.1:8000");
  EXPECT_EQ(p.options.prefill[0].bootstrap_port, 8998);
  EXPECT_EQ(p.options.prefill[1].bootstrap_port, 8999);
  EXPECT_EQ(p.options.decode_urls.size(), 2u);
  EXPECT_EQ(p.options.port, 6688);
  EXPECT_EQ(p.options.prefill_policy, "cache_aware");
  // Decode workers keep no prefix cache: cache affinity is for prefill only.
  EXPECT_EQ(p.options.decode_policy, "power_of_two");
}

TEST(RouterOptionsTest, SglangRouterFlagsWithoutMeaningHereAreNotedAndMissingFeaturesRefused) {
  // The seeds' router line ends in --mini-lb (SGLang's Python debugging balancer).
  Parsed p = Parse({"--pd-disaggregation", "--prefill", "http://10.0.0.1:8000", "8998", "--decode",
                    "http://10.0.0.3:8001", "--host", "127.0.0.1", "--port", "6688", "--mini-lb",
                    "--prometheus-port", "29000"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.policy, "cache_aware");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("--mini-lb: ignored"), std::string::npos) << p.notes[0];
  // sgl-router's Prometheus port is served: /metrics there too, on --host unless given.
  EXPECT_EQ(p.options.prometheus_port, 29000);
  EXPECT_EQ(p.options.prometheus_host, "127.0.0.1");

  Parsed typo = Parse({"--worker-urls", "http://w:1", "--prometheus-port", "29k"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.error.find("--prometheus-port"), std::string::npos) << typo.error;
  Parsed dp = Parse({"--worker-urls", "http://w:1", "--dp-aware"});
  EXPECT_EQ(dp.exit_code, 2);
  EXPECT_NE(dp.error.find("--dp-aware: a Tandem worker is one data-parallel rank"),
            std::string::npos)
      << dp.error;
  Parsed policy = Parse({"--worker-urls", "http://w:1", "--policy", "consistent_hashing"});
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.error.find("consistent_hashing"), std::string::npos) << policy.error;
}

TEST(RouterOptionsTest, PrometheusPortIsOffByDefaultAndMustDifferFromThePort) {
  Parsed plain = Parse({"--worker-urls", "http://w:1", "--host", "0.0.0.0"});
  ASSERT_TRUE(ValidateRouterOptions(&plain.options).ok());
  EXPECT_EQ(plain.options.prometheus_port, 0);
  Parsed apart = Parse({"--worker-urls", "http://w:1", "--host", "0.0.0.0", "--prometheus-port",
                        "29000", "--prometheus-host", "10.0.0.9"});
  ASSERT_FALSE(apart.exit_code.has_value()) << apart.error;
  ASSERT_TRUE(ValidateRouterOptions(&apart.options).ok());
  EXPECT_EQ(apart.options.prometheus_host, "10.0.0.9");
  Parsed same =
      Parse({"--worker-urls", "http://w:1", "--port", "29000", "--prometheus-port", "29000"});
  const absl::Status s = ValidateRouterOptions(&same.options);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--prometheus-port must differ from --port"), std::string::npos) << s;
  EXPECT_EQ(Parse({"--worker-urls", "http://w:1", "--prometheus-port", "70000"}).exit_code, 2);
}

TEST(RouterOptionsTest, ReasoningParserIsOneOfSGLangsThinkParsersOrOff) {
  EXPECT_EQ(Parse({"--worker-urls", "http://127.0.0.1:8001"}).options.reasoning_parser, "");
  for (const char* name : {"qwen3", "deepseek-v3", "deepseek-r1", "qwen3-thinking"}) {
    Parsed parsed = Parse({"--worker-urls", "http://127.0.0.1:8001", "--reasoning-parser", name});
    ASSERT_FALSE(parsed.exit_code.has_value()) << parsed.error;
    EXPECT_EQ(parsed.options.reasoning_parser, name);
  }
  Parsed other = Parse({"--worker-urls", "http://127.0.0.1:8001", "--reasoning-parser", "r1"});
  EXPECT_TRUE(other.exit_code.has_value());
  EXPECT_NE(other.error.find("reasoning-parser"), std::string::npos) << other.error;
}

TEST(RouterOptionsTest, ResponseStoreDefaultsTo64MiBAndZeroKeepsNone) {
  EXPECT_EQ(Parse({"--worker-urls", "http://127.0.0.1:8001"}).options.response_store_mb, 64);
  Parsed none = Parse({"--worker-urls", "http://127.0.0.1:8001", "--response-store-mb", "0"});
  ASSERT_FALSE(none.exit_code.has_value()) << none.error;
  EXPECT_EQ(none.options.response_store_mb, 0);
  Parsed negative = Parse({"--worker-urls", "http://127.0.0.1:8001", "--response-store-mb", "-1"});
  EXPECT_TRUE(negative.exit_code.has_value());
  EXPECT_NE(negative.error.find("response-store-mb"), std::string::npos) << negative.error;
}

TEST(RouterOptionsTest, PdDecodePolicyDefaultsToLoadUnderCacheAwareAndHonoursAnExplicitOne) {
  const std::vector<std::string> pd = {
      "--pd-disaggregation", "--prefill", "http://10.0.0.1:8000", "8998", "--decode",
      "http://10.0.0.3:8001"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = pd;
    args.insert(args.end(), extra.begin(), extra.end());
    Parsed p = Parse(args);
    EXPECT_FALSE(p.exit_code.has_value()) << p.error;
    EXPECT_TRUE(ValidateRouterOptions(&p.options).ok());
    return p.options;
  };
  RouterOptions o = with({});  // --policy defaults to cache_aware
  EXPECT_EQ(o.prefill_policy, "cache_aware");
  EXPECT_EQ(o.decode_policy, "power_of_two");
  o = with({"--policy", "cache_aware", "--decode-policy", "cache_aware"});
  EXPECT_EQ(o.decode_policy, "cache_aware");
  o = with({"--policy", "cache_aware", "--decode-policy", "round_robin"});
  EXPECT_EQ(o.decode_policy, "round_robin");
  o = with({"--policy", "random"});
  EXPECT_EQ(o.prefill_policy, "random");
  EXPECT_EQ(o.decode_policy, "random");
  // Plain mode: colocated workers have a real prefix cache; --policy is used as given.
  Parsed plain = Parse({"--worker-urls", "http://127.0.0.1:8001", "--policy", "cache_aware"});
  ASSERT_TRUE(ValidateRouterOptions(&plain.options).ok());
  EXPECT_EQ(plain.options.policy, "cache_aware");
  EXPECT_EQ(plain.options.decode_policy, "cache_aware");
}

TEST(RouterOptionsTest, PrefillListFromYamlMatchesTheCommandLine) {
  const std::string path = ::testing::TempDir() + "/router.yaml";
  {
    std::ofstream f(path);
    f << "pd-disaggregation: true\n"
         "prefill: [[\"http://10.0.0.1:8000\", 8998], [\"http://10.0.0.2:8000\", 8999]]\n"
         "decode: [\"http://10.0.0.3:8001\"]\n";
  }
  Parsed p = Parse({"--config", path});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  ASSERT_EQ(p.options.prefill.size(), 2u);
  EXPECT_EQ(p.options.prefill[1].url, "http://10.0.0.2:8000");
  EXPECT_EQ(p.options.prefill[1].bootstrap_port, 8999);
  EXPECT_EQ(p.options.decode_urls.size(), 1u);
}

TEST(RouterOptionsTest, SglangDefaults) {
  Parsed p = Parse({"--worker-urls", "http://127.0.0.1:8001"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.port, 30000);
  EXPECT_EQ(p.options.policy, "cache_aware");
  EXPECT_DOUBLE_EQ(p.options.cache_threshold, 0.3);
  EXPECT_EQ(p.options.balance_abs_threshold, 64);
  EXPECT_DOUBLE_EQ(p.options.balance_rel_threshold, 1.5);
  EXPECT_EQ(p.options.retry_max_retries, 5);
}

TEST(RouterOptionsTest, PrefillTokens) {
  std::vector<PrefillEndpoint> eps;
  ASSERT_TRUE(
      ParsePrefillEndpoints({"http://a:1", "none", "http://b:2", "http://c:3", "77"}, &eps).ok());
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_FALSE(eps[0].bootstrap_port.has_value());
  EXPECT_FALSE(eps[1].bootstrap_port.has_value());
  EXPECT_EQ(eps[2].bootstrap_port, 77);

  auto s = ParsePrefillEndpoints({"8998"}, &eps);
  EXPECT_NE(s.message().find("'8998' does not follow a URL"), std::string::npos) << s.message();
  s = ParsePrefillEndpoints({"http://a:1", "70000"}, &eps);
  EXPECT_NE(s.message().find("'70000' is not in [1, 65535]"), std::string::npos) << s.message();
  s = ParsePrefillEndpoints({"banana"}, &eps);
  EXPECT_NE(s.message().find("'banana'"), std::string::npos) << s.message();
}

TEST(RouterOptionsTest, CrossFlagErrorsNameTheFlags) {
  Parsed p = Parse({"--pd-disaggregation", "--decode", "http://d:1"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  auto s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("--prefill"), std::string::npos) << s.message();

  p = Parse({"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"});
  s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("bootstrap port is required"), std::string::npos) << s.message();

  p = Parse({"--prefill", "http://p:1", "8998"});
  s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("--pd-disaggregation"), std::string::npos) << s.message();

  p = Parse({"--worker-urls", "http://w:1", "--api-key", "k", "--admin-key", "k"});
  s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("--admin-key must differ"), std::string::npos) << s.message();
}

TEST(RouterOptionsTest, CorsOriginsDefaultToAnyAndCanBeListedOrTurnedOff) {
  Parsed p = Parse({"--worker-urls", "http://w:1"});
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.cors_origins, std::vector<std::string>{"*"});

  p = Parse({"--worker-urls", "http://w:1", "--cors-allowed-origins",
             "https://chat.example, http://localhost:3000"});
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.cors_origins,
            (std::vector<std::string>{"https://chat.example", "http://localhost:3000"}));

  p = Parse({"--worker-urls", "http://w:1", "--cors-allowed-origins", ""});
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_TRUE(p.options.cors_origins.empty());

  p = Parse({"--worker-urls", "http://w:1", "--cors-allowed-origins", "https://chat.example/"});
  const absl::Status s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("--cors-allowed-origins: CORS origin 'https://chat.example/'"),
            std::string::npos)
      << s.message();
}

TEST(RouterOptionsTest, AdminKeyFromAFileOrAnExplicitOptOut) {
  const std::string path = ::testing::TempDir() + "/router-options-admin-key";
  std::ofstream(path) << "  admin-from-file-123 \nsecond line\n";
  Parsed p = Parse({"--worker-urls", "http://w:1", "--admin-key-file", path});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.admin_key, "admin-from-file-123");
  EXPECT_FALSE(p.options.disable_admin_auth);

  p = Parse({"--worker-urls", "http://w:1", "--disable-admin-auth"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  ASSERT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_TRUE(p.options.disable_admin_auth);
  EXPECT_TRUE(p.options.admin_key.empty());

  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--admin-key", "k", "--admin-key-file", path},
                                             {"--admin-key", "k", "--disable-admin-auth"},
                                             {"--admin-key-file", path, "--disable-admin-auth"},
                                             {"--admin-key-file", path + ".missing"}}) {
    std::vector<std::string> args = {"--worker-urls", "http://w:1"};
    args.insert(args.end(), bad.begin(), bad.end());
    p = Parse(args);
    ASSERT_FALSE(p.exit_code.has_value()) << p.error;
    const absl::Status s = ValidateRouterOptions(&p.options);
    EXPECT_FALSE(s.ok()) << args.back();
    EXPECT_NE(s.message().find("--admin-key"), std::string::npos) << s.message();
  }
  std::ofstream(path) << "\n";
  p = Parse({"--worker-urls", "http://w:1", "--admin-key-file", path});
  EXPECT_NE(ValidateRouterOptions(&p.options).message().find("holds no key"), std::string::npos);
}

TEST(RouterOptionsTest, HttpLimitsAndTlsFlags) {
  Parsed p = Parse({"--worker-urls", "http://w:1"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.http_threads, 2);
  EXPECT_EQ(p.options.http_read_timeout, absl::Seconds(60));
  EXPECT_EQ(p.options.http_idle_timeout, absl::Seconds(60));
  EXPECT_EQ(p.options.http_max_connections, 10000);
  EXPECT_TRUE(p.options.tls_cert_file.empty());

  p = Parse({"--worker-urls", "http://w:1", "--http-threads", "3", "--http-read-timeout-secs", "5",
             "--http-idle-timeout-secs", "7", "--http-max-connections", "50", "--tls-cert-file",
             "/etc/tandem/cert.pem", "--tls-key-file", "/etc/tandem/key.pem"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.http_threads, 3);
  EXPECT_EQ(p.options.http_read_timeout, absl::Seconds(5));
  EXPECT_EQ(p.options.http_idle_timeout, absl::Seconds(7));
  EXPECT_EQ(p.options.http_max_connections, 50);
  EXPECT_EQ(p.options.tls_cert_file, "/etc/tandem/cert.pem");
  EXPECT_EQ(p.options.tls_key_file, "/etc/tandem/key.pem");
  EXPECT_TRUE(ValidateRouterOptions(&p.options).ok());

  for (const char* flag :
       {"--http-read-timeout-secs", "--http-idle-timeout-secs", "--http-max-connections"}) {
    Parsed bad = Parse({"--worker-urls", "http://w:1", flag, "0"});
    EXPECT_EQ(bad.exit_code, 2) << flag;
    EXPECT_NE(bad.error.find(flag), std::string::npos) << flag << ": " << bad.error;
  }
  EXPECT_EQ(Parse({"--http-threads", "0"}).exit_code, 2);
  EXPECT_EQ(Parse({"--http-threads", "257"}).exit_code, 2);

  for (const std::vector<std::string>& half :
       {std::vector<std::string>{"--worker-urls", "http://w:1", "--tls-cert-file", "c.pem"},
        std::vector<std::string>{"--worker-urls", "http://w:1", "--tls-key-file", "k.pem"}}) {
    Parsed one = Parse(half);
    ASSERT_FALSE(one.exit_code.has_value()) << one.error;
    absl::Status s = ValidateRouterOptions(&one.options);
    EXPECT_EQ(s.message(), "--tls-cert-file and --tls-key-file go together") << half[2];
  }
}

TEST(RouterOptionsTest, StallTimeoutDefaultsToThirtySecondsZeroDisablesNegativeIsAUsageError) {
  Parsed p = Parse({"--worker-urls", "http://w:1"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.stall_timeout, absl::Seconds(30));

  p = Parse({"--worker-urls", "http://w:1", "--stall-timeout-secs", "0"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.stall_timeout, absl::ZeroDuration());
  EXPECT_TRUE(ValidateRouterOptions(&p.options).ok());

  p = Parse({"--worker-urls", "http://w:1", "--stall-timeout-secs", "2"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.stall_timeout, absl::Seconds(2));

  Parsed bad = Parse({"--worker-urls", "http://w:1", "--stall-timeout-secs", "-1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.error.find("--stall-timeout-secs"), std::string::npos) << bad.error;
}

TEST(RouterOptionsTest, ConditionalDisaggregationIsOffByDefaultAndOnlyForPdMode) {
  const std::vector<std::string> pd = {
      "--pd-disaggregation", "--prefill", "http://p:1", "8998", "--decode", "http://d:1"};
  Parsed p = Parse(pd);
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_EQ(p.options.pd_local_prefill_max_tokens, 0);
  EXPECT_EQ(p.options.pd_prefill_saturation_tokens, 0);

  std::vector<std::string> args = pd;
  args.insert(args.end(),
              {"--pd-local-prefill-max-tokens", "256", "--pd-prefill-saturation-tokens", "4096"});
  p = Parse(args);
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  EXPECT_TRUE(ValidateRouterOptions(&p.options).ok());
  EXPECT_EQ(p.options.pd_local_prefill_max_tokens, 256);
  EXPECT_EQ(p.options.pd_prefill_saturation_tokens, 4096);

  p = Parse({"--worker-urls", "http://w:1", "--pd-local-prefill-max-tokens", "256"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.error;
  absl::Status s = ValidateRouterOptions(&p.options);
  EXPECT_NE(s.message().find("--pd-disaggregation"), std::string::npos) << s;
  EXPECT_EQ(Parse({"--pd-prefill-saturation-tokens", "-1"}).exit_code, 2);
}

TEST(RouterOptionsTest, BadFlagsExitWithTwo) {
  EXPECT_EQ(Parse({"--policy", "fastest"}).exit_code, 2);
  EXPECT_EQ(Parse({"--cache-threshold", "1.5"}).exit_code, 2);
  EXPECT_EQ(Parse({"--port", "http"}).exit_code, 2);
  EXPECT_EQ(Parse({"--no-such-flag"}).exit_code, 2);
}

}  // namespace
}  // namespace tandem::router
