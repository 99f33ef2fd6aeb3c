#include "engine/ops.h"

#include <cmath>

#include "engine/kernels/cpu.h"
#include "engine/ops_internal.h"

namespace tandem::engine {
namespace {

// The element-wise loops run 16 lanes wide where the CPU has AVX-512 (ops_avx512.cc), 8 where it
// has AVX2 (ops_avx2.cc); same bits either way.
bool UseAvx512() {
  static const bool avx512 = DetectSimd() >= SimdLevel::kAvx512;
  return avx512;
}
bool UseAvx2() {
  static const bool avx2 = DetectSimd() >= SimdLevel::kAvx2;
  return avx2;
}

// 1 / sqrt(mean of squares + eps) of one row; lanes l accumulate elements i = l (mod 8).
float InvRms(const float* x, int64_t dim, float eps) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * x[i + l];
  }
  for (int l = 0; i < dim; ++i, ++l) acc[l] += x[i] * x[i];
  const float sum =
      ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  return 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
}

}  // namespace

void RmsNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, float eps,
             float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float inv = InvRms(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void RmsNormToBf16(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w,
                   float eps, bf16* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    bf16* yr = y + r * ldy;
    const float inv = InvRms(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = F32ToBf16(w[i] * (xr[i] * inv));
  }
}

void RopeCosSin(int64_t position, const float* inv_freq, int64_t half, float* cos_out,
                float* sin_out) {
  const float pos = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

void ApplyRope(float* head, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = head[i];
    const float b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

void SiluMulToBf16(const float* gate, const float* up, int64_t n, bf16* out) {
  if (UseAvx512()) {
    internal::SiluMulToBf16Avx512(gate, up, n, out);
    return;
  }
  if (UseAvx2()) {
    internal::SiluMulToBf16Avx2(gate, up, n, out);
    return;
  }
  internal::SiluMulToBf16Loop(gate, up, n, out);
}

void ExpInPlace(float* x, int64_t n) {
  if (UseAvx512()) {
    internal::ExpInPlaceAvx512(x, n);
    return;
  }
  if (UseAvx2()) {
    internal::ExpInPlaceAvx2(x, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = ExpF(x[i]);
}

}  // namespace tandem::engine
