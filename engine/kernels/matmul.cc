#include "engine/kernels/matmul.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/kernels/matmul_internal.h"

namespace tandem::engine {
namespace internal {
namespace {

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

struct Scratch {
  std::unique_ptr<float, AlignedFree> data;
  int64_t capacity = 0;
};

constexpr int kScratchSlots = 4;

// Flush-to-zero / denormals-are-zero, as vdpbf16ps applies them (the sign of zero is kept).
inline float Ftz(float v) { return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v; }

// One output of the canonical order documented in matmul.h, in plain C++.
float DotScalar(const float* a, const bf16* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t base = 0; base < k; base += 16) {
    for (int l = 0; l < 8; ++l) {
      const int64_t p = base + 2 * l;
      const float a1 = p + 1 < k ? a[p + 1] : 0.0f;
      const float b1 = p + 1 < k ? Ftz(Bf16ToF32(b[p + 1])) : 0.0f;
      const float a0 = p < k ? a[p] : 0.0f;
      const float b0 = p < k ? Ftz(Bf16ToF32(b[p])) : 0.0f;
      acc[l] = Ftz(std::fma(a1, b1, acc[l]));
      acc[l] = Ftz(std::fma(a0, b0, acc[l]));
    }
  }
  const float u0 = Ftz(Ftz(acc[0] + acc[4]) + Ftz(acc[2] + acc[6]));
  const float u1 = Ftz(Ftz(acc[1] + acc[5]) + Ftz(acc[3] + acc[7]));
  return Ftz(u0 + u1);
}

}  // namespace

float* ScratchFloats(int64_t n, int slot) {
  thread_local Scratch scratch[kScratchSlots];
  Scratch& s = scratch[slot];
  if (s.capacity < n) {
    const int64_t capacity = (n + 15) / 16 * 16;
    void* p = std::aligned_alloc(64, static_cast<size_t>(capacity) * sizeof(float));
    TANDEM_CHECK(p != nullptr,
                 absl::StrCat("matmul: cannot allocate ",
                              capacity * static_cast<int64_t>(sizeof(float)), " bytes of scratch"));
    s.data.reset(static_cast<float*>(p));
    s.capacity = capacity;
  }
  return s.data.get();
}

void MatmulBf16Scalar(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  // x widened once (denormals flushed, as the vector paths' DAZ does).
  float* xf = ScratchFloats(m * k, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) xf[i * k + p] = Ftz(Bf16ToF32(x[i * ldx + p]));
  }
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      for (int64_t i = 0; i < m; ++i) y[i * ldy + j] = DotScalar(xf + i * k, w + j * k, k);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n, m * n * k, body);
  } else {
    body(0, n);
  }
}

}  // namespace internal

namespace {

using MatmulFn = void (*)(const bf16*, int64_t, int64_t, int64_t, const bf16*, int64_t, float*,
                          int64_t, ThreadPool*);

// The path for `level` on [n, k] kGroups4 weights; aborts when there is none (the scalar path, or
// a shape the layout does not allow).
MatmulFn GroupsPathFor(SimdLevel level, int64_t n, int64_t k) {
  MatmulFn path = nullptr;
  switch (level) {
    case SimdLevel::kAvx512Bf16:
      path = internal::MatmulBf16Avx512Bf16Groups4;
      break;
    case SimdLevel::kAvx512:
      path = internal::MatmulBf16Avx512Groups4;
      break;
    case SimdLevel::kAvx2:
      path = internal::MatmulBf16Avx2Groups4;
      break;
    case SimdLevel::kScalar:
      break;
  }
  TANDEM_CHECK(path != nullptr && n % 4 == 0 && k % 16 == 0,
               absl::StrCat("MatmulBf16: weights in groups of 4 rows need a vector path and n % 4 "
                            "== 0, k % 16 == 0 (path ",
                            SimdLevelName(level), ", n ", n, ", k ", k, ")"));
  return path;
}

MatmulFn PathFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512Bf16:
      return internal::MatmulBf16Avx512Bf16;
    case SimdLevel::kAvx512:
      return internal::MatmulBf16Avx512;
    case SimdLevel::kAvx2:
      return internal::MatmulBf16Avx2;
    case SimdLevel::kScalar:
      break;
  }
  return internal::MatmulBf16Scalar;
}

}  // namespace

void MatmulBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                float* y, int64_t ldy, ThreadPool* pool) {
  static const MatmulFn path = PathFor(DetectSimd());
  path(x, ldx, m, k, w, n, y, ldy, pool);
}

WeightLayout PreferredWeightLayout(int64_t n, int64_t k) {
  if (SelectedGemmBackend() == GemmBackend::kOnednn) return WeightLayout::kOnednn;
  const bool fits = n > 0 && n % 4 == 0 && k > 0 && k % 16 == 0;
  return fits && DetectSimd() != SimdLevel::kScalar ? WeightLayout::kGroups4 : WeightLayout::kRows;
}

int64_t PackedWeightBytes(int64_t n, int64_t k, WeightLayout layout) {
  if (layout == WeightLayout::kOnednn) return internal::OnednnPackedBytes(n, k);
  return 2 * n * k;
}

void PackWeights(const bf16* w, int64_t n, int64_t k, WeightLayout layout, bf16* dst) {
  if (layout == WeightLayout::kOnednn) {
    internal::OnednnPack(w, n, k, dst);
    return;
  }
  if (layout == WeightLayout::kRows) {
    std::memcpy(dst, w, static_cast<size_t>(n * k) * sizeof(bf16));
    return;
  }
  TANDEM_CHECK(n % 4 == 0 && k % 16 == 0,
               absl::StrCat("PackWeights: a [", n, ", ", k,
                            "] matrix cannot be stored in groups of 4 rows"));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; p += 16) {
      std::memcpy(dst + WeightOffset(j, p, k, layout), w + j * k + p, 16 * sizeof(bf16));
    }
  }
}

void CopyWeightRow(const bf16* w, int64_t n, int64_t k, WeightLayout layout, int64_t j, bf16* out) {
  if (layout == WeightLayout::kOnednn) {
    internal::OnednnCopyRow(w, n, k, j, out);
    return;
  }
  if (layout == WeightLayout::kRows) {
    std::memcpy(out, w + j * k, static_cast<size_t>(k) * sizeof(bf16));
    return;
  }
  for (int64_t p = 0; p < k; p += 16) {
    std::memcpy(out + p, w + WeightOffset(j, p, k, layout), 16 * sizeof(bf16));
  }
}

void MatmulBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                float* y, int64_t ldy, ThreadPool* pool, WeightLayout layout) {
  if (layout == WeightLayout::kRows) {
    MatmulBf16(x, ldx, m, k, w, n, y, ldy, pool);
    return;
  }
  if (layout == WeightLayout::kOnednn) {
    internal::MatmulBf16Onednn(x, ldx, m, k, w, n, y, ldy, pool);
    return;
  }
  static const SimdLevel level = DetectSimd();
  GroupsPathFor(level, n, k)(x, ldx, m, k, w, n, y, ldy, pool);
}

void MatmulBf16ForLevel(SimdLevel level, const bf16* x, int64_t ldx, int64_t m, int64_t k,
                        const bf16* w, int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  MatmulBf16ForLevel(level, x, ldx, m, k, w, n, y, ldy, pool, WeightLayout::kRows);
}

void MatmulBf16ForLevel(SimdLevel level, const bf16* x, int64_t ldx, int64_t m, int64_t k,
                        const bf16* w, int64_t n, float* y, int64_t ldy, ThreadPool* pool,
                        WeightLayout layout) {
  TANDEM_CHECK(
      SimdLevelSupported(level),
      absl::StrCat("MatmulBf16ForLevel: this CPU cannot run the ", SimdLevelName(level), " path"));
  TANDEM_CHECK(layout != WeightLayout::kOnednn,
               "MatmulBf16ForLevel: weights in oneDNN's layout run on oneDNN (MatmulBf16)");
  const MatmulFn path = layout == WeightLayout::kRows ? PathFor(level) : GroupsPathFor(level, n, k);
  path(x, ldx, m, k, w, n, y, ldy, pool);
}

}  // namespace tandem::engine
