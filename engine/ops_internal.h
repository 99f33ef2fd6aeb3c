// Internal to engine/: the element-wise loops of ops.cc, as inline functions, so that ops.cc
// (portable), ops_avx2.cc and ops_avx512.cc (the same loops compiled for AVX2 / AVX-512, without
// contraction) run the same source. Callers outside use ops.h.
#ifndef TANDEM_ENGINE_OPS_INTERNAL_H_
#define TANDEM_ENGINE_OPS_INTERNAL_H_

#include <cstdint>

#include "engine/kernels/bf16.h"
#include "engine/ops.h"

namespace tandem::engine::internal {

// out[i] = bf16(gate[i] / (1 + exp(-gate[i])) * up[i]), in chunks that keep the exps in L1.
// Always inlined, so each caller compiles it for its own instruction set; any out-of-line copy
// is compiled for the baseline (this header comes before ops_avx512.cc's target pragma).
__attribute__((always_inline)) inline void SiluMulToBf16Loop(const float* gate, const float* up,
                                                             int64_t n, bf16* out) {
  constexpr int64_t kChunk = 256;
  float tmp[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = n - i < kChunk ? n - i : kChunk;
    for (int64_t j = 0; j < len; ++j) tmp[j] = ExpF(-gate[i + j]);
    for (int64_t j = 0; j < len; ++j) tmp[j] = gate[i + j] / (1.0f + tmp[j]) * up[i + j];
    for (int64_t j = 0; j < len; ++j) out[i + j] = F32ToBf16(tmp[j]);
  }
}

void ExpInPlaceAvx512(float* x, int64_t n);
void SiluMulToBf16Avx512(const float* gate, const float* up, int64_t n, bf16* out);
void ExpInPlaceAvx2(float* x, int64_t n);
void SiluMulToBf16Avx2(const float* gate, const float* up, int64_t n, bf16* out);

}  // namespace tandem::engine::internal

#endif  // TANDEM_ENGINE_OPS_INTERNAL_H_
