// bfloat16 storage and conversions used by the model core.
//
// A bf16 value is kept as its raw 16 bits (the upper half of an IEEE fp32). Widening to fp32 is
// exact; narrowing rounds to nearest, ties to even, keeps NaN a (quiet) NaN and keeps the sign of
// zero and of infinities. Denormals are kept (no flush) by these conversions.
// All functions are thread-safe (pure).
#ifndef TANDEM_ENGINE_KERNELS_BF16_H_
#define TANDEM_ENGINE_KERNELS_BF16_H_

#include <cstdint>
#include <cstring>

namespace tandem::engine {

using bf16 = uint16_t;  // raw bits

// Exact: bf16 is the upper 16 bits of an fp32.
inline float Bf16ToF32(bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest, ties to even. A NaN stays a NaN (its quiet bit is set so that truncating the
// payload can never turn it into an infinity).
inline bf16 F32ToBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((bits >> 16) | 0x0040u);
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<bf16>(bits >> 16);
}

// dst[i] = F32ToBf16(src[i]) for i < n, vectorized on CPUs that allow it (same results as the
// scalar function, NaN included). src and dst must not overlap.
void ConvertF32ToBf16(const float* src, bf16* dst, int64_t n);

// dst[i] = Bf16ToF32(src[i]) for i < n (exact). src and dst must not overlap.
void ConvertBf16ToF32(const bf16* src, float* dst, int64_t n);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_BF16_H_
