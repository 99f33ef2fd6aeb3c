#include "engine/kernels/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/kernels/matmul_int8_internal.h"

namespace tandem::engine {
namespace {

using internal::Int8Job;
using internal::kInt8Block;

// Rows of x one pass over a thread's weight groups covers (their quantized rows, kp bytes each,
// stay in L2 while the groups stream by).
constexpr int64_t kRowBlock = 64;

// Round half to even of a float below 2^22 in magnitude, with plain fp32 additions (no library
// call, so the loop vectorizes; this file is compiled without contraction into FMA).
inline float RoundHalfEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return v >= 0.0f ? (v + kMagic) - kMagic : (v - kMagic) + kMagic;
}

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};

// Thread-local, 64-byte aligned scratch for the quantized rows of x.
uint8_t* ScratchBytes(int64_t n) {
  thread_local std::unique_ptr<uint8_t, FreeBytes> data;
  thread_local int64_t capacity = 0;
  if (capacity < n) {
    const int64_t bytes = (n + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, static_cast<size_t>(bytes));
    TANDEM_CHECK(p != nullptr, absl::StrCat("MatmulInt8: cannot allocate ", bytes, " bytes"));
    data.reset(static_cast<uint8_t*>(p));
    capacity = bytes;
  }
  return data.get();
}

internal::Int8GroupsFn GroupsFnFor(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return internal::MatmulInt8GroupsAvx512Vnni;
    case Int8Path::kAvxVnni:
      return internal::MatmulInt8GroupsAvxVnni;
    case Int8Path::kAvx2:
      return internal::MatmulInt8GroupsAvx2;
    case Int8Path::kScalar:
      break;
  }
  return internal::MatmulInt8GroupsScalar;
}

internal::QuantizeRowFn QuantizeFnFor(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return internal::QuantizeRowAvx512;
    case Int8Path::kAvxVnni:
    case Int8Path::kAvx2:
      return internal::QuantizeRowAvx2;
    case Int8Path::kScalar:
      break;
  }
  return internal::QuantizeRowScalar;
}

bool UsesOffset(Int8Path path) {
  return path == Int8Path::kAvx512Vnni || path == Int8Path::kAvxVnni;
}

}  // namespace

namespace internal {

void MatmulInt8GroupsScalar(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  const int8_t* xq = reinterpret_cast<const int8_t*>(job.xq);
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int8_t* wg = job.w->data + g * 4 * job.kp;
    for (int64_t i = 0; i < job.m; ++i) {
      const int8_t* x = xq + i * job.kp;
      int32_t acc[4] = {0, 0, 0, 0};
      for (int64_t q = 0; q < job.kp / kInt8Block; ++q) {
        for (int r = 0; r < 4; ++r) {
          const int8_t* wb = wg + q * 4 * kInt8Block + r * kInt8Block;
          const int8_t* xb = x + q * kInt8Block;
          for (int64_t p = 0; p < kInt8Block; ++p) acc[r] += int32_t{xb[p]} * int32_t{wb[p]};
        }
      }
      StoreInt8Group<false>(job, i, g, acc);
    }
  }
}

}  // namespace internal

Int8Path DetectInt8Path() {
  static const Int8Path path = [] {
    const SimdLevel level = DetectSimd();
    if (level >= SimdLevel::kAvx512 && CpuHasAvx512Vnni()) return Int8Path::kAvx512Vnni;
    if (level >= SimdLevel::kAvx2 && CpuHasAvxVnni()) return Int8Path::kAvxVnni;
    if (level >= SimdLevel::kAvx2) return Int8Path::kAvx2;
    return Int8Path::kScalar;
  }();
  return path;
}

bool Int8PathSupported(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return CpuHasAvx512Vnni();
    case Int8Path::kAvxVnni:
      return CpuHasAvxVnni();
    case Int8Path::kAvx2:
      return SimdLevelSupported(SimdLevel::kAvx2);
    case Int8Path::kScalar:
      return true;
  }
  return false;
}

const char* Int8PathName(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return "avx512vnni";
    case Int8Path::kAvxVnni:
      return "avxvnni";
    case Int8Path::kAvx2:
      return "avx2";
    case Int8Path::kScalar:
      return "scalar";
  }
  return "unknown";
}

int64_t Int8PackedBytes(int64_t n, int64_t k) {
  return (n + 3) / 4 * 4 * ((k + kInt8Block - 1) / kInt8Block * kInt8Block);
}

void PackInt8Rows(const int8_t* q, int64_t row0, int64_t rows, int64_t n, int64_t k, int8_t* dst,
                  int32_t* row_sums) {
  TANDEM_CHECK(row0 % 4 == 0 && row0 >= 0 && rows >= 0 && row0 + rows <= n,
               absl::StrCat("PackInt8Rows: rows [", row0, ", ", row0 + rows, ") of ", n));
  const int64_t kp = (k + kInt8Block - 1) / kInt8Block * kInt8Block;
  // Whole groups covering the rows: zero them first (padding rows and columns).
  const int64_t end_group = std::min((row0 + rows + 3) / 4, (n + 3) / 4);
  std::memset(dst + row0 * kp, 0, static_cast<size_t>((end_group * 4 - row0) * kp));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = row0 + r;
    const int8_t* src = q + r * k;
    int32_t sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += src[p];
    row_sums[j] = sum;
    int8_t* group = dst + (j / 4) * 4 * kp + (j % 4) * kInt8Block;
    for (int64_t p = 0; p < k; p += kInt8Block) {
      const int64_t len = std::min(kInt8Block, k - p);
      std::memcpy(group + (p / kInt8Block) * 4 * kInt8Block, src + p, static_cast<size_t>(len));
    }
  }
}

float QuantizeWeightRow(const float* w, int64_t k, int8_t* q) {
  float amax = 0.0f;
  for (int64_t p = 0; p < k; ++p) amax = std::max(amax, std::fabs(w[p]));
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  for (int64_t p = 0; p < k; ++p) {
    const float v = std::nearbyint(w[p] / scale);
    q[p] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
  return scale;
}

float QuantizeActivationRow(const bf16* x, int64_t k, int8_t* q) {
  float amax = 0.0f;
  // NaNs are skipped (std::max keeps amax when the comparison is false), as the vector paths'
  // max(|x|, amax) does.
  for (int64_t p = 0; p < k; ++p) amax = std::max(amax, std::fabs(Bf16ToF32(x[p])));
  if (!(amax > 0.0f)) {
    std::memset(q, 0, static_cast<size_t>(k));
    return 0.0f;
  }
  const float inv = 127.0f / amax;
  for (int64_t p = 0; p < k; ++p) {
    const float v = Bf16ToF32(x[p]) * inv;
    // A NaN product (a NaN in x, or 0 times an infinite 127 / max|x|) quantizes to 0.
    q[p] = v == v ? static_cast<int8_t>(std::clamp(RoundHalfEven(v), -127.0f, 127.0f)) : 0;
  }
  return amax / 127.0f;
}

namespace internal {

float QuantizeRowScalar(const bf16* x, int64_t k, int64_t kp, bool offset, uint8_t* q) {
  const float sx = QuantizeActivationRow(x, k, reinterpret_cast<int8_t*>(q));
  std::memset(q + k, 0, static_cast<size_t>(kp - k));
  if (offset) {
    for (int64_t p = 0; p < kp; ++p) q[p] = static_cast<uint8_t>(q[p] + 128u);
  }
  return sx;
}

}  // namespace internal

void MatmulInt8ForPath(Int8Path path, const bf16* x, int64_t ldx, int64_t m, const Int8Matrix& w,
                       float* y, int64_t ldy, ThreadPool* pool) {
  TANDEM_CHECK(Int8PathSupported(path), absl::StrCat("MatmulInt8ForPath: this CPU cannot run the ",
                                                     Int8PathName(path), " path"));
  if (m <= 0 || w.n <= 0) return;
  const int64_t k = w.k;
  const int64_t kp = (k + kInt8Block - 1) / kInt8Block * kInt8Block;
  const bool offset = UsesOffset(path);
  const internal::QuantizeRowFn quantize_row = QuantizeFnFor(path);
  const internal::Int8GroupsFn fn = GroupsFnFor(path);
  const int64_t groups = (w.n + 3) / 4;
  if (m == 1) {
    // Decode: each thread quantizes the row into its own scratch (well under a microsecond on the
    // vector paths) and streams its groups, so a call is one pool dispatch and no thread waits
    // for another's quantization. The last quarter of the groups is shared out in chunks
    // (ThreadPool::ParallelForStreaming), so a thread that memory served more slowly in this call
    // does not hold the other waiting.
    auto body = [&](ThreadPool::Claim& claim) {
      Int8Job job;
      uint8_t* xq = ScratchBytes(kp);
      const float sx = quantize_row(x, k, kp, offset, xq);
      job.xq = xq;
      job.sx = &sx;
      job.m = 1;
      job.kp = kp;
      job.w = &w;
      job.y = y;
      job.ldy = ldy;
      int64_t begin, end;
      while (claim.Next(&begin, &end)) fn(job, begin, end);
    };
    if (pool != nullptr) {
      pool->ParallelForStreaming(groups, w.n * k, 4 * kp, body);
    } else {
      ThreadPool::Claim all = ThreadPool::Claim::Whole(groups);
      body(all);
    }
    return;
  }
  uint8_t* xq = ScratchBytes(m * kp + m * static_cast<int64_t>(sizeof(float)));
  float* sx = reinterpret_cast<float*>(xq + m * kp);
  auto quantize = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      sx[i] = quantize_row(x + i * ldx, k, kp, offset, xq + i * kp);
  };
  if (pool != nullptr) {
    pool->ParallelFor(m, 4 * m * k, quantize);
  } else {
    quantize(0, m);
  }
  auto body = [&](int64_t g_begin, int64_t g_end) {
    for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
      Int8Job job;
      job.xq = xq + i0 * kp;
      job.sx = sx + i0;
      job.m = std::min(kRowBlock, m - i0);
      job.kp = kp;
      job.w = &w;
      job.y = y + i0 * ldy;
      job.ldy = ldy;
      fn(job, g_begin, g_end);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(groups, m * w.n * k, body);
  } else {
    body(0, groups);
  }
}

void MatmulInt8(const bf16* x, int64_t ldx, int64_t m, const Int8Matrix& w, float* y, int64_t ldy,
                ThreadPool* pool) {
  static const Int8Path path = DetectInt8Path();
  MatmulInt8ForPath(path, x, ldx, m, w, y, ldy, pool);
}

}  // namespace tandem::engine
