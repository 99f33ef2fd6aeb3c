// W8A8 int8 matrix multiplication: per-output-channel int8 weights, per-token int8 activations
// quantized on the fly, int32 accumulation, fp32 output (docs/numerics.md, "W8A8 int8").
//
//   y[i, j] = (float(acc[i, j]) * sx[i]) * sw[j],   acc[i, j] = sum_p qx[i, p] * qw[j, p]
//
// qw: int8 [n, k] weights in [-128, 127] with fp32 scales sw [n] (symmetric, per output channel).
// qx, sx: x's row i (bf16 [k]) quantized by QuantizeActivationRow below (symmetric, per token:
// sx = max|x| / 127, qx = round_half_even(x * (127 / max|x|)) in [-127, 127]).
// acc is exact in int32 for k < 2^31 / (255 * 128) (65,793; the VNNI paths add 128 to qx, below),
// so every path (scalar, AVX2, AVX-VNNI, AVX-512-VNNI) computes the same integer, and the two fp32
// products round the same on each: results are bit-identical across paths, and a row's result
// never depends on m, on the other rows of the call, on tiling or on the thread count (the
// engine's determinism contract, as for MatmulBf16).
//
// Weights are stored packed (Int8Matrix) in one layout every path reads: rows in groups of four,
// each group interleaved by 64-byte blocks of k, zero padded to whole groups and blocks:
//   qw[j, p] at data + (j / 4) 4 kp + (p / 64) 256 + (j % 4) 64 + p % 64,   kp = ceil(k / 64) 64
// so a group of four rows is one contiguous stream (the fastest DRAM pattern at batch 1, as for
// the bf16 kGroups4 layout, matmul.h).
//
// Paths. The VNNI instructions (vpdpbusd) multiply unsigned by signed bytes: those paths feed
// qx + 128 (in [1, 255]) and subtract 128 * sum_p qw[j, p] (Int8Matrix::row_sums) at the end. The
// AVX2 path has only vpmaddubsw, whose 16-bit pair sums saturate for 255 * 128: it multiplies
// |qw| (unsigned, <= 128) by qx with qw's sign (<= 127 in magnitude), whose pair sums stay below
// 2^15. Threads partition the groups of weight rows; each output is computed by one thread.
//
// Cost. x is quantized once per call with the path's vector instructions (the same bytes as
// QuantizeActivationRow; in scalar code 1.6 us at k = 896 and 8.5 us at k = 4864 on Zen 4, 4-12%
// of an m = 1 call from DRAM): at m = 1 by each thread for itself inside the one pool dispatch, for
// larger m split over the threads by rows. At m = 1 every vector path reads two groups side by
// side (matmul_int8_avx512.cc); at Qwen2.5-0.5B shapes on Zen 4, 2 threads, kernels_bench
// --int8-only, alternated: AVX-512-VNNI 0.91-0.97 of a plain read of the same bytes on a quiet
// host, against 0.73-0.84 with the scalar quantization on the calling thread and four groups side
// by side (0.83-0.92 against 0.80-0.87 on a host at load 11); AVX2 (TANDEM_SIMD=avx2), one group
// at a time before, 0.81-0.91 against 0.72-0.89 at load 11.
//
// Thread-safety: calls are thread-safe for distinct outputs; x and the weights are only read.
#ifndef TANDEM_ENGINE_KERNELS_MATMUL_INT8_H_
#define TANDEM_ENGINE_KERNELS_MATMUL_INT8_H_

#include <cstdint>

#include "engine/kernels/bf16.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/thread_pool.h"

namespace tandem::engine {

// A packed int8 weight matrix (a view: the caller owns the three arrays, which must outlive
// every call using it). data: Int8PackedBytes(n, k) bytes, 64-byte aligned.
struct Int8Matrix {
  const int8_t* data = nullptr;
  const float* scales = nullptr;      // [n] sw
  const int32_t* row_sums = nullptr;  // [n] sum_p qw[j, p]
  int64_t n = 0;
  int64_t k = 0;
};

// The int8 code paths, in the order of preference.
//   kAvx2:       vpmaddubsw + vpmaddwd on 256-bit registers (any kAvx2 CPU).
//   kAvxVnni:    vpdpbusd on 256-bit registers (AVX_VNNI; kAvx2).
//   kAvx512Vnni: vpdpbusd on 512-bit registers (AVX512_VNNI; kAvx512).
enum class Int8Path { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3 };

// The best path for DetectSimd() (so TANDEM_SIMD caps it: scalar -> kScalar, avx2 -> kAvxVnni or
// kAvx2) and this CPU's VNNI extensions.
Int8Path DetectInt8Path();
// True when this CPU can run `path` (TANDEM_SIMD ignored).
bool Int8PathSupported(Int8Path path);
// "scalar", "avx2", "avxvnni", "avx512vnni".
const char* Int8PathName(Int8Path path);

// Bytes of the packed layout of an [n, k] matrix.
int64_t Int8PackedBytes(int64_t n, int64_t k);

// Packs rows [row0, row0 + rows) of an [n, k] int8 matrix (q: rows x k, row-major) into dst, the
// whole packed matrix (row0 % 4 == 0; padding rows of the last group and padding columns are
// written as zero). Also stores the rows' sums in row_sums[row0 ..].
void PackInt8Rows(const int8_t* q, int64_t row0, int64_t rows, int64_t n, int64_t k, int8_t* dst,
                  int32_t* row_sums);

// Symmetric per-channel quantization of one weight row w [k] (fp32 values, e.g. widened bf16):
// scale = max|w| / 127 (1 when the row is all zero), q[p] = round_half_even(w[p] / scale),
// clamped to [-127, 127]. Returns the scale.
float QuantizeWeightRow(const float* w, int64_t k, int8_t* q);

// Symmetric per-token quantization of one activation row x [k]: returns sx = max|x| / 127 (0 when
// the row is all zero) and writes q[p] = round_half_even(x[p] * (127 / max|x|)) (0 when all
// zero). NaNs are skipped by the maximum and quantize to 0; other results of non-finite inputs
// are unspecified, but the same on every path.
float QuantizeActivationRow(const bf16* x, int64_t k, int8_t* q);

// y [m, n] (row stride ldy) = x [m, k] (bf16, row stride ldx) times w^T, on DetectInt8Path().
// pool may be null (runs on the calling thread). y is written, not accumulated into.
void MatmulInt8(const bf16* x, int64_t ldx, int64_t m, const Int8Matrix& w, float* y, int64_t ldy,
                ThreadPool* pool);

// The same on an explicit path, for tests and benchmarks; aborts when the CPU cannot run it.
void MatmulInt8ForPath(Int8Path path, const bf16* x, int64_t ldx, int64_t m, const Int8Matrix& w,
                       float* y, int64_t ldy, ThreadPool* pool);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_MATMUL_INT8_H_
