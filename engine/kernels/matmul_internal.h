// Per-instruction-set entry points behind MatmulBf16 and ConvertF32ToBf16. Internal to
// engine/kernels: callers outside use matmul.h / bf16.h, which dispatch.
//
// Each matmul path packs x into the lane layout below (fp32, zero padded) and partitions the
// output features over the pool. Packed x row layout, one 16-float block per 16 elements of k:
//   packed[16 q + l]     = x[16 q + 2 l + 1]   (odd elements, l = 0..7)
//   packed[16 q + 8 + l] = x[16 q + 2 l]       (even elements)
#ifndef TANDEM_ENGINE_KERNELS_MATMUL_INTERNAL_H_
#define TANDEM_ENGINE_KERNELS_MATMUL_INTERNAL_H_

#include <cstdint>

#include "engine/kernels/bf16.h"
#include "engine/kernels/thread_pool.h"

namespace tandem::engine::internal {

// Thread-local scratch of at least n floats, 64-byte aligned; slot selects one of a few
// independent buffers. Valid until the next call with the same slot on the same thread.
float* ScratchFloats(int64_t n, int slot);

void MatmulBf16Scalar(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16Avx2(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                    float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16Avx512(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16Avx512Bf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                          int64_t n, float* y, int64_t ldy, ThreadPool* pool);
// w in WeightLayout::kGroups4 (n % 4 == 0, k % 16 == 0).
void MatmulBf16Avx2Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                           int64_t n, float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16Avx512Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                             int64_t n, float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16Avx512Bf16Groups4(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w,
                                 int64_t n, float* y, int64_t ldy, ThreadPool* pool);

// The oneDNN backend (matmul_onednn.cc): w in WeightLayout::kOnednn.
void MatmulBf16Onednn(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool);
int64_t OnednnPackedBytes(int64_t n, int64_t k);
void OnednnPack(const bf16* w, int64_t n, int64_t k, bf16* dst);
void OnednnCopyRow(const bf16* w, int64_t n, int64_t k, int64_t j, bf16* out);

void ConvertF32ToBf16Avx2(const float* src, bf16* dst, int64_t n);

}  // namespace tandem::engine::internal

#endif  // TANDEM_ENGINE_KERNELS_MATMUL_INTERNAL_H_
