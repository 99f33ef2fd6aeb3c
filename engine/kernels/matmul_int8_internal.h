// What matmul_int8.cc (dispatch, quantization, the scalar path) shares with the vector paths
// (matmul_int8_avx2.cc, matmul_int8_avx512.cc). Internal to engine/kernels: callers use
// matmul_int8.h.
#ifndef TANDEM_ENGINE_KERNELS_MATMUL_INT8_INTERNAL_H_
#define TANDEM_ENGINE_KERNELS_MATMUL_INT8_INTERNAL_H_

#include <cstdint>

#include "engine/kernels/matmul_int8.h"

namespace tandem::engine::internal {

inline constexpr int64_t kInt8Block = 64;  // bytes of k per block of the packed layout

// One call's rows of quantized x against a packed matrix. xq holds m rows of kp bytes (k zero
// padded to kp): qx on the scalar and AVX2 paths, qx + 128 (as unsigned) on the VNNI paths.
struct Int8Job {
  const uint8_t* xq = nullptr;
  const float* sx = nullptr;  // [m]
  int64_t m = 0;
  int64_t kp = 0;
  const Int8Matrix* w = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Computes the outputs of weight groups [g_begin, g_end) for all m rows of the job.
using Int8GroupsFn = void (*)(const Int8Job& job, int64_t g_begin, int64_t g_end);

// Stores y[i, 4 g + r] for the rows of group g that exist, from the integer sums acc[r] (with qx +
// 128 when kOffset, corrected by the row sums). The arithmetic every path shares (matmul_int8.h).
template <bool kOffset>
inline void StoreInt8Group(const Int8Job& job, int64_t i, int64_t g, const int32_t acc[4]) {
  const Int8Matrix& w = *job.w;
  const float sx = job.sx[i];
  float* y = job.y + i * job.ldy;
  for (int r = 0; r < 4; ++r) {
    const int64_t j = 4 * g + r;
    if (j >= w.n) break;
    // Wrapping arithmetic (unsigned), exact: the true sum fits in int32 (matmul_int8.h's bound).
    const int32_t dot = kOffset ? static_cast<int32_t>(static_cast<uint32_t>(acc[r]) -
                                                       128u * static_cast<uint32_t>(w.row_sums[j]))
                                : acc[r];
    y[j] = (static_cast<float>(dot) * sx) * w.scales[j];
  }
}

// Quantizes one row of x (bf16 [k]) as QuantizeActivationRow does into q [kp] (k zero padded to
// kp), as qx + 128 (unsigned) when `offset` (the VNNI paths), and returns sx. Every version
// writes the same bytes (matmul_int8.h): the vector ones round with the instruction set's
// round-to-nearest-even, which is what RoundHalfEven computes for these magnitudes.
using QuantizeRowFn = float (*)(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q);

float QuantizeRowScalar(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q);
float QuantizeRowAvx2(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q);
float QuantizeRowAvx512(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q);

void MatmulInt8GroupsScalar(const Int8Job& job, int64_t g_begin, int64_t g_end);
void MatmulInt8GroupsAvx2(const Int8Job& job, int64_t g_begin, int64_t g_end);
void MatmulInt8GroupsAvxVnni(const Int8Job& job, int64_t g_begin, int64_t g_end);
void MatmulInt8GroupsAvx512Vnni(const Int8Job& job, int64_t g_begin, int64_t g_end);

}  // namespace tandem::engine::internal

#endif  // TANDEM_ENGINE_KERNELS_MATMUL_INT8_INTERNAL_H_
