#include "bench/probe/probe.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>
#include <vector>

#include "engine/kernels/cpu.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Reads [p, p + bytes) with 32-byte loads as S runs of equal length read side by side (S = 1:
// front to back); the xor keeps the loads from being optimised away. Several runs keep more
// cache-line fills in flight than one hardware prefetch stream does: on this machine's Zen 5
// VM, 2 threads, 70-77 GB/s at S = 2-8 against 63-67 at S = 1.
template <int S>
__attribute__((target("avx2"))) uint64_t ReadAvx2(const char* p, int64_t bytes) {
  const int64_t run = bytes / S / 128 * 128;
  __m256i acc[S][4];
  for (int s = 0; s < S; ++s)
    acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = _mm256_setzero_si256();
  for (int64_t i = 0; i + 128 <= run; i += 128) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const char* q = p + s * run + i;
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        acc[s][l] = _mm256_xor_si256(
            acc[s][l], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * l)));
      }
    }
  }
  __m256i a = _mm256_setzero_si256();
  for (int s = 0; s < S; ++s) {
    a = _mm256_xor_si256(a, _mm256_xor_si256(_mm256_xor_si256(acc[s][0], acc[s][1]),
                                             _mm256_xor_si256(acc[s][2], acc[s][3])));
  }
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}

uint64_t ReadSse2(const char* p, int64_t bytes) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= bytes; i += 64) {
    a0 = _mm_xor_si128(a0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_xor_si128(a1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_xor_si128(a2, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_xor_si128(a3, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i a = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_xor_si128(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(a));
}

volatile uint64_t g_sink;

}  // namespace

double MeasureReadBandwidthGBs(int threads) { return MeasureReadBandwidthGBs(threads, 1LL << 30); }

// Threads start each pass together (spin barrier) and read their own window of the buffer; a
// pass's time is the slowest thread's. Windows rotate over the whole buffer so nothing is cached
// between passes when the buffer is much larger than the LLC. Many short passes and the best one:
// on a shared machine, long passes almost never run undisturbed.
double MeasureReadBandwidthGBs(int threads, int64_t bytes) {
  threads = std::max(threads, 1);
  const int64_t window = std::min<int64_t>(64LL << 20, bytes / threads) / 4096 * 4096;
  if (window <= 0) return 0;
  const int64_t total = bytes / 4096 * 4096;
  std::unique_ptr<char, FreeDeleter> buf(static_cast<char*>(std::aligned_alloc(4096, total)));
  if (!buf) return 0;
  const int64_t slots = total / window;
  const int passes = static_cast<int>(std::max<int64_t>(24, 4 * slots / threads));
  std::vector<double> seconds(static_cast<size_t>(threads) * passes);
  std::atomic<int> arrived{0};
  auto worker = [&](int t) {
    // First touch by the reading threads, round robin over the windows.
    for (int64_t s = t; s < slots; s += threads) std::memset(buf.get() + s * window, s + 1, window);
    uint64_t sink = 0;
    for (int pass = 0; pass < passes; ++pass) {
      arrived.fetch_add(1);
      while (arrived.load() < (pass + 1) * threads) std::this_thread::yield();
      const char* p = buf.get() + ((static_cast<int64_t>(pass) * threads + t) % slots) * window;
      const auto t0 = Clock::now();
      sink ^= StreamRead(p, window, pass % 2 == 0 ? 1 : kReadRuns);
      seconds[static_cast<size_t>(pass) * threads + t] = Seconds(t0, Clock::now());
    }
    g_sink = g_sink ^ sink;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
  double best = 1e30;
  for (int pass = 0; pass < passes; ++pass) {
    double slowest = 0;
    for (int t = 0; t < threads; ++t) {
      slowest = std::max(slowest, seconds[static_cast<size_t>(pass) * threads + t]);
    }
    best = std::min(best, slowest);
  }
  return static_cast<double>(window) * threads / best / 1e9;
}

uint64_t StreamRead(const void* p, int64_t bytes, int runs) {
  const char* c = static_cast<const char*>(p);
  if (engine::DetectSimd() < engine::SimdLevel::kAvx2) return ReadSse2(c, bytes);
  return runs >= kReadRuns ? ReadAvx2<kReadRuns>(c, bytes) : ReadAvx2<1>(c, bytes);
}

namespace {

// 12 independent FMA chains (more than latency x throughput on current cores).
__attribute__((target("avx2,fma"))) double FmaLoopAvx2(int64_t iterations) {
  __m256 acc[12];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

// 24 independent vdpbf16ps chains on 512-bit registers, as many as the matmul tiles keep.
__attribute__((target("avx512f,avx512bf16"))) double DotLoopAvx512Bf16(int64_t iterations) {
  __m512 acc[24];
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));  // 2^-24
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  return lanes[0] + lanes[15];
}

// `loop(iterations)` on `threads` threads started together, best of 20 passes (the slowest
// thread's time in each); GFLOP/s at `flops_per_iteration` per thread.
double LoopPeakGflops(int threads, double (*loop)(int64_t), int64_t iterations,
                      double flops_per_iteration) {
  threads = std::max(threads, 1);
  double best = 1e30;
  for (int pass = 0; pass < 20; ++pass) {
    std::vector<std::thread> pool;
    std::atomic<int> ready{0};
    std::vector<double> seconds(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();
        const auto t0 = Clock::now();
        g_sink = g_sink ^ static_cast<uint64_t>(loop(iterations));
        seconds[t] = Seconds(t0, Clock::now());
      });
    }
    for (auto& th : pool) th.join();
    best = std::min(best, *std::max_element(seconds.begin(), seconds.end()));
  }
  return flops_per_iteration * iterations * threads / best / 1e9;
}

}  // namespace

double MeasureFmaPeakGflops(int threads) {
  if (engine::DetectSimd() < engine::SimdLevel::kAvx2) return 0;
  // 12 * 8 * 2 * 2e6 = 384 MFLOP per thread per pass.
  return LoopPeakGflops(threads, FmaLoopAvx2, 2'000'000, 12.0 * 8 * 2);
}

double MeasureBf16DotPeakGflops(int threads) {
  if (engine::DetectSimd() < engine::SimdLevel::kAvx512Bf16) return 0;
  // 24 * 32 multiply-adds * 2 * 250e3 = 384 MFLOP per thread per pass.
  return LoopPeakGflops(threads, DotLoopAvx512Bf16, 250'000, 24.0 * 32 * 2);
}

double MeasurePathPeakGflops(int threads) {
  return engine::DetectSimd() == engine::SimdLevel::kAvx512Bf16 ? MeasureBf16DotPeakGflops(threads)
                                                                : MeasureFmaPeakGflops(threads);
}

double MeasureBf16GemmGflops(int threads, int64_t m, int64_t n, int64_t k, std::string* impl) {
  try {
    omp_set_num_threads(std::max(threads, 1));
    using dnnl::memory;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::desc a_md({m, k}, memory::data_type::bf16, memory::format_tag::ab);
    // Weights stored [n, k] (the nn.Linear layout) and read as [k, n]: tag "ba".
    const memory::desc b_md({k, n}, memory::data_type::bf16, memory::format_tag::ba);
    const memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    if (impl != nullptr) *impl = pd.impl_info_str();
    const dnnl::matmul prim(pd);
    memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
    auto fill = [](memory& mem, size_t bytes) {
      uint16_t* p = static_cast<uint16_t*>(mem.get_data_handle());
      for (size_t i = 0; i < bytes / 2; ++i) p[i] = 0x3c00 + (i * 7919 % 256);  // ~1/128..1/64
    };
    fill(a, a_md.get_size());
    fill(b, b_md.get_size());
    auto once = [&] {
      prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      strm.wait();
    };
    once();
    const double flop = 2.0 * m * n * k;
    const int reps = std::max(3, static_cast<int>(2e10 / flop));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      once();
      best = std::min(best, Seconds(t0, Clock::now()));
    }
    return flop / best / 1e9;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oneDNN bf16 matmul unavailable: %s\n", e.what());
    return 0;
  }
}

double MeasureFp32GemmGflops(int threads, int64_t m, int64_t n, int64_t k, std::string* core) {
  openblas_set_num_threads(std::max(threads, 1));
  if (core != nullptr) *core = openblas_get_corename();
  std::vector<float> a(m * k), b(n * k), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.01f;
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a.data(),
                static_cast<blasint>(k), b.data(), static_cast<blasint>(k), 0.0f, c.data(),
                static_cast<blasint>(n));
  };
  once();
  const double flop = 2.0 * m * n * k;
  const int reps = std::max(3, static_cast<int>(2e10 / flop));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    once();
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return flop / best / 1e9;
}

void SetOpenBlasCoreTypeAndReexec(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (engine::DetectHardwareSimd() < engine::SimdLevel::kAvx512) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: continue with OpenBLAS's own choice.
  std::perror("re-executing with OPENBLAS_CORETYPE=SkylakeX");
}

}  // namespace tandem::bench
