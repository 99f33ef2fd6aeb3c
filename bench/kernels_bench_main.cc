// kernels_bench: the bf16 matmul against this machine's limits, measured in the same run.
//
//   kernels_bench --threads 2 --json out.json
//
// Prints the DRAM read bandwidth, oneDNN's bf16 matmul rate and OpenBLAS's fp32 rate, then our
// MatmulBf16 at decode sizes (m = 1, 8, 16, 32: GB/s of weights streamed and the ratio to the
// bandwidth, and to the call's bound: the larger of weight-read time and multiply-add time at the
// measured FMA peak) and at a prefill size (m = 1024: GFLOP/s and the ratio to oneDNN, OpenBLAS
// and the FMA peak). oneDNN 2.6 has bf16 matmul only on AVX-512 CPUs; elsewhere it reports 0 and
// OpenBLAS's fp32 rate is the library baseline.
// Decode shapes cycle through copies of the weights totalling more than 256 MiB, so each call
// reads its weights from DRAM as a model's layers do, stored in the layout the engine would pick
// (PreferredWeightLayout). TANDEM_SIMD caps the path, as in the engine; under TANDEM_GEMM=onednn
// the decode shapes run on oneDNN in its layout (the prefill size stays on the own kernels).
// Last, decode attention (PagedAttention) as a batch-32 step of a Qwen2.5-0.5B-shaped model runs
// it: 32 sequences of 270 keys, 14 query / 2 KV heads of 64, 24 layers of a paged cache (about
// 106 MB, so each layer's KV comes from DRAM as after the weight stream): the step's time, the
// KV bytes read per second and their ratio to the read bandwidth above.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/probe/probe.h"
#include "engine/attention.h"
#include "engine/kernels/bf16.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_int8.h"
#include "engine/kernels/thread_pool.h"
#include "engine/kv_cache.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using engine::bf16;
using Clock = std::chrono::steady_clock;

std::vector<bf16> RandomWeights(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<bf16> v(count);
  for (auto& e : v) e = engine::F32ToBf16(dist(rng));
  return v;
}

struct Timing {
  double matmul_s;  // best seconds per MatmulBf16 call
  double read_s;    // best seconds per pure read of one weight matrix, interleaved with the calls
};

// Times MatmulBf16 with m rows over `copies` weight matrices [n, k] used in turn, alternating
// with a pure streaming read of another copy: both see the same machine state, so their ratio
// holds even on a busy host where no absolute figure does.
Timing TimeMatmul(const std::vector<std::vector<bf16>>& copies, int64_t m, int64_t n, int64_t k,
                  engine::WeightLayout layout, engine::ThreadPool* pool, double min_seconds) {
  const std::vector<bf16> x = RandomWeights(m * k, 3);
  std::vector<float> y(m * n);
  for (const auto& w : copies) {  // warm-up: page-in and scratch allocation
    engine::MatmulBf16(x.data(), k, m, k, w.data(), n, y.data(), n, pool, layout);
  }
  const size_t half = copies.size() / 2;
  std::atomic<uint64_t> sink{0};
  Timing best{1e30, 1e30};
  double spent = 0;
  for (size_t call = 0; spent < min_seconds || call < 5 * copies.size(); ++call) {
    const auto& w = copies[call % copies.size()];
    const auto t0 = Clock::now();
    engine::MatmulBf16(x.data(), k, m, k, w.data(), n, y.data(), n, pool, layout);
    const auto t1 = Clock::now();
    // The same bytes split the same way over the pool's threads as the matmul splits n, read
    // front to back and as side-by-side runs on alternate calls (the best of both is kept).
    const bf16* other = copies[(call + half) % copies.size()].data();
    pool->ParallelFor(n, [&](int64_t begin, int64_t end) {
      sink.fetch_xor(
          StreamRead(other + begin * k, (end - begin) * k * 2, call % 2 == 0 ? 1 : kReadRuns));
    });
    const auto t2 = Clock::now();
    best.matmul_s = std::min(best.matmul_s, std::chrono::duration<double>(t1 - t0).count());
    best.read_s = std::min(best.read_s, std::chrono::duration<double>(t2 - t1).count());
    spent += std::chrono::duration<double>(t2 - t0).count();
  }
  if (sink.load() == 42) std::printf(" ");  // keeps the reads observable
  return best;
}

// MatmulInt8 at m = 1 on a Qwen2.5-0.5B layer's int8 matrices, each cycling through copies
// totalling more than 256 MiB, alternated with a plain read of the same bytes as TimeMatmul does:
// the share of a plain read each reaches (the int8 decode's weight stream).
nlohmann::json RunInt8Decode(engine::ThreadPool* pool) {
  nlohmann::json out;
  std::printf("int8 path %s, m = 1:\n", engine::Int8PathName(engine::DetectInt8Path()));
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  for (const Shape& s : {Shape{"qkv", 1152, 896}, Shape{"o", 896, 896}, Shape{"gate_up", 9728, 896},
                         Shape{"down", 896, 4864}}) {
    const int64_t bytes = engine::Int8PackedBytes(s.n, s.k);
    const int64_t n_copies = std::max<int64_t>(2, (256LL << 20) / bytes + 1);
    std::vector<std::vector<int8_t>> data(n_copies);
    std::vector<float> scales(s.n, 0.01f);
    std::vector<int32_t> sums(s.n);
    std::vector<engine::Int8Matrix> copies;
    std::mt19937 rng(5);
    std::vector<int8_t> rows(s.n * s.k);
    for (auto& e : rows) e = static_cast<int8_t>(rng());
    for (auto& d : data) {
      d.resize(bytes);
      engine::PackInt8Rows(rows.data(), 0, s.n, s.n, s.k, d.data(), sums.data());
      copies.push_back({d.data(), scales.data(), sums.data(), s.n, s.k});
    }
    const std::vector<bf16> x = RandomWeights(s.k, 3);
    std::vector<float> y(s.n);
    std::atomic<uint64_t> sink{0};
    double best_mm = 1e30, best_read = 1e30;
    for (size_t call = 0; call < 8 * copies.size(); ++call) {
      const auto t0 = Clock::now();
      engine::MatmulInt8(x.data(), s.k, 1, copies[call % copies.size()], y.data(), s.n, pool);
      const auto t1 = Clock::now();
      const int8_t* other = data[(call + copies.size() / 2) % copies.size()].data();
      const int64_t groups = (s.n + 3) / 4, group_bytes = bytes / groups;
      pool->ParallelFor(groups, [&](int64_t begin, int64_t end) {
        sink.fetch_xor(StreamRead(other + begin * group_bytes, (end - begin) * group_bytes,
                                  call % 2 == 0 ? 1 : kReadRuns));
      });
      const auto t2 = Clock::now();
      best_mm = std::min(best_mm, std::chrono::duration<double>(t1 - t0).count());
      best_read = std::min(best_read, std::chrono::duration<double>(t2 - t1).count());
    }
    if (sink.load() == 42) std::printf(" ");
    std::printf("  %-8s n %6ld k %5ld: %6.1f us, %5.1f GB/s, plain read %5.1f GB/s, ratio %.3f\n",
                s.name, s.n, s.k, best_mm * 1e6, bytes / best_mm / 1e9, bytes / best_read / 1e9,
                best_read / best_mm);
    out[s.name] = {{"us", best_mm * 1e6}, {"ratio", best_read / best_mm}};
  }
  return out;
}

// Best seconds of PagedAttention over every layer for `batch` decode tokens at `keys` keys each.
double TimeDecodeAttention(int64_t batch, int64_t keys, engine::ThreadPool* pool) {
  const int64_t layers = 24, heads = 14, kv_heads = 2, head_dim = 64, block_size = 16;
  const int64_t blocks = (keys + block_size - 1) / block_size;
  auto cache =
      engine::KvCacheStorage::Create(layers, batch * blocks, block_size, kv_heads, head_dim);
  if (!cache.ok()) {
    std::fprintf(stderr, "attention: %s\n", std::string(cache.status().message()).c_str());
    return 0;
  }
  const std::vector<bf16> fill = RandomWeights((*cache)->total_bytes() / 2, 7);
  std::copy(fill.begin(), fill.end(), reinterpret_cast<bf16*>((*cache)->base()));
  std::vector<std::vector<int32_t>> tables(batch);
  std::vector<const int32_t*> table_ptrs(batch);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < blocks; ++i) tables[b].push_back(static_cast<int32_t>(b * blocks + i));
    table_ptrs[b] = tables[b].data();
  }
  std::vector<float> q(batch * heads * head_dim), out(q.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& e : q) e = dist(rng);
  std::vector<int64_t> positions(batch, keys - 1);
  engine::AttentionBatch ab;
  ab.n_tokens = batch;
  ab.q = q.data();
  ab.positions = positions.data();
  ab.block_tables = table_ptrs.data();
  ab.out = out.data();
  double best = 1e30;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = Clock::now();
    for (int64_t l = 0; l < layers; ++l) engine::PagedAttention(**cache, l, heads, ab, pool);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

int Run(int threads, const std::string& json_path, bool int8_only) {
  nlohmann::json out;
  if (int8_only) {
    engine::ThreadPool pool(threads);
    out["int8_decode"] = RunInt8Decode(&pool);
    return 0;
  }
  out["threads"] = threads;
  out["simd"] = engine::SimdLevelName(engine::DetectSimd());
  std::printf("kernels_bench: %d thread(s), matmul path %s\n", threads,
              engine::SimdLevelName(engine::DetectSimd()));

  const double bw = MeasureReadBandwidthGBs(threads);
  std::printf("DRAM read bandwidth            %8.1f GB/s\n", bw);
  out["read_bandwidth_gb_s"] = bw;
  // The compute ceiling of our path, measured: the rate of the instruction each multiply-add is
  // (an fp32 FMA lane on the AVX2/AVX-512 paths, a vdpbf16ps lane on the AVX-512-BF16 path, which
  // does two multiply-adds per lane: twice the AVX2 FMA rate on a core whose 512-bit unit is two
  // 256-bit halves, four times where it runs at full width).
  const double fma_peak = MeasureFmaPeakGflops(threads);
  const double path_peak = MeasurePathPeakGflops(threads);
  std::printf("AVX2 FMA peak                  %8.1f GFLOP/s (our path's ceiling: %.1f, measured)\n",
              fma_peak, path_peak);
  out["fma_peak_gflops"] = fma_peak;
  out["path_peak_gflops"] = path_peak;

  const int64_t pm = 1024, pn = 4864, pk = 896;
  std::string dnnl_impl, blas_core;
  const double dnnl = MeasureBf16GemmGflops(threads, pm, pn, pk, &dnnl_impl);
  const double blas = MeasureFp32GemmGflops(threads, pm, pn, pk, &blas_core);
  std::printf("oneDNN bf16 matmul %ldx%ldx%ld %8.1f GFLOP/s (%s)\n", pm, pn, pk, dnnl,
              dnnl_impl.c_str());
  std::printf("OpenBLAS sgemm     %ldx%ldx%ld %8.1f GFLOP/s (core %s)\n", pm, pn, pk, blas,
              blas_core.c_str());
  out["onednn_bf16_gflops"] = dnnl;
  out["onednn_impl"] = dnnl_impl;
  out["openblas_fp32_gflops"] = blas;
  out["openblas_core"] = blas_core;

  engine::ThreadPool pool(threads);
  struct Shape {
    int64_t n, k;
  };
  for (const Shape& s : {Shape{4864, 896}, Shape{896, 4864}, Shape{151936, 896}}) {
    const int64_t bytes = s.n * s.k * 2;
    const int64_t n_copies = std::max<int64_t>(1, (256LL << 20) / bytes + 1);
    std::vector<std::vector<bf16>> copies;
    // Stored as the engine stores them (weights.cc): in the layout this path reads fastest.
    const engine::WeightLayout layout = engine::PreferredWeightLayout(s.n, s.k);
    for (int64_t c = 0; c < n_copies; ++c) {
      const std::vector<bf16> rows = RandomWeights(s.n * s.k, 10 + c);
      copies.emplace_back(engine::PackedWeightBytes(s.n, s.k, layout) / 2);
      engine::PackWeights(rows.data(), s.n, s.k, layout, copies.back().data());
    }
    double t1 = 0;
    for (int64_t m : {1, 8, 16, 32}) {
      const Timing timing = TimeMatmul(copies, m, s.n, s.k, layout, &pool, 1.0);
      const double t = timing.matmul_s;
      const double read_gbs = bytes / timing.read_s / 1e9;
      if (m == 1) t1 = t;
      const double gbs = bytes / t / 1e9;
      const double gflops = 2.0 * m * s.n * s.k / t / 1e9;
      // The time this call cannot beat: reading the weights once, or doing its multiply-adds.
      const double bound = std::max(bytes / (bw * 1e9), 2.0 * m * s.n * s.k / (path_peak * 1e9));
      std::printf(
          "matmul m=%-3ld n=%-6ld k=%ld %s %9.1f us %6.1f GB/s %.2fx bw %6.1f GFLOP/s"
          " %.2fx bound  t/t(m=1) %.2f  same-bytes read %.1f GB/s (%.2fx)\n",
          m, s.n, s.k,
          layout == engine::WeightLayout::kGroups4
              ? "groups"
              : (layout == engine::WeightLayout::kOnednn ? "onednn" : "rows"),
          t * 1e6, gbs, gbs / bw, gflops, bound / t, t / t1, read_gbs, gbs / read_gbs);
      const std::string key = "decode_n" + std::to_string(s.n) + "_m" + std::to_string(m);
      out[key + "_us"] = t * 1e6;
      out[key + "_gb_s"] = gbs;
      out[key + "_ratio_bound"] = bound / t;
      out[key + "_read_same_gb_s"] = read_gbs;
      out[key + "_ratio_read_same"] = gbs / read_gbs;
      out[key + "_ratio_bw"] = gbs / bw;
    }
  }

  {
    std::vector<std::vector<bf16>> w;
    w.push_back(RandomWeights(pn * pk, 5));
    const double t = TimeMatmul(w, pm, pn, pk, engine::WeightLayout::kRows, &pool, 2.0).matmul_s;
    const double gflops = 2.0 * pm * pn * pk / t / 1e9;
    std::printf(
        "matmul m=%ld n=%ld k=%ld  %8.1f GFLOP/s  %.2fx oneDNN bf16  %.2fx OpenBLAS fp32"
        "  %.2fx path peak\n",
        pm, pn, pk, gflops, dnnl > 0 ? gflops / dnnl : 0.0, gflops / blas, gflops / path_peak);
    out["prefill_ratio_path_peak"] = gflops / path_peak;
    out["prefill_gflops"] = gflops;
    out["prefill_ratio_onednn"] = dnnl > 0 ? gflops / dnnl : 0.0;
    out["prefill_ratio_openblas_fp32"] = gflops / blas;
  }

  {
    const int64_t batch = 32, keys = 270;
    const double t = TimeDecodeAttention(batch, keys, &pool);
    // K and V of one KV head: 2 x 64 bf16 per key, 2 KV heads, 24 layers.
    const double gbs = t > 0 ? batch * keys * 2.0 * 2 * 64 * 2 * 24 / t / 1e9 : 0;
    std::printf(
        "decode attention %ld x %ld keys, 24 layers  %8.2f ms  KV read at %.1f GB/s  %.2fx bw\n",
        batch, keys, t * 1e3, gbs, gbs / bw);
    out["attention_decode_b32_ms"] = t * 1e3;
    out["attention_decode_b32_kv_gb_s"] = gbs;
    out["attention_decode_b32_ratio_bw"] = gbs / bw;
  }

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::SetOpenBlasCoreTypeAndReexec(argv);
  CLI::App app{"bf16 matmul against the machine's bandwidth and GEMM rate"};
  int threads = 1;
  std::string json;
  app.add_option("--threads", threads, "threads for every measurement")->check(CLI::Range(1, 256));
  app.add_option("--json", json, "write the figures to this JSON file");
  bool int8_only = false;
  app.add_flag("--int8-only", int8_only, "only the int8 matmul at m = 1 (MatmulInt8)");
  CLI11_PARSE(app, argc, argv);
  return tandem::bench::Run(threads, json, int8_only);
}
