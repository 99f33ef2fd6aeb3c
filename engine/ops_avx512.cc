// AVX-512 builds of ops.cc's element-wise loops (exp, SiLU * up). The loops are the portable ones,
// word for word; this file is compiled with -ffp-contract=off (engine/CMakeLists.txt), so the
// compiler vectorizes them 16 lanes wide with the same IEEE operations in the same order and
// fuses no multiply into an add: every result bit equals the portable loop's. ops.cc calls these
// only on CPUs with AVX-512.
#include "engine/ops_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq")

namespace tandem::engine::internal {

void ExpInPlaceAvx512(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ExpF(x[i]);
}

void SiluMulToBf16Avx512(const float* gate, const float* up, int64_t n, bf16* out) {
  SiluMulToBf16Loop(gate, up, n, out);
}

}  // namespace tandem::engine::internal

#pragma GCC pop_options
