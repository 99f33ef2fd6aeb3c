#include "engine/kernels/cpu.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace tandem::engine {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

SimdLevel ProbeHardware() {
  unsigned int eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return SimdLevel::kScalar;
  const bool fma = ecx & (1u << 12);
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave || !avx || !fma || !f16c) return SimdLevel::kScalar;
  const uint64_t xcr0 = ReadXcr0();
  if ((xcr0 & 0x6) != 0x6) return SimdLevel::kScalar;  // OS saves XMM and YMM state
  if (__get_cpuid_max(0, nullptr) < 7) return SimdLevel::kScalar;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx2 = ebx & (1u << 5);
  if (!avx2) return SimdLevel::kScalar;
  const bool avx512f = ebx & (1u << 16);
  const bool avx512dq = ebx & (1u << 17);
  const bool avx512bw = ebx & (1u << 30);
  const bool avx512vl = ebx & (1u << 31);
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;  // opmask, ZMM_Hi256, Hi16_ZMM saved too
  if (!(avx512f && avx512dq && avx512bw && avx512vl && os_zmm)) return SimdLevel::kAvx2;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  const bool avx512bf16 = eax & (1u << 5);
  return avx512bf16 ? SimdLevel::kAvx512Bf16 : SimdLevel::kAvx512;
}

SimdLevel ApplyEnvCap(SimdLevel hw) {
  const char* env = std::getenv("TANDEM_SIMD");
  if (env == nullptr || *env == '\0') return hw;
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16}) {
    if (std::strcmp(env, SimdLevelName(level)) == 0) return level < hw ? level : hw;
  }
  std::fprintf(stderr,
               "TANDEM_SIMD=%s is not one of scalar, avx2, avx512, avx512bf16; ignoring it "
               "(using %s)\n",
               env, SimdLevelName(hw));
  return hw;
}

// cpuid leaf 7 register bits: AVX512_VNNI is subleaf 0 ecx bit 11, AVX_VNNI subleaf 1 eax bit 4.
bool ProbeCpuid7(unsigned int subleaf, int reg, int bit) {
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  unsigned int r[4];
  __cpuid_count(7, subleaf, r[0], r[1], r[2], r[3]);
  return (r[reg] >> bit) & 1u;
}

// Linux's arch_prctl codes for dynamically enabled XSAVE features (asm/prctl.h, Linux 5.16) and
// the tile data feature number (the AMX tiles' 8 KiB register state).
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// Whether AMX can run in this process: the hardware has AMX-TILE, the OS enables the tile
// config and data state in XCR0 (bits 17, 18), and Linux grants this process the tile data
// permission (requested here).
bool ProbeAmxPermission() {
  if (!ProbeCpuid7(0, 3, 24)) return false;
  if ((ReadXcr0() & (uint64_t{3} << 17)) != (uint64_t{3} << 17)) {
    std::fprintf(stderr,
                 "cpu: the CPU has AMX but the OS does not enable its tile state; not "
                 "using AMX\n");
    return false;
  }
  const long req = ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata);
  const int req_errno = errno;
  uint64_t granted = 0;
  const long get = ::syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted);
  const bool ok = req == 0 && get == 0 && ((granted >> kXfeatureXtiledata) & 1u);
  if (!ok) {
    std::fprintf(stderr,
                 "cpu: the CPU has AMX but Linux refused the tile data permission "
                 "(arch_prctl ARCH_REQ_XCOMP_PERM: %s); not using AMX\n",
                 req == 0 ? "granted but not confirmed" : std::strerror(req_errno));
  }
  return ok;
}

bool AmxUsable() {
  static const bool usable = ProbeAmxPermission();
  return usable;
}

}  // namespace

bool CpuHasAmxTile() { return AmxUsable(); }

bool CpuHasAmxBf16() {
  static const bool has = AmxUsable() && ProbeCpuid7(0, 3, 22);
  return has;
}

bool CpuHasAmxInt8() {
  static const bool has = AmxUsable() && ProbeCpuid7(0, 3, 25);
  return has;
}

bool CpuHasAvx512Vnni() {
  static const bool has = SimdLevelSupported(SimdLevel::kAvx512) && ProbeCpuid7(0, 2, 11);
  return has;
}

bool CpuHasAvxVnni() {
  static const bool has = SimdLevelSupported(SimdLevel::kAvx2) && ProbeCpuid7(1, 0, 4);
  return has;
}

SimdLevel DetectHardwareSimd() {
  static const SimdLevel level = ProbeHardware();
  return level;
}

SimdLevel DetectSimd() {
  static const SimdLevel level = ApplyEnvCap(DetectHardwareSimd());
  return level;
}

bool SimdLevelSupported(SimdLevel level) { return level <= DetectHardwareSimd(); }

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

}  // namespace tandem::engine
