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

// Advanced Matrix Extensions (cpuid leaf 7 subleaf 0 edx: AMX-TILE bit 24, AMX-BF16 bit 22,
// AMX-INT8 bit 25). Usable means the hardware has it AND Linux lets this process use the tile
// data state: the first call asks for it (arch_prctl ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA,
// Linux >= 5.16) and confirms it with ARCH_GET_XCOMP_PERM, once per process; a refusal on AMX
// hardware is reported once on stderr and then every CpuHasAmx* is false. TANDEM_SIMD does not
// cap these (they are a GEMM backend's business, not a SimdLevel: matmul.h GemmBackend).
// Thread-safe; the permission is process-wide, so asking from any thread covers all of them.
bool CpuHasAmxTile();
bool CpuHasAmxBf16();
bool CpuHasAmxInt8();

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_CPU_H_
