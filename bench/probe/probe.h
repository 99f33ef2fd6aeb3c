// Machine probes: the physical limits that benchmarks report their figures against.
//
// Each probe measures, in the calling process and right now, one ceiling of this machine, so a
// benchmark can print "ours / limit measured in the same run" on a shared, noisy host. Probes take
// seconds, allocate what they need and free it before returning. Not thread-safe: run one at a
// time, with the machine otherwise as quiet as the benchmark itself.
#ifndef TANDEM_BENCH_PROBE_PROBE_H_
#define TANDEM_BENCH_PROBE_PROBE_H_

#include <cstdint>
#include <string>

namespace tandem::bench {

// Streaming read bandwidth from DRAM in GB/s (1e9 bytes/s): `threads` threads each read a
// 64 MiB window of a buffer much larger than the last-level cache (1 GiB), windows rotating over
// the buffer; the best of many such passes, alternately read front to back and as kReadRuns runs
// side by side (StreamRead).
double MeasureReadBandwidthGBs(int threads);

// Same, over a buffer of `bytes` (e.g. one that fits in L2 to measure cache bandwidth).
double MeasureReadBandwidthGBs(int threads, int64_t bytes);

// The runs of a side-by-side read (StreamRead).
inline constexpr int kReadRuns = 4;

// Reads [p, p + bytes) once and returns a value derived from the bytes (so the reads cannot be
// optimised away). runs = 1: front to back; runs = kReadRuns: as that many equal runs read side
// by side, which keeps more DRAM reads in flight (a bound should take the better of the two).
// Any alignment; up to 128 bytes per run at the end are not read. For timing a pure read of the
// same buffers a kernel reads.
uint64_t StreamRead(const void* p, int64_t bytes, int runs = 1);

// Peak fp32 FMA rate of the AVX2 units in GFLOP/s (2 flops per lane per FMA), from a
// register-only loop on `threads` threads; 0 without AVX2. The compute ceiling of the AVX2 matmul
// path, whose every multiply-add is one fp32 FMA lane.
double MeasureFmaPeakGflops(int threads);

// Peak rate of vdpbf16ps on 512-bit registers in GFLOP/s (32 multiply-adds, 64 flops, per
// instruction), from a register-only loop on `threads` threads; 0 without AVX-512-BF16. The
// compute ceiling of the AVX-512-BF16 matmul path, whose every multiply-add is one vdpbf16ps
// lane. Whether it is twice the AVX2 FMA peak depends on the core: where the 512-bit unit is two
// 256-bit halves, one vdpbf16ps per cycle does the flops of two 256-bit FMAs.
double MeasureBf16DotPeakGflops(int threads);

// The ceiling of the matmul path DetectSimd() selects: MeasureBf16DotPeakGflops on the
// AVX-512-BF16 path, MeasureFmaPeakGflops on the others (their multiply-adds are fp32 FMAs).
double MeasurePathPeakGflops(int threads);

// oneDNN's bf16 matmul rate in GFLOP/s (2 m n k per call) for bf16 [m, k] x bf16 [k, n] -> fp32,
// best of a few timed runs after a warm-up, on `threads` OpenMP threads. 0 if oneDNN cannot
// create the primitive on this CPU. impl, when non-null, receives oneDNN's implementation name
// (e.g. "brg:avx512_core_bf16"), which says whether it found a native bf16 kernel.
double MeasureBf16GemmGflops(int threads, int64_t m, int64_t n, int64_t k,
                             std::string* impl = nullptr);

// OpenBLAS cblas_sgemm rate in GFLOP/s for fp32 [m, k] x [k, n]. core, when non-null, receives
// the kernel family OpenBLAS chose (openblas_get_corename()).
double MeasureFp32GemmGflops(int threads, int64_t m, int64_t n, int64_t k,
                             std::string* core = nullptr);

// OpenBLAS picks its kernels from cpuid when the library is loaded, and it mis-detects AVX-512
// Zen CPUs as Haswell (half the fp32 rate, as measured on the project's Zen hosts). Call first
// thing in main(): on a CPU with AVX-512, when OPENBLAS_CORETYPE is unset, it sets
// OPENBLAS_CORETYPE=SkylakeX and re-executes the program so the library's load-time detection sees
// it (a setenv after the library is loaded would be too late). Otherwise it returns and does
// nothing.
void SetOpenBlasCoreTypeAndReexec(char** argv);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_PROBE_PROBE_H_
