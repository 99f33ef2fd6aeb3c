#include "engine/kernels/cpu.h"

#include <cpuid.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace tandem::engine {
namespace {

bool Cpuid7Edx(int bit) {
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  unsigned int eax, ebx, ecx, edx;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  return (edx >> bit) & 1u;
}

// AMX is reported usable exactly when the hardware has it and Linux granted this process the tile
// data state (after the probe asked for it), and never without AMX-TILE.
TEST(CpuAmxTest, UsableMeansHardwareAndGrantedPermission) {
  const bool usable = CpuHasAmxTile();
  const bool hardware_tile = Cpuid7Edx(24);
  uint64_t granted = 0;
  const bool permitted =
      ::syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &granted) == 0 &&
      ((granted >> 18) & 1u);  // XFEATURE_XTILEDATA
  EXPECT_EQ(usable, hardware_tile && permitted);
  EXPECT_EQ(CpuHasAmxBf16(), usable && Cpuid7Edx(22));
  EXPECT_EQ(CpuHasAmxInt8(), usable && Cpuid7Edx(25));
}

}  // namespace
}  // namespace tandem::engine
