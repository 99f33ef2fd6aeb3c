// The benchmarks in bench/ run end to end at a tiny size on the shipped model and write the JSON
// fields their reports promise (the figures issues and closing notes quote): present, finite,
// and in range. No speed is asserted here; the benchmarks themselves print ratios against
// baselines measured in the same run.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

using json = nlohmann::json;
using std::chrono::seconds;

const char kModel[] = "models/tandem-tiny-english";

// A fresh path for one benchmark's JSON output, removed when the test ends.
class JsonOut {
 public:
  explicit JsonOut(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               (name + "-" + std::to_string(::getpid()) + ".json"))
                  .string()) {
    std::filesystem::remove(path_);
  }
  ~JsonOut() { std::filesystem::remove(path_); }
  JsonOut(const JsonOut&) = delete;
  JsonOut& operator=(const JsonOut&) = delete;

  const std::string& path() const { return path_; }
  json Read() const {
    std::ifstream f(path_);
    return json::parse(f, nullptr, /*allow_exceptions=*/false);
  }

 private:
  std::string path_;
};

// The benchmark ran to a clean exit and wrote a JSON object.
json RunBench(const std::vector<std::string>& argv, const JsonOut& out, seconds timeout) {
  const RunResult run = RunToExit(argv, timeout);
  EXPECT_EQ(run.exit_code, 0) << argv[0] << (run.timed_out ? " timed out" : "") << "\n" << run.out;
  const json j = out.Read();
  EXPECT_TRUE(j.is_object()) << out.path() << " is not a JSON object\n" << run.out;
  return j.is_object() ? j : json::object();
}

// j[key] is a finite number in [lo, hi].
void ExpectNumber(const json& j, const std::string& key, double lo, double hi) {
  ASSERT_TRUE(j.contains(key)) << "missing " << key << " in " << j.dump();
  ASSERT_TRUE(j[key].is_number()) << key << " = " << j[key].dump();
  const double v = j[key].get<double>();
  EXPECT_TRUE(std::isfinite(v)) << key << " = " << v;
  EXPECT_GE(v, lo) << key;
  EXPECT_LE(v, hi) << key;
}

constexpr double kHuge = 1e12;

// engine_bench: the fields issue 3's "Done when" names, and the machine's limits beside them.
TEST(BenchSmokeItest, EngineBenchWritesDecodeAndPrefillBesideTheirBounds) {
  JsonOut out("engine_bench");
  const json j = RunBench({BinaryPath("engine_bench"), "--model-path", SourcePath(kModel),
                           "--threads", "1", "--context", "16", "--decode-steps", "2",
                           "--prefill-tokens", "64", "--repeats", "1", "--json", out.path()},
                          out, seconds(120));
  for (const char* key :
       {"decode_tok_s_b1", "decode_bound_tok_s_b1", "decode_tok_s_b8", "decode_tok_s_b32",
        "prefill_tok_s", "prefill_bound_tok_s", "read_bandwidth_gbs", "gemm_gflops"}) {
    ExpectNumber(j, key, 1e-9, kHuge);
  }
  // A ratio against a bound measured in the same run: positive and finite (the shipped model's
  // weights fit in cache, so its ratios say little about the machine; only their presence is
  // checked here).
  ExpectNumber(j, "decode_ratio_b1", 1e-6, 100);
  ExpectNumber(j, "prefill_ratio", 1e-6, 100);
  EXPECT_EQ(j.value("prefill_tokens", 0), 64);
  // The path's instruction peak is measured (CI needs AVX2, so it is never 0 there), and the
  // batch-32 cap it gives lies between 1 (a batch never loses) and 32.
  ExpectNumber(j, "path_peak_gflops", 1e-9, kHuge);
  ExpectNumber(j, "decode_b32_speedup_cap_path_peak", 1, 32);
}

// grammar_bench: per grammar the trie walk's and the cached mask's cost with the cache's hit
// rate, and the decode pair (plain and JSON-schema constrained) with its ratio and overhead.
TEST(BenchSmokeItest, GrammarBenchReportsMaskCostAndConstrainedDecode) {
  JsonOut out("grammar_bench");
  const json j = RunBench({BinaryPath("grammar_bench"), "--model-dir", SourcePath(kModel),
                           "--tokens", "8", "--decode-steps", "3", "--decode-repeats", "1",
                           "--decode-context", "4", "--threads", "1", "--json", out.path()},
                          out, seconds(120));
  ASSERT_TRUE(j.contains("grammars") && j["grammars"].is_array());
  EXPECT_EQ(j["grammars"].size(), 6u);
  for (const json& g : j["grammars"]) {
    SCOPED_TRACE(g.value("name", ""));
    for (const char* key : {"mask_us_mean", "mask_us_p99", "cached_mask_us_mean",
                            "cached_mask_us_p50", "cached_mask_us_p99", "compile_us_median"}) {
      ExpectNumber(g, key, 0, kHuge);
    }
    ExpectNumber(g, "cache_hit_rate", 0, 1);
  }
  ASSERT_TRUE(j.contains("decode") && j["decode"].is_object());
  const json& d = j["decode"];
  for (const char* key : {"tok_s_plain_median", "tok_s_constrained_median", "ratio_min",
                          "ratio_median", "ratio_max", "compile_us_median"}) {
    ExpectNumber(d, key, 1e-9, kHuge);
  }
  ExpectNumber(d, "mask_cache_hit_rate", 0, 1);
  ExpectNumber(d, "mask_overhead_us_per_token", -kHuge, kHuge);  // a difference of means
  EXPECT_EQ(d.value("steps", 0), 3);
}

// router_bench: tandem-router and nginx side by side, every request answered on both sides.
TEST(BenchSmokeItest, RouterBenchComparesTheRouterWithNginx) {
  if (!std::filesystem::exists("/usr/sbin/nginx")) {
    GTEST_SKIP() << "nginx is not installed (scripts/install-deps.sh installs nginx-light)";
  }
  JsonOut out("router_bench");
  const json j =
      RunBench({BinaryPath("router_bench"), "--requests", "200", "--concurrency", "4", "--rounds",
                "1", "--model-path", SourcePath(kModel), "--json", out.path()},
               out, seconds(180));
  for (const char* key : {"router_rps", "nginx_rps", "router_vs_nginx_rps"}) {
    ExpectNumber(j, key, 1e-9, kHuge);
  }
  // CPU time is read from /proc in clock ticks (10 ms): a run this short may read 0.
  for (const char* key : {"router_cpu_us_per_request", "nginx_cpu_us_per_request"}) {
    ExpectNumber(j, key, 0, kHuge);
  }
  ExpectNumber(j, "router_added_p99_ms", -kHuge, kHuge);  // a difference of percentiles
  EXPECT_EQ(j.value("router_errors", -1), 0);
  EXPECT_EQ(j.value("nginx_errors", -1), 0);
}

// serving_bench: the scheduler's throughput run and the shared-prefix run with the radix cache
// on and off. (Whether a group's later requests hit depends on whether they were admitted in
// the same step as the first, so only the rate's range is checked.)
TEST(BenchSmokeItest, ServingBenchRunsThroughputAndSharedPrefix) {
  JsonOut out("serving_bench");
  const json j = RunBench({BinaryPath("serving_bench"),
                           "--model-path",
                           SourcePath(kModel),
                           "--threads",
                           "1",
                           "--num-requests",
                           "8",
                           "--input-len",
                           "16",
                           "--output-len",
                           "8",
                           "--gsp-groups",
                           "2",
                           "--gsp-group-size",
                           "2",
                           "--gsp-prefix-len",
                           "32",
                           "--gsp-suffix-len",
                           "8",
                           "--gsp-output-len",
                           "4",
                           "--json",
                           out.path()},
                          out, seconds(120));
  ExpectNumber(j, "serving_output_tok_s", 1e-9, kHuge);
  ExpectNumber(j, "decode_b1_tok_s", 1e-9, kHuge);
  ExpectNumber(j, "ttft_ratio_radix_on_vs_off", 1e-9, kHuge);
  ExpectNumber(j, "shared_prefix_hit_rate", 0, 1);
  EXPECT_EQ(j.value("serving_failed", -1), 0);
}

// pd_handoff_bench: a prefill handed to a decode engine over the transfer engine, beside the
// colocated TTFT.
TEST(BenchSmokeItest, PdHandoffBenchSplitsTtftIntoComputeAndTransfer) {
  JsonOut out("pd_handoff_bench");
  const json j =
      RunBench({BinaryPath("pd_handoff_bench"), "--model-path", SourcePath(kModel), "--prompt-len",
                "32", "--threads", "1", "--repeats", "1", "--json", out.path()},
               out, seconds(120));
  for (const char* key : {"colocated_ttft_s", "pd_ttft_s", "prefill_compute_s", "transfer_s"}) {
    ExpectNumber(j, key, 1e-12, 600);
  }
  ExpectNumber(j, "transfer_share_of_ttft", 0, 1);
  EXPECT_EQ(j.value("prompt_len", 0), 32);
}

}  // namespace
}  // namespace tandem::itest
