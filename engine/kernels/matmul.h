// bf16 x bf16 -> fp32 matrix multiplication with a batch-independent reduction order.
//
//   y[i, j] = sum_p x[i, p] * w[j, p]      i < m, j < n, p < k
//
// x: bf16 [m, k], row stride ldx (elements). w: bf16 [n, k] row-major with stride k (the Hugging
// Face nn.Linear layout, used in place, e.g. memory-mapped), or in the WeightLayout the call
// names (below). y: fp32 [m, n], row stride ldy.
// y is written, not accumulated into. pool may be null (runs on the calling thread).
// Thread-safe for distinct outputs; x and w are only read.
//
// Reduction order (the engine's determinism contract: a row's result never depends on
// m, on the other rows in the call, on tiling or on the thread count). For each y[i, j], with
// a[p] = x[i, p], b[p] = w[j, p] (both exact in fp32) and a[p] = b[p] = 0 for p >= k:
//   acc[l] = +0                                   for 8 lanes l = 0..7
//   for each block q = 0, 1, ..., ceil(k / 16) - 1, with p = 16 q + 2 l:
//     acc[l] = fma(a[p + 1], b[p + 1], acc[l])
//     acc[l] = fma(a[p], b[p], acc[l])
//   y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
// every operation in fp32, round-to-nearest-even, with denormal inputs treated as zero and
// denormal results flushed to zero (DAZ/FTZ). This is exactly what vdpbf16ps computes (an fp32
// FMA with DAZ in, FTZ out, odd element first) on 8 lanes, so the AVX-512-BF16, AVX-512, AVX2 and
// scalar paths give bit-identical results. The scalar path emulates DAZ/FTZ in software; it can
// differ from the others only when an fma result lies within half an ulp of FLT_MIN (the
// tininess-after-rounding boundary), which real activations and weights never reach.
// Threads partition n (output features); each y[i, j] is computed by one thread over all of k.
//
// Paths and cost. Every path widens x once per call into thread-local scratch (4 m k bytes on the
// calling thread, reused across calls). For m < 16 the weights are streamed once, straight from
// their bf16 storage, through tiles of 8 weight rows (decode: memory-bound at m = 1). For m >= 16
// each tile of 4 weight rows is widened into per-thread scratch (64 k bytes) and reused by all
// rows (prefill: compute-bound, one fp32 FMA per multiply-add on AVX2). The AVX-512-BF16 path
// uses vdpbf16ps with no widening: at m = 1 each 512-bit register carries two weight rows
// against x, and for m >= 2 two rows of x against one weight row (8 rows x 6 weight rows per
// register tile); with kGroups4 weights, m = 1..8 streams the weights once into registers and
// larger m runs tiles of 6 rows of x x 8 weight rows (matmul_avx512.cc). The AVX2 and AVX-512
// paths run the same tiles on kGroups4 weights, and at m = 1 read four groups side by side
// (matmul_avx_impl.inc).
//
// GEMM backends. One per process (SelectedGemmBackend(), TANDEM_GEMM=own|onednn, default own):
// the kernels above (kOwn), or oneDNN's matmul (kOnednn, libdnnl) on weights prepacked into its
// blocked layout (WeightLayout::kOnednn), which runs oneDNN's brgemm kernels: avx512_core_bf16 on
// AVX-512-BF16 CPUs, avx512_core_amx_bf16 where the CPU has AMX (oneDNN picks, CpuHasAmxBf16()).
// In oneDNN mode every bf16 weight matrix is stored kOnednn (PreferredWeightLayout), so every bf16
// matmul of the model runs on oneDNN at every m: mixing backends by m would make a row's bits
// depend on what it is batched with. The int8 matmuls (matmul_int8.h) stay on the own kernels.
// oneDNN's reduction order is not the canonical one above, so its bits differ from the own
// kernels' (and from AMX's on another host); what it keeps is the contract that matters within a
// host: a row's result depends only on that row, k and the weights, never on m, on the other rows
// or on the thread count (docs/numerics.md "GEMM backends"), because
//   - the output features are cut into fixed blocks of kOnednnBlockColumns (the last one
//     shorter), each block packed on its own and computed by one single-threaded primitive over
//     all of k (the pool hands out whole blocks; oneDNN's OpenMP runtime is held to one thread on
//     every thread that runs a primitive, so oneDNN never splits k between threads);
//   - the rows are cut into blocks of kOnednnBlockRows and the rest, one primitive per row count
//     (1..kOnednnBlockRows), all on the same packed weights; OnednnGemmAvailable() accepts oneDNN
//     only when each of those row counts gets the same brgemm implementation, and the kernel
//     tests check that a row's bits do not change with m, row order or thread count.
#ifndef TANDEM_ENGINE_KERNELS_MATMUL_H_
#define TANDEM_ENGINE_KERNELS_MATMUL_H_

#include <cstdint>
#include <string>

#include "engine/kernels/bf16.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/thread_pool.h"

namespace tandem::engine {

// How the [n, k] weight matrix w is laid out in memory (the same n k elements either way).
//   kRows:    w[j, p] at w + j k + p (the HF nn.Linear layout).
//   kGroups4: rows in groups of four (rows 4g .. 4g + 3 in the 4 k elements from w + 4 g k), each
//             group interleaved by 16-element blocks: w[j, p] at
//             w + (j / 4) 4 k + (p / 16) 64 + (j % 4) 16 + p % 16. Needs n % 4 == 0, k % 16 == 0.
// The kernels read a group's rows together, block by block: with kGroups4 that is one contiguous
// stream, with kRows four streams a row apart, which DRAM serves slower (measured at batch 1 on
// lm_head, 2 threads, alternated: AVX-512-BF16 45-52 GB/s against 34-36, a plain read 50-58;
// AVX2 on Zen 3, 0.91-1.00 of a plain read of the same bytes against 0.74-0.93).
// Results are the same bits in either layout.
//   kOnednn:  oneDNN's blocked layout for this host (matmul_onednn.cc): the n rows in blocks of
//             kOnednnBlockColumns (the last one shorter), block b at byte
//             PackedWeightBytes(b kOnednnBlockColumns, k, kOnednn), each block the [k, columns]
//             matrix in the layout oneDNN's matmul asks for (format_tag::any). The layout depends
//             on the CPU and the oneDNN build, so it is only valid in the process that packed it.
//             Needs OnednnGemmAvailable(). WeightOffset does not apply to it.
enum class WeightLayout { kRows, kGroups4, kOnednn };

// The oneDNN path's fixed blocks (above): output features per packed block and primitive, rows
// per primitive.
inline constexpr int64_t kOnednnBlockColumns = 128;
inline constexpr int64_t kOnednnBlockRows = 32;

// Bytes an [n, k] matrix takes in `layout`: 2 n k, except kOnednn, whose blocks may be padded.
int64_t PackedWeightBytes(int64_t n, int64_t k, WeightLayout layout);

// Offset of w[j, p] in an [n, k] matrix stored in `layout` (kRows or kGroups4).
inline int64_t WeightOffset(int64_t j, int64_t p, int64_t k, WeightLayout layout) {
  if (layout == WeightLayout::kRows) return j * k + p;
  return (j / 4) * 4 * k + (p / 16) * 64 + (j % 4) * 16 + p % 16;
}

// The layout an [n, k] matrix should be stored in for MatmulBf16 on this process's path: kOnednn
// for every shape when SelectedGemmBackend() is kOnednn, else (DetectSimd()) kGroups4 on every
// vector path when the shape allows it, else kRows.
WeightLayout PreferredWeightLayout(int64_t n, int64_t k);

// dst = the kRows matrix w stored in `layout` (PackedWeightBytes(n, k, layout) bytes; dst must
// not overlap w). Aborts when the shape does not allow the layout. kOnednn packs block by block, so
// a matrix may be packed in pieces of whole blocks: rows [r, r + c) with r a multiple of
// kOnednnBlockColumns go to dst + PackedWeightBytes(r, k, kOnednn) / 2.
void PackWeights(const bf16* w, int64_t n, int64_t k, WeightLayout layout, bf16* dst);

// Row j (k elements) of an [n, k] matrix stored in `layout`, copied to out.
void CopyWeightRow(const bf16* w, int64_t n, int64_t k, WeightLayout layout, int64_t j, bf16* out);

// Uses the best path for DetectSimd() (chosen once per process), w in kRows.
void MatmulBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                float* y, int64_t ldy, ThreadPool* pool);

// The same with w stored in `layout`. kGroups4 runs on every vector path (the ones
// PreferredWeightLayout chooses it for); on the scalar path it aborts. kOnednn runs oneDNN
// (whatever SelectedGemmBackend() says; it needs OnednnGemmAvailable()).
void MatmulBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                float* y, int64_t ldy, ThreadPool* pool, WeightLayout layout);

// Same, on an explicit own path; for tests and benchmarks that compare paths. Aborts when the CPU
// cannot run `level` (check SimdLevelSupported first) or the layout is kOnednn.
void MatmulBf16ForLevel(SimdLevel level, const bf16* x, int64_t ldx, int64_t m, int64_t k,
                        const bf16* w, int64_t n, float* y, int64_t ldy, ThreadPool* pool);
void MatmulBf16ForLevel(SimdLevel level, const bf16* x, int64_t ldx, int64_t m, int64_t k,
                        const bf16* w, int64_t n, float* y, int64_t ldy, ThreadPool* pool,
                        WeightLayout layout);

enum class GemmBackend { kOwn, kOnednn };

// This process's backend, decided once: TANDEM_GEMM=own|onednn, unset or empty meaning own (on
// every host, AMX ones included, until the oneDNN path is measured there). TANDEM_GEMM=onednn on a
// host where OnednnGemmAvailable() is false, or an unrecognised value, is reported once on stderr
// and runs the own kernels for the whole process.
GemmBackend SelectedGemmBackend();

// "own", "onednn".
const char* GemmBackendName(GemmBackend backend);

// True when oneDNN has a brgemm bf16 matmul on this host (oneDNN 2.6: avx512_core_bf16 or AMX;
// on AVX2 it has no bf16 matmul, on plain AVX-512 only a gemm whose row bits depend on m) and picks
// the same implementation for every row count 1..kOnednnBlockRows. Probed once (ONEDNN_MAX_CPU_ISA
// caps what oneDNN uses; TANDEM_SIMD does not).
bool OnednnGemmAvailable();

// What the bf16 matmuls of this process run, for logs and benchmarks: "own avx512bf16" (the
// DetectSimd() path) or "onednn brg:avx512_core_bf16" (oneDNN's implementation name).
std::string GemmBackendDescription();

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_MATMUL_H_
