// Which SIMD instruction sets the kernels may use on this CPU.
//
// The kernels are compiled for several levels with per-function target attributes and pick one
// at run time, so the same binary runs on any x86-64 CPU. DetectSimd() reads cpuid and checks
// that the OS saves the wider registers (xgetbv); the environment variable
// TANDEM_SIMD=scalar|avx2|avx512|avx512bf16 caps the result (it never raises it), which is how
// tests and benchmarks compare the paths. Thread-safe; the result is computed once.
#ifndef TANDEM_ENGINE_KERNELS_CPU_H_
#define TANDEM_ENGINE_KERNELS_CPU_H_

namespace tandem::engine {

// Ordered: each level includes the ones before it.
//   kAvx2:       AVX2 + FMA + F16C.
//   kAvx512:     AVX-512 F, BW, DQ, VL.
//   kAvx512Bf16: kAvx512 + AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16).
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// The best level this CPU and OS support, capped by TANDEM_SIMD when set. An unrecognised
// TANDEM_SIMD value is reported once on stderr and ignored.
SimdLevel DetectSimd();

// The best level the hardware supports, ignoring TANDEM_SIMD.
SimdLevel DetectHardwareSimd();

// "scalar", "avx2", "avx512", "avx512bf16".
const char* SimdLevelName(SimdLevel level);

// True when code for `level` can run on this CPU (hardware check, TANDEM_SIMD ignored).
bool SimdLevelSupported(SimdLevel level);

// Integer dot-product extensions, beside the levels (hardware check, TANDEM_SIMD ignored; the
// int8 kernels combine them with DetectSimd(), matmul_int8.h).
//   AVX512_VNNI: vpdpbusd on 512-bit registers (with kAvx512).
//   AVX_VNNI:    the VEX-encoded vpdpbusd on 256-bit registers (with kAvx2).
bool CpuHasAvx512Vnni();
bool CpuHasAvxVnni();

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_CPU_H_
