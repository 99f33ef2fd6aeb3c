// serving_bench: the serving engine (continuous batching + radix cache) on one model, in process.
//
//   serving_bench --model-path /tmp/qwen05 --threads 2 --json serving.json
//
// Part 1, throughput: N requests of random P-token prompts and O output tokens submitted at once
// (ignore_eos), reported as output tok/s beside the batch-1 decode rate of one such request
// measured in the same run: serving_speedup_vs_b1 = serving_output_tok_s / decode_b1_tok_s.
// Part 2, shared prefixes: G groups x S requests whose prompts share a G-specific prefix of L
// tokens plus a random suffix, submitted at once, run with the radix cache on and then off;
// reports the cache hit rate (prompt tokens served from cache / prompt tokens) and the mean TTFT
// ratio on / off.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "CLI/CLI.hpp"
#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_path;
  int threads = 2;
  int num_requests = 64;
  int input_len = 128;
  int output_len = 64;
  int groups = 16;
  int group_size = 8;
  int prefix_len = 512;
  int suffix_len = 32;
  int gsp_output_len = 8;
  std::string kv_cache_memory = "2GiB";
  int chunked_prefill_size = 512;
  int max_prefill_tokens = 2048;
  bool skip_throughput = false;
  bool skip_shared_prefix = false;
  uint32_t seed = 1;
  std::string json_path;
};

struct RunResult {
  double seconds = 0;
  int64_t output_tokens = 0;
  double mean_ttft = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int failed = 0;
};

// Submits every prompt at once and waits for all; TTFT per request from submit to first token.
RunResult RunBatch(Engine* engine, const std::vector<std::vector<int32_t>>& prompts,
                   int output_len) {
  struct State {
    std::mutex mu;
    std::vector<Clock::time_point> first;
    int64_t tokens = 0, prompt = 0, cached = 0;
    int failed = 0;
  } st;
  st.first.resize(prompts.size());
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.rid = "b" + std::to_string(i);
    r.input_ids = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = output_len;
    r.sampling.ignore_eos = true;
    r.callbacks.on_output = [&st, i](const RequestOutput& out) {
      std::lock_guard<std::mutex> lock(st.mu);
      if (!out.token_ids.empty() && st.first[i] == Clock::time_point()) st.first[i] = Clock::now();
      st.tokens += static_cast<int64_t>(out.token_ids.size());
      if (out.last) {
        st.prompt += out.prompt_tokens;
        st.cached += out.cached_tokens;
        if (out.finish && out.finish->kind == FinishReason::Kind::kAbort) ++st.failed;
      }
    };
    if (absl::Status s = engine->Submit(std::move(r)); !s.ok()) {
      std::fprintf(stderr, "submit failed: %s\n", std::string(s.message()).c_str());
      ++st.failed;
    }
  }
  engine->WaitIdle(24 * 3600);
  RunResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(st.mu);
  r.output_tokens = st.tokens;
  double ttft = 0;
  for (const auto& f : st.first) ttft += std::chrono::duration<double>(f - t0).count();
  r.mean_ttft = ttft / static_cast<double>(prompts.size());
  r.prompt_tokens = st.prompt;
  r.cached_tokens = st.cached;
  r.failed = st.failed;
  return r;
}

std::vector<int32_t> Random(std::mt19937* rng, int n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(*rng);
  return v;
}

std::unique_ptr<Engine> MakeEngine(const Options& o, bool radix, int max_running) {
  ServingOptions so;
  so.model_path = o.model_path;
  so.threads = o.threads;
  so.kv_cache_memory = o.kv_cache_memory;
  so.chunked_prefill_size = o.chunked_prefill_size;
  so.max_prefill_tokens = o.max_prefill_tokens;
  so.max_running_requests = max_running;
  so.max_queued_requests = 4096;
  so.disable_radix_cache = !radix;
  auto e = Engine::Create(so);
  if (!e.ok()) {
    std::fprintf(stderr, "serving_bench: %s\n", std::string(e.status().message()).c_str());
    std::exit(2);
  }
  return std::move(*e);
}

int Run(const Options& o) {
  nlohmann::json j;
  j["model_path"] = o.model_path;
  j["threads"] = o.threads;
  std::mt19937 rng(o.seed);
  if (!o.skip_throughput) {
    auto engine = MakeEngine(o, /*radix=*/false, std::max(1, o.num_requests));
    const int32_t vocab = static_cast<int32_t>(
        std::min<int64_t>(engine->model_config().vocab_size, engine->tokenizer().vocab_size()));
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < o.num_requests; ++i) prompts.push_back(Random(&rng, o.input_len, vocab));
    // Batch 1: one request alone; decode rate = tokens after the first / time after the first.
    RunBatch(engine.get(), {prompts[0]}, 2);  // warm-up (page in the weights)
    const RunResult one = RunBatch(engine.get(), {prompts[0]}, o.output_len);
    const double b1 = static_cast<double>(one.output_tokens - 1) / (one.seconds - one.mean_ttft);
    const RunResult all = RunBatch(engine.get(), prompts, o.output_len);
    const double tok_s = static_cast<double>(all.output_tokens) / all.seconds;
    std::printf("throughput: %d requests x %d prompt / %d output tokens\n", o.num_requests,
                o.input_len, o.output_len);
    std::printf("  batch-1 decode         %8.2f tok/s\n", b1);
    std::printf("  serving output         %8.2f tok/s  (%.2fx batch 1; %.1f s, %d failed)\n", tok_s,
                tok_s / b1, all.seconds, all.failed);
    j["decode_b1_tok_s"] = b1;
    j["serving_output_tok_s"] = tok_s;
    j["serving_speedup_vs_b1"] = tok_s / b1;
    j["serving_seconds"] = all.seconds;
    j["serving_failed"] = all.failed;
  }
  if (!o.skip_shared_prefix) {
    std::vector<std::vector<int32_t>> prompts;
    int32_t vocab = 0;
    {
      auto probe = MakeEngine(o, true, 1);
      vocab = static_cast<int32_t>(
          std::min<int64_t>(probe->model_config().vocab_size, probe->tokenizer().vocab_size()));
    }
    std::vector<std::vector<int32_t>> prefixes;
    for (int g = 0; g < o.groups; ++g) prefixes.push_back(Random(&rng, o.prefix_len, vocab));
    // Interleaved as a real mix of tenants would arrive: request s of every group, then s+1.
    for (int s = 0; s < o.group_size; ++s) {
      for (int g = 0; g < o.groups; ++g) {
        std::vector<int32_t> p = prefixes[static_cast<size_t>(g)];
        auto suffix = Random(&rng, o.suffix_len, vocab);
        p.insert(p.end(), suffix.begin(), suffix.end());
        prompts.push_back(std::move(p));
      }
    }
    RunResult on, off;
    for (bool radix : {true, false}) {
      auto engine = MakeEngine(o, radix, 256);
      RunBatch(engine.get(), {Random(&rng, 8, vocab)}, 2);  // warm-up
      (radix ? on : off) = RunBatch(engine.get(), prompts, o.gsp_output_len);
    }
    const double hit = on.prompt_tokens ? static_cast<double>(on.cached_tokens) /
                                              static_cast<double>(on.prompt_tokens)
                                        : 0.0;
    std::printf("shared prefix: %d groups x %d requests, %d-token prefix + %d, %d output tokens\n",
                o.groups, o.group_size, o.prefix_len, o.suffix_len, o.gsp_output_len);
    std::printf("  radix on : mean TTFT %7.2f s, total %7.1f s, cache hit rate %.3f\n",
                on.mean_ttft, on.seconds, hit);
    std::printf("  radix off: mean TTFT %7.2f s, total %7.1f s\n", off.mean_ttft, off.seconds);
    std::printf("  TTFT ratio on/off %.3f\n", on.mean_ttft / off.mean_ttft);
    j["shared_prefix_hit_rate"] = hit;
    j["ttft_mean_radix_on_s"] = on.mean_ttft;
    j["ttft_mean_radix_off_s"] = off.mean_ttft;
    j["ttft_ratio_radix_on_vs_off"] = on.mean_ttft / off.mean_ttft;
    j["shared_prefix_seconds_on"] = on.seconds;
    j["shared_prefix_seconds_off"] = off.seconds;
  }
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "serving_bench: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem::engine

int main(int argc, char** argv) {
  tandem::engine::Options o;
  CLI::App app{"Serving engine benchmark: continuous batching and the radix prefix cache"};
  app.add_option("--model-path", o.model_path, "Hugging Face model directory")->required();
  app.add_option("--threads", o.threads, "compute threads")->check(CLI::Range(1, 256));
  app.add_option("--num-requests", o.num_requests, "throughput run: requests")
      ->check(CLI::Range(1, 100000));
  app.add_option("--input-len", o.input_len, "throughput run: prompt tokens")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-len", o.output_len, "throughput run: output tokens")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--gsp-groups", o.groups, "shared-prefix run: groups")->check(CLI::Range(1, 4096));
  app.add_option("--gsp-group-size", o.group_size, "shared-prefix run: requests per group")
      ->check(CLI::Range(1, 4096));
  app.add_option("--gsp-prefix-len", o.prefix_len, "shared-prefix run: shared prefix tokens")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--gsp-suffix-len", o.suffix_len, "shared-prefix run: per-request suffix tokens")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--gsp-output-len", o.gsp_output_len, "shared-prefix run: output tokens")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "KV cache memory (bytes, unit, fraction)");
  app.add_option("--chunked-prefill-size", o.chunked_prefill_size, "prefill chunk tokens");
  app.add_option("--max-prefill-tokens", o.max_prefill_tokens, "prefill tokens per step");
  app.add_flag("--skip-throughput", o.skip_throughput, "skip the throughput run");
  app.add_flag("--skip-shared-prefix", o.skip_shared_prefix, "skip the shared-prefix run");
  app.add_option("--seed", o.seed, "prompt generator seed");
  app.add_option("--json", o.json_path, "write the figures to this JSON file");
  CLI11_PARSE(app, argc, argv);
  return tandem::engine::Run(o);
}
