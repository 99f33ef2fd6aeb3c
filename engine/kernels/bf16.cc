#include "engine/kernels/bf16.h"

#include "engine/kernels/cpu.h"
#include "engine/kernels/matmul_internal.h"

namespace tandem::engine {

void ConvertF32ToBf16(const float* src, bf16* dst, int64_t n) {
  static const bool use_avx2 = DetectSimd() >= SimdLevel::kAvx2;
  if (use_avx2) {
    internal::ConvertF32ToBf16Avx2(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

void ConvertBf16ToF32(const bf16* src, float* dst, int64_t n) {
  // The compiler vectorizes this loop for the baseline ISA; it is exact either way.
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

}  // namespace tandem::engine
