// engine_bench: the model core's decode and prefill speed beside this machine's limits, all
// measured in one run (docs/hosts.md "Measuring on shared hosts").
//
//   engine_bench --model-path /tmp/qwen05 --threads 2 --json out.json
//
// `--gemm own|onednn` picks the bf16 GEMM backend of the runs (TANDEM_GEMM, matmul.h "GEMM
// backends"); the first line and the JSON (gemm_backend, gemm_backend_impl, amx_bf16) say which
// one ran and on what (the own kernels' SIMD level, or oneDNN's implementation, e.g.
// brg:avx512_core_bf16 or brg:avx512_core_amx_bf16).
//
// Limits measured first: DRAM read bandwidth (bench/probe) and oneDNN's bf16 GEMM rate at the
// prefill shape [prompt, hidden] x [hidden, intermediate]. Then:
//   decode, batch B in {1, 8, 32}: B sequences with a `--context`-token prompt each (prefilled,
//     untimed), then `--decode-steps` batched decode steps, timed; tok/s = B * steps / time.
//   prefill: one `--prefill-tokens` prompt in one forward pass (logits of the last token); best of
//     `--repeats`.
// Bounds:
//   decode_bound_tok_s_b1 = bandwidth / (weight bytes read per step + KV bytes read per step at
//     the mean context of the timed steps + one embedding row), where bandwidth is a plain read
//     of the model's own weight buffer (bench::StreamRead) after every batch-1 repetition, in
//     blocks of `--decode-steps` passes (one block front to back, one as side-by-side runs) each
//     timed whole, the best block kept: the statistic of the decode figure (the best repetition
//     of `--decode-steps` steps), the same bytes from the same memory, interleaved in time with
//     the decode it bounds, so a shared host's swings hit both alike. The probe's figure (best
//     64 MiB pass, measured first) is reported beside it (decode_bound_probe_tok_s_b1,
//     decode_ratio_b1_probe).
//   decode_bB_speedup_cap = the most batch B can gain over batch 1 on this machine: B x (batch-1
//     bound step time) / (batch-B bound step time), a bound step time being the larger of reading
//     the weights and the B sequences' KV once (at the bandwidth of decode_bound_tok_s_b1) and
//     doing B tokens' FLOPs at the GEMM rate. Multiply-adds per weight byte grow with B, so past B
//     ~ GEMM rate / bandwidth (FLOP/s per B/s of bf16 weights) a step is compute-bound and the
//     speedup saturates near that ratio. Also given at the path peak
//     (decode_bB_speedup_cap_path_peak): the rate of the instruction every multiply-add of our
//     kernels is (vdpbf16ps on the AVX-512-BF16 path, an fp32 FMA elsewhere), which no kernel of
//     ours can pass.
//   decode_int8_bound_tok_s_b1 = the same bound for the model with --quantization w8a8 (int8
//     linear layers, bf16 embedding and lm_head): its own bytes per step over a plain read of its
//     own weight buffer after every int8 batch-1 repetition (decode_int8_ratio_b1 against it).
//     prefill_int8_tok_s: the int8 prefill (no bound: no oneDNN int8 GEMM is measured).
//   Mixture-of-experts models (qwen3_moe): a token reads only its num_experts_per_tok experts of
//     each sparse layer, so the batch-1 bound counts the active weights (attention, routers, top-k
//     experts, lm_head: Weights::active_matrix_bytes_per_token) and batch B the experts its steps
//     did run per layer (ForwardProfile::moe_expert_runs; uniform routing would touch
//     E (1 - (1 - k / E)^B) of E); FLOPs per token count the active weights only.
//   prefill_bound_tok_s = GEMM rate / FLOPs per prompt token, the GEMM rate being the best of
//     the first measurement and one after every prefill repetition, where FLOPs per token =
//     2 x (linear-layer weights) + attention (4 x layers x heads x head_dim x mean context) +
//     2 x lm_head / prompt length (the lm_head runs for the last token only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/probe/probe.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_int8.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
using engine::BlockPool;
using engine::BlockTable;
using engine::SequenceInput;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Where the time of the profiled Forward calls went, as shares of their total.
nlohmann::json PrintProfile(const char* label, const engine::ForwardProfile& p) {
  const double t = p.total() > 0 ? p.total() : 1;
  const std::pair<const char*, double> parts[] = {{"qkv_proj", p.qkv_proj},
                                                  {"rope_kv", p.rope_kv},
                                                  {"attention", p.attention},
                                                  {"o_proj", p.o_proj},
                                                  {"mlp_gate_up", p.mlp_gate_up},
                                                  {"mlp_act", p.mlp_act},
                                                  {"mlp_down", p.mlp_down},
                                                  {"moe", p.moe},
                                                  {"norms", p.norms},
                                                  {"lm_head", p.lm_head}};
  nlohmann::json j;
  std::printf("  %s time split:", label);
  for (const auto& [name, v] : parts) {
    std::printf(" %s %.1f%%", name, 100 * v / t);
    j[name] = v / t;
  }
  std::printf("\n");
  return j;
}

struct Bench {
  engine::Model* model;
  int64_t vocab;

  // Returns decode tok/s for `batch` sequences of `context` prompt tokens and `steps` steps.
  // `between`, when set, runs after every timed repetition (untimed), so a baseline measured
  // there is interleaved with the runs it is compared with.
  double Decode(int batch, int64_t context, int steps, int repeats,
                const std::function<void()>& between = {}) {
    const int64_t per_seq = context + steps;
    const int32_t blocks_per_seq = static_cast<int32_t>((per_seq + 15) / 16);
    BlockPool pool(blocks_per_seq * batch, 16);
    auto kv = model->CreateKvCache(pool.num_blocks(), 16);
    if (!kv.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", std::string(kv.status().message()).c_str());
      std::exit(1);
    }
    std::vector<BlockTable> tables(static_cast<size_t>(batch));
    std::vector<BlockPool::AppendRequest> reqs;
    for (auto& t : tables) reqs.push_back({&t, per_seq});
    if (!pool.Commit(*pool.PlanAppend(reqs)).ok()) std::exit(1);
    // Prefill one prompt (untimed) and copy its KV blocks to the other sequences: every sequence
    // then reads its own `context` positions of KV, as after its own prefill, without spending
    // minutes prefilling batch x context tokens on a shared machine.
    const auto prompt = RandomTokens(context, vocab, 100);
    auto r = model->Forward({{prompt, 0, tables[0].block_ids, false}}, kv->get());
    if (!r.ok()) std::exit(1);
    engine::KvCacheStorage& cache = **kv;
    for (int b = 1; b < batch; ++b) {
      for (int64_t l = 0; l < cache.num_layers(); ++l) {
        for (size_t i = 0; i < tables[0].block_ids.size(); ++i) {
          std::memcpy(cache.K(l, tables[b].block_ids[i], 0), cache.K(l, tables[0].block_ids[i], 0),
                      static_cast<size_t>(cache.block_bytes()));
        }
      }
    }
    double best = 0;
    model->ResetProfile();
    // Each sequence decodes its own tokens: with a mixture of experts, equal tokens (and the equal
    // KV copied above) would route every row of a step to the same experts.
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) next[b] = static_cast<int32_t>((1 + 977 * b) % vocab);
    for (int rep = 0; rep < repeats; ++rep) {
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) {
        std::vector<SequenceInput> in;
        for (int b = 0; b < batch; ++b) {
          in.push_back(
              {std::span<const int32_t>(&next[b], 1), context + s, tables[b].block_ids, true});
        }
        auto r = model->Forward(in, kv->get());
        if (!r.ok()) std::exit(1);
        for (int b = 0; b < batch; ++b) next[b] = static_cast<int32_t>((next[b] * 31 + s) % vocab);
      }
      const double tps = batch * steps / Seconds(t0, Clock::now());
      best = std::max(best, tps);
      if (between) between();
    }
    return best;
  }

  double Prefill(int64_t tokens, int repeats, const std::function<void()>& between = {}) {
    const int32_t blocks = static_cast<int32_t>((tokens + 15) / 16);
    BlockPool pool(blocks, 16);
    auto kv = model->CreateKvCache(blocks, 16);
    if (!kv.ok()) std::exit(1);
    BlockTable t;
    if (!pool.Commit(*pool.PlanAppend({{&t, tokens}})).ok()) std::exit(1);
    const auto prompt = RandomTokens(tokens, vocab, 7);
    double best = 0;
    model->ResetProfile();
    for (int rep = 0; rep < repeats; ++rep) {
      const auto t0 = Clock::now();
      auto r = model->Forward({{prompt, 0, t.block_ids, true}}, kv->get());
      if (!r.ok()) std::exit(1);
      best = std::max(best, tokens / Seconds(t0, Clock::now()));
      if (between) between();
    }
    return best;
  }
};

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  using namespace tandem;
  CLI::App app("engine_bench: model-core decode/prefill speed against the machine's limits");
  std::string model_path, json_path;
  int threads = 2, steps = 16, repeats = 2;
  int64_t context = 256, prefill_tokens = 1024;
  std::vector<int> batches = {1, 8, 32};
  app.add_option("--model-path", model_path, "Hugging Face model directory")->required();
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1, 256));
  app.add_option("--batches", batches, "decode batch sizes (the first is the baseline)");
  app.add_option("--json", json_path, "write the results as JSON here");
  app.add_option("--context", context, "prompt tokens per sequence before timed decode steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--decode-steps", steps, "timed decode steps")->check(CLI::Range(1, 100000));
  app.add_option("--prefill-tokens", prefill_tokens, "prompt length of the prefill run")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--repeats", repeats, "timed repetitions (best is kept)")
      ->check(CLI::Range(1, 100));
  bool skip_int8 = false;
  std::string int8_model_path;
  app.add_flag("--skip-int8", skip_int8, "do not run the W8A8 int8 decode and prefill");
  app.add_option("--int8-model-path", int8_model_path,
                 "int8 checkpoint for the int8 runs (default: --model-path quantized at load)");
  std::string gemm_backend;
  app.add_option("--gemm", gemm_backend,
                 "bf16 GEMM backend: own or onednn (sets TANDEM_GEMM; default: the environment's)")
      ->check(CLI::IsMember({"own", "onednn"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Before anything asks for the backend (it is decided once per process).
  if (!gemm_backend.empty()) ::setenv("TANDEM_GEMM", gemm_backend.c_str(), 1);
  bench::SetOpenBlasCoreTypeAndReexec(argv);  // before any BLAS call (probe.h explains)
  auto model = engine::Model::Load(model_path, {threads, /*profile=*/true});
  if (!model.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  const engine::ModelConfig c = (*model)->config();  // a copy: the model is freed before int8
  std::printf(
      "model %s: %lld layers, hidden %lld, heads %lld/%lld, intermediate %lld, vocab %lld; "
      "SIMD %s; bf16 GEMM %s; %d threads\n",
      c.model_type.c_str(), (long long)c.num_layers, (long long)c.hidden_size,
      (long long)c.num_heads, (long long)c.num_kv_heads, (long long)c.intermediate_size,
      (long long)c.vocab_size, engine::SimdLevelName(engine::DetectSimd()),
      engine::GemmBackendDescription().c_str(), threads);
  if (c.moe.num_experts > 0) {
    std::printf("mixture of experts: %lld experts, top %lld, expert intermediate %lld\n",
                (long long)c.moe.num_experts, (long long)c.moe.num_experts_per_tok,
                (long long)c.moe.moe_intermediate_size);
  }

  std::string gemm_impl;
  const double bandwidth = bench::MeasureReadBandwidthGBs(threads);
  double gemm = bench::MeasureBf16GemmGflops(threads, prefill_tokens, c.intermediate_size,
                                             c.hidden_size, &gemm_impl);
  std::string gemm_source = "oneDNN bf16 matmul";
  if (gemm <= 0) {
    // Without AVX-512 (no native bf16 and no oneDNN bf16 kernel), bf16 operands are widened to
    // fp32 and multiplied with fp32 FMAs: the fp32 GEMM rate is then this machine's ceiling.
    std::string core;
    gemm = bench::MeasureFp32GemmGflops(threads, prefill_tokens, c.intermediate_size, c.hidden_size,
                                        &core);
    gemm_source = "OpenBLAS fp32 sgemm (no oneDNN bf16 kernel on this CPU)";
    gemm_impl = core;
  }
  // The rate of the instruction our kernels' multiply-adds are (a register-only loop, hardly
  // disturbed by other load): no kernel of ours can pass it.
  const double path_peak = bench::MeasurePathPeakGflops(threads);
  std::printf("machine: read bandwidth %.1f GB/s, GEMM %.1f GFLOP/s [%s, %s], path peak %.1f\n",
              bandwidth, gemm, gemm_source.c_str(), gemm_impl.c_str(), path_peak);
  // Decode streams the weights every step: how many of them the kernel gave huge pages matters.
  const engine::Weights& weights = (*model)->weights();
  std::printf("weights: %.1f MB resident, %.1f MB in huge pages\n", weights.resident_bytes() / 1e6,
              weights.huge_page_bytes() / 1e6);

  Bench bench{model->get(), c.vocab_size};
  nlohmann::json out;
  out["model_path"] = model_path;
  out["threads"] = threads;
  out["simd"] = engine::SimdLevelName(engine::DetectSimd());
  out["gemm_backend"] = engine::GemmBackendName(engine::SelectedGemmBackend());
  out["gemm_backend_impl"] = engine::GemmBackendDescription();
  out["amx_bf16"] = engine::CpuHasAmxBf16();
  out["read_bandwidth_gbs"] = bandwidth;
  out["gemm_gflops"] = gemm;
  out["gemm_source"] = gemm_source;
  out["gemm_impl"] = gemm_impl;
  out["path_peak_gflops"] = path_peak;
  out["decode_context"] = context;
  out["weights_resident_bytes"] = weights.resident_bytes();
  out["weights_huge_page_bytes"] = weights.huge_page_bytes();

  // Decode bound at batch 1.
  const double mean_ctx = context + (steps - 1) / 2.0 + 1;
  const double kv_bytes = 2.0 * c.num_layers * c.kv_dim() * 2 * mean_ctx;
  const double weight_bytes =
      static_cast<double>((*model)->weights().active_matrix_bytes_per_token()) +
      2.0 * c.hidden_size;
  // Mixture of experts: the bytes of the experts a batch-1 step does not read, and the weight bytes
  // of a step that ran `touched` experts per sparse layer on average (== weight_bytes for a dense
  // model).
  const double idle_expert_bytes =
      static_cast<double>((*model)->weights().matrix_bytes_per_step() -
                          (*model)->weights().active_matrix_bytes_per_token());
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
  auto step_weight_bytes = [&](double touched) {
    if (moe_layers == 0 || c.moe.num_experts == c.moe.num_experts_per_tok) return weight_bytes;
    const double e = static_cast<double>(c.moe.num_experts);
    const double k = static_cast<double>(c.moe.num_experts_per_tok);
    return weight_bytes + idle_expert_bytes * (touched - k) / (e - k);
  };
  // Experts the profiled steps ran per sparse layer, on average.
  auto touched_experts = [&](const engine::ForwardProfile& p) {
    return moe_layers == 0 || p.calls == 0
               ? 0.0
               : static_cast<double>(p.moe_expert_runs) / static_cast<double>(p.calls * moe_layers);
  };
  const double decode_bound_probe = bandwidth * 1e9 / (weight_bytes + kv_bytes);
  out["decode_bytes_per_step_b1"] = weight_bytes + kv_bytes;
  out["moe_experts"] = c.moe.num_experts;
  out["moe_experts_per_tok"] = c.moe.num_experts_per_tok;
  out["decode_bound_probe_tok_s_b1"] = decode_bound_probe;
  // A plain read of the weight buffer on `threads` threads (each its contiguous share, as the
  // matmuls split their rows) after every batch-1 repetition: a block of `steps` passes read
  // front to back, then one read as side-by-side runs, each timed whole as a repetition of
  // `steps` decode steps is; the best block's time per pass is kept, as the best repetition is.
  // The same for any model's weights (the int8 run below reads its own buffer).
  auto weights_reader = [&](const engine::Weights& w, double* best_s) {
    return [&w, best_s, threads, steps] {
      const int64_t share = w.resident_bytes() / threads / 4096 * 4096;
      for (const int runs : {1, bench::kReadRuns}) {
        auto read_share = [&](int t) {
          const int64_t begin = t * share;
          const int64_t len = t + 1 < threads ? share : w.resident_bytes() - begin;
          for (int i = 0; i < steps; ++i) bench::StreamRead(w.matrix_data() + begin, len, runs);
        };
        const auto t0 = Clock::now();
        std::vector<std::thread> readers;
        for (int t = 1; t < threads; ++t) readers.emplace_back(read_share, t);
        read_share(0);
        for (auto& r : readers) r.join();
        *best_s = std::min(*best_s, Seconds(t0, Clock::now()) / steps);
      }
    };
  };
  double best_read_s = 1e30;
  const std::function<void()> read_weights = weights_reader(weights, &best_read_s);

  // FLOPs of one decode token: every matrix it reads (lm_head included; with mixture of experts
  // the active ones) plus attention over the context.
  const double decode_flops_per_token =
      2.0 * (static_cast<double>((*model)->weights().active_matrix_bytes_per_token()) / 2.0) +
      4.0 * c.num_layers * c.num_heads * c.head_dim * mean_ctx;
  out["decode_flops_per_token"] = decode_flops_per_token;
  // At `gbs`, the bandwidth the batch-1 figure is held to.
  // `touched`: experts a batch-b step runs per sparse layer.
  auto speedup_cap = [&](int b, double touched, double gflops, double gbs) {
    const double t1 =
        std::max((weight_bytes + kv_bytes) / (gbs * 1e9), decode_flops_per_token / (gflops * 1e9));
    const double tb = std::max((step_weight_bytes(touched) + b * kv_bytes) / (gbs * 1e9),
                               b * decode_flops_per_token / (gflops * 1e9));
    return b * t1 / tb;
  };

  std::printf("\n%-22s %12s %12s %8s\n", "run", "tok/s", "bound", "ratio");
  double b1 = 0;
  double b1_gbs = bandwidth;  // the between-runs read rate, once batch 1 has run
  for (int b : batches) {
    const bool baseline = b1 == 0;  // the first batch size is the baseline (1 by default)
    const double tps = bench.Decode(b, context, steps, repeats,
                                    baseline ? std::function<void()>(read_weights) : nullptr);
    out["decode_tok_s_b" + std::to_string(b)] = tps;
    if (baseline) {
      b1 = tps;
      const double same_bytes_gbs = weights.resident_bytes() / best_read_s / 1e9;
      b1_gbs = same_bytes_gbs;
      const double decode_bound = same_bytes_gbs * 1e9 / (weight_bytes + kv_bytes);
      out["weights_read_gb_s"] = same_bytes_gbs;
      out["decode_bound_tok_s_b1"] = decode_bound;
      out["decode_ratio_b1"] = tps / decode_bound;
      out["decode_ratio_b1_probe"] = tps / decode_bound_probe;
      std::printf(
          "%-22s %12.1f %12.1f %8.3f   (weights read at %.1f GB/s between the runs; "
          "against the probe's %.1f GB/s: bound %.1f, ratio %.3f)\n",
          ("decode batch " + std::to_string(b)).c_str(), tps, decode_bound, tps / decode_bound,
          same_bytes_gbs, bandwidth, decode_bound_probe, tps / decode_bound_probe);
      out["profile_decode_b1"] = PrintProfile("decode b1", (*model)->profile());
    } else {
      const double touched = touched_experts((*model)->profile());
      const double cap = speedup_cap(b, touched, gemm, b1_gbs);
      const double cap_peak = speedup_cap(b, touched, path_peak, b1_gbs);
      if (moe_layers > 0) {
        std::printf("  decode b%d ran %.1f of %lld experts per sparse layer and step\n", b, touched,
                    (long long)c.moe.num_experts);
        out["decode_b" + std::to_string(b) + "_moe_experts_run"] = touched;
      }
      std::printf(
          "%-22s %12.1f %12s %8s   (%.2fx batch 1; cap on this machine %.2fx at the GEMM rate, "
          "%.2fx at the path peak; %.1f GFLOP/s)\n",
          ("decode batch " + std::to_string(b)).c_str(), tps, "", "", tps / b1, cap, cap_peak,
          tps * decode_flops_per_token / 1e9);
      out["decode_speedup_b" + std::to_string(b)] = tps / b1;
      out["decode_b" + std::to_string(b) + "_speedup_cap"] = cap;
      out["decode_b" + std::to_string(b) + "_speedup_cap_path_peak"] = cap_peak;
      out["decode_b" + std::to_string(b) + "_gflops"] = tps * decode_flops_per_token / 1e9;
      out["profile_decode_b" + std::to_string(b)] =
          PrintProfile(("decode b" + std::to_string(b)).c_str(), (*model)->profile());
    }
  }

  // Multiply-adds per prompt token of the linear layers (with mixture of experts: the router and
  // the token's k experts).
  double linear_params = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    linear_params +=
        c.hidden_size * (2.0 * c.q_dim() + 2.0 * c.kv_dim()) +
        (c.IsMoeLayer(l)
             ? c.hidden_size * (static_cast<double>(c.moe.num_experts) +
                                3.0 * c.moe.num_experts_per_tok * c.moe.moe_intermediate_size)
             : 3.0 * c.hidden_size * c.intermediate_size);
  }
  const double attn_flops =
      4.0 * c.num_layers * c.num_heads * c.head_dim * (prefill_tokens + 1) / 2.0;
  const double flops_per_token =
      2.0 * linear_params + attn_flops + 2.0 * c.vocab_size * c.hidden_size / prefill_tokens;
  double best_gemm = gemm;
  const double prefill = bench.Prefill(prefill_tokens, repeats, [&] {
    best_gemm = std::max(
        best_gemm,
        bench::MeasureBf16GemmGflops(threads, prefill_tokens, c.intermediate_size, c.hidden_size));
  });
  const double prefill_bound = best_gemm * 1e9 / flops_per_token;
  std::printf("%-22s %12.1f %12.1f %8.3f   (%.1f GFLOP/s)\n",
              ("prefill " + std::to_string(prefill_tokens)).c_str(), prefill, prefill_bound,
              prefill / prefill_bound, prefill * flops_per_token / 1e9);
  out["profile_prefill"] = PrintProfile("prefill", (*model)->profile());
  out["prefill_tokens"] = prefill_tokens;
  out["prefill_flops_per_token"] = flops_per_token;
  out["prefill_tok_s"] = prefill;
  out["prefill_bound_tok_s"] = prefill_bound;
  out["prefill_ratio"] = prefill / prefill_bound;
  out["prefill_gemm_gflops"] = best_gemm;
  out["prefill_gflops"] = prefill * flops_per_token / 1e9;

  if (!skip_int8) {
    // W8A8 int8: the same model with its linear layers quantized at load (or --int8-model-path,
    // an int8 checkpoint), decode batch 1 against the read bound of its own weight buffer
    // (int8 matrices, bf16 embedding and lm_head), measured the same way, and prefill.
    model->reset();  // one model resident at a time
    const std::string path8 = int8_model_path.empty() ? model_path : int8_model_path;
    auto model8 =
        engine::Model::Load(path8, {threads, /*profile=*/true, engine::Quantization::kW8A8});
    if (!model8.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", std::string(model8.status().message()).c_str());
      return 2;
    }
    const engine::Weights& w8 = (*model8)->weights();
    std::printf("int8 weights: %.1f MB resident, %.1f MB in huge pages\n",
                w8.resident_bytes() / 1e6, w8.huge_page_bytes() / 1e6);
    out["int8_weights_huge_page_bytes"] = w8.huge_page_bytes();
    Bench bench8{model8->get(), c.vocab_size};
    double best_read8_s = 1e30;
    const double tps8 =
        bench8.Decode(1, context, steps, repeats, weights_reader(w8, &best_read8_s));
    const double bytes8 =
        static_cast<double>(w8.active_matrix_bytes_per_token()) + 2.0 * c.hidden_size;
    const double gbs8 = w8.resident_bytes() / best_read8_s / 1e9;
    const double bound8 = gbs8 * 1e9 / (bytes8 + kv_bytes);
    std::printf(
        "%-22s %12.1f %12.1f %8.3f   (int8 path %s; weights read at %.1f GB/s between the runs; "
        "%.2fx bf16 batch 1)\n",
        "decode int8 batch 1", tps8, bound8, tps8 / bound8,
        engine::Int8PathName(engine::DetectInt8Path()), gbs8, tps8 / b1);
    out["profile_decode_int8_b1"] = PrintProfile("decode int8 b1", (*model8)->profile());
    const double prefill8 = bench8.Prefill(prefill_tokens, repeats);
    std::printf("%-22s %12.1f %12s %8s   (%.2fx bf16 prefill)\n",
                ("prefill int8 " + std::to_string(prefill_tokens)).c_str(), prefill8, "", "",
                prefill8 / prefill);
    out["profile_prefill_int8"] = PrintProfile("prefill int8", (*model8)->profile());
    out["simd_int8"] = engine::Int8PathName(engine::DetectInt8Path());
    out["int8_model_path"] = path8;
    out["decode_int8_bytes_per_step_b1"] = bytes8 + kv_bytes;
    out["decode_int8_weights_read_gb_s"] = gbs8;
    out["decode_int8_tok_s_b1"] = tps8;
    out["decode_int8_bound_tok_s_b1"] = bound8;
    out["decode_int8_ratio_b1"] = tps8 / bound8;
    out["decode_int8_speedup_vs_bf16_b1"] = tps8 / b1;
    out["prefill_int8_tok_s"] = prefill8;
    out["prefill_int8_speedup_vs_bf16"] = prefill8 / prefill;
  }

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "engine_bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
