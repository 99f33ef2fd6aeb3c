// Element-wise and per-row operations of the transformer (docs/numerics.md): RMSNorm, RoPE,
// SiLU*up, exp. All in fp32; each output row depends only on its own input row, so results never
// depend on batch composition. Functions are pure and thread-safe; buffers are caller-owned.
#ifndef TANDEM_ENGINE_OPS_H_
#define TANDEM_ENGINE_OPS_H_

#include <cstdint>
#include <cstring>

#include "engine/kernels/bf16.h"

namespace tandem::engine {

// exp(x) in fp32 to within ~2 ulp (Cephes polynomial, range reduction by ln 2), written with
// plain IEEE operations in a fixed order so that it vectorises and gives the same bits on every
// path. Inputs are clamped to [-87.34, 88]: below, the result is ~1e-38 instead of a denormal or
// zero; above, ~1.65e38 instead of inf (SiLU and softmax only need the limits' direction). NaN
// propagates. The clamps also keep the float -> int conversion of n in range (no UB).
inline float ExpF(float x) {
  const float in = x;
  x = x < 88.0f ? x : 88.0f;
  x = x > -87.3365478515625f ? x : -87.3365478515625f;
  // n = round(x / ln 2) via the 1.5 * 2^23 trick (exact for |n| < 2^22).
  const float magic = 12582912.0f;
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = (p * (r * r) + r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return in != in ? in : y * scale;
}

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w   for r < rows; x, y: [rows, dim] with
// row strides ldx / ldy (y may alias x). Sum of squares in 8 interleaved fp32 lanes, fixed order.
void RmsNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, float eps,
             float* y, int64_t ldy);
// Same, with the result rounded to bf16 (the input of the next linear layer).
void RmsNormToBf16(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w,
                   float eps, bf16* y, int64_t ldy);

// Rotates one head vector in place with HF `rotate_half` pairs (i, i + head_dim / 2):
// x_i' = x_i cos - x_{i+h} sin, x_{i+h}' = x_{i+h} cos + x_i sin, with
// angle_i = position * inv_freq[i] (fp32 product, as HF's matmul of positions by inv_freq).
// cos/sin: [head_dim / 2] precomputed for the position by RopeCosSin.
void RopeCosSin(int64_t position, const float* inv_freq, int64_t half, float* cos_out,
                float* sin_out);
void ApplyRope(float* head, int64_t head_dim, const float* cos, const float* sin);

// out[i] = bf16(silu(gate[i]) * up[i]) for i < n; silu(g) = g / (1 + exp(-g)).
void SiluMulToBf16(const float* gate, const float* up, int64_t n, bf16* out);

// x[i] = ExpF(x[i]) for i < n.
void ExpInPlace(float* x, int64_t n);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_OPS_H_
