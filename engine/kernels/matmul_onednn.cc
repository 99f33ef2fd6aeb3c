// The oneDNN GEMM backend (matmul.h "GEMM backends"): weights packed per column block into the
// layout oneDNN's matmul asks for, and one single-threaded primitive per (row count, k, block
// width), cached per thread. oneDNN 2.6 runs brgemm only on dense operands (a strided x or y
// falls back to its reference matmul), so x rows ldx != k apart are first copied together, and
// every primitive writes a dense [rows, columns] tile that is then copied into y. Every primitive
// is checked to be the implementation OnednnGemmAvailable() accepted.
//
// Threading: Debian's libdnnl uses the OpenMP runtime, whose thread count is a per-thread setting.
// Every thread that creates or runs a primitive here sets it to 1 first (OnOneThread; the
// thread's OpenMP count stays 1 afterwards), so a primitive is planned for and runs on one
// thread: oneDNN never splits k between threads, and the parallelism is ours (the pool hands out
// whole column blocks). Primitives are per thread too, so no two threads share one (or its
// scratchpad).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_internal.h"

namespace tandem::engine {
namespace {

using dnnl::memory;
using Dt = memory::data_type;

// Checked on every use: something else on the thread (a benchmark's own oneDNN GEMM) may have
// raised it since.
void OnOneThread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

dnnl::engine& CpuEngine() {
  static dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

memory::desc PlainWeights(int64_t k, int64_t cols) {
  // [cols, k] rows (the nn.Linear layout) read as oneDNN's [k, cols] weights: tag "ba".
  return memory::desc({k, cols}, Dt::bf16, memory::format_tag::ba);
}

// The primitive descriptor for dense `rows` x [k, cols] with weights `weights` (format any to let
// oneDNN choose). Throws dnnl::error when oneDNN has none.
dnnl::matmul::primitive_desc Describe(int64_t rows, int64_t k, int64_t cols,
                                      const memory::desc& weights) {
  OnOneThread();
  const memory::desc a({rows, k}, Dt::bf16, memory::format_tag::ab);
  const memory::desc c({rows, cols}, Dt::f32, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, weights, c), CpuEngine());
}

// The packed layout of a [k, cols] block, as the full-row-block primitive chooses it; the same
// for every thread and row count (shared, computed once per shape).
const memory::desc& BlockWeights(int64_t k, int64_t cols) {
  static std::mutex mu;
  static std::map<std::pair<int64_t, int64_t>, memory::desc>* const cache =
      new std::map<std::pair<int64_t, int64_t>, memory::desc>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find({k, cols});
  if (it == cache->end()) {
    const memory::desc any({k, cols}, Dt::bf16, memory::format_tag::any);
    const memory::desc md = Describe(kOnednnBlockRows, k, cols, any).weights_desc();
    it = cache->emplace(std::make_pair(k, cols), md).first;
  }
  return it->second;
}

int64_t BlockBytes(int64_t k, int64_t cols) {
  return static_cast<int64_t>(BlockWeights(k, cols).get_size());
}

// Element offset of (p, c) in a block stored as `md` (a blocked layout: outer strides plus
// nested inner blocks, innermost last), as oneDNN's memory_desc_wrapper::off_v computes it.
int64_t BlockedOffset(const memory::desc& md, int64_t p, int64_t c) {
  const dnnl_memory_desc_t& d = md.data;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  int64_t idx[2] = {p, c};
  int64_t block[2] = {1, 1};
  for (int i = 0; i < b.inner_nblks; ++i) block[b.inner_idxs[i]] *= b.inner_blks[i];
  int64_t off = d.offset0;
  for (int dim = 0; dim < 2; ++dim) off += idx[dim] / block[dim] * b.strides[dim];
  int64_t rem[2] = {idx[0] % block[0], idx[1] % block[1]};
  int64_t step = 1;
  for (int i = b.inner_nblks - 1; i >= 0; --i) {
    const int dim = b.inner_idxs[i];
    off += rem[dim] % b.inner_blks[i] * step;
    rem[dim] /= b.inner_blks[i];
    step *= b.inner_blks[i];
  }
  return off;
}

struct Primitive {
  dnnl::matmul prim;
  memory a, w, c;
};

const std::string& OnednnImplementation();

// This thread's primitive for `rows` rows of x against a [k, cols] block.
Primitive& PrimitiveFor(int64_t rows, int64_t k, int64_t cols) {
  thread_local absl::flat_hash_map<std::tuple<int64_t, int64_t, int64_t>, Primitive> cache;
  const auto key = std::make_tuple(rows, k, cols);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const memory::desc& weights = BlockWeights(k, cols);
  const dnnl::matmul::primitive_desc pd = Describe(rows, k, cols, weights);
  TANDEM_CHECK(pd.impl_info_str() == OnednnImplementation(),
               absl::StrCat("matmul: oneDNN runs ", rows, " x [", k, ", ", cols, "] on ",
                            pd.impl_info_str(), ", not ", OnednnImplementation(),
                            "; a row's bits would depend on its batch (use TANDEM_GEMM=own)"));
  Primitive p{dnnl::matmul(pd), memory(pd.src_desc(), CpuEngine(), DNNL_MEMORY_NONE),
              memory(weights, CpuEngine(), DNNL_MEMORY_NONE),
              memory(pd.dst_desc(), CpuEngine(), DNNL_MEMORY_NONE)};
  return cache.emplace(key, std::move(p)).first->second;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

// oneDNN's implementation for each row count 1..kOnednnBlockRows on one shape; empty when oneDNN
// has no bf16 matmul for the packed weights.
std::string ProbeImplementation() {
  // Linux must grant the AMX tile state before oneDNN looks for AMX (cpu.h asks once and reports
  // a refusal); without it oneDNN runs its AVX-512 kernels.
  const bool amx = CpuHasAmxBf16();
  try {
    constexpr int64_t k = 256, cols = kOnednnBlockColumns;
    const memory::desc any({k, cols}, Dt::bf16, memory::format_tag::any);
    const dnnl::matmul::primitive_desc full = Describe(kOnednnBlockRows, k, cols, any);
    const std::string impl = full.impl_info_str();
    if (impl.rfind("brg:", 0) != 0) {
      std::fprintf(stderr,
                   "matmul: oneDNN's bf16 matmul here is %s, not brgemm (it needs AVX-512-BF16 "
                   "or AMX); not using oneDNN\n",
                   impl.c_str());
      return "";
    }
    if (amx && impl.find("amx") == std::string::npos) {
      std::fprintf(stderr, "matmul: the CPU has AMX-BF16 but oneDNN picks %s\n", impl.c_str());
    }
    for (int64_t rows = 1; rows < kOnednnBlockRows; ++rows) {
      const std::string r = Describe(rows, k, cols, full.weights_desc()).impl_info_str();
      if (r != impl) {
        std::fprintf(stderr,
                     "matmul: oneDNN runs %ld rows on %s but %ld on %s; a row's bits would "
                     "depend on its batch, not using oneDNN\n",
                     static_cast<long>(rows), r.c_str(), static_cast<long>(kOnednnBlockRows),
                     impl.c_str());
        return "";
      }
    }
    return impl;
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "matmul: oneDNN has no bf16 matmul on this host (%s); not using it\n",
                 e.what());
    return "";
  }
}

const std::string& OnednnImplementation() {
  static const std::string* const impl = new std::string(ProbeImplementation());
  return *impl;
}

void CheckAvailable(const char* what) {
  TANDEM_CHECK(OnednnGemmAvailable(),
               absl::StrCat(what, ": oneDNN has no usable bf16 matmul on this host"));
}

GemmBackend ChooseBackend() {
  const char* env = std::getenv("TANDEM_GEMM");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "own") == 0) return GemmBackend::kOwn;
  if (std::strcmp(env, "onednn") != 0) {
    std::fprintf(stderr, "TANDEM_GEMM=%s is not one of own, onednn; using own\n", env);
    return GemmBackend::kOwn;
  }
  if (!OnednnGemmAvailable()) {
    std::fprintf(stderr, "TANDEM_GEMM=onednn: oneDNN cannot run here; using own\n");
    return GemmBackend::kOwn;
  }
  return GemmBackend::kOnednn;
}

}  // namespace

namespace internal {

int64_t OnednnPackedBytes(int64_t n, int64_t k) {
  CheckAvailable("PackedWeightBytes");
  const int64_t full = n / kOnednnBlockColumns, tail = n % kOnednnBlockColumns;
  return (full > 0 ? full * BlockBytes(k, kOnednnBlockColumns) : 0) +
         (tail > 0 ? BlockBytes(k, tail) : 0);
}

void OnednnPack(const bf16* w, int64_t n, int64_t k, bf16* dst) {
  CheckAvailable("PackWeights");
  OnOneThread();
  dnnl::stream& stream = ThreadStream();
  for (int64_t r = 0; r < n; r += kOnednnBlockColumns) {
    const int64_t cols = std::min(kOnednnBlockColumns, n - r);
    memory src(PlainWeights(k, cols), CpuEngine(), const_cast<bf16*>(w + r * k));
    memory out(BlockWeights(k, cols), CpuEngine(), dst + OnednnPackedBytes(r, k) / 2);
    dnnl::reorder(src, out).execute(stream, src, out);
  }
  stream.wait();
}

void OnednnCopyRow(const bf16* w, int64_t n, int64_t k, int64_t j, bf16* out) {
  const int64_t r = j / kOnednnBlockColumns * kOnednnBlockColumns;
  const memory::desc& md = BlockWeights(k, std::min(kOnednnBlockColumns, n - r));
  const bf16* block = w + OnednnPackedBytes(r, k) / 2;
  for (int64_t p = 0; p < k; ++p) out[p] = block[BlockedOffset(md, p, j - r)];
}

void MatmulBf16Onednn(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
                      float* y, int64_t ldy, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  CheckAvailable("MatmulBf16");
  const int64_t blocks = (n + kOnednnBlockColumns - 1) / kOnednnBlockColumns;
  const int64_t block_elems =
      n >= kOnednnBlockColumns ? OnednnPackedBytes(kOnednnBlockColumns, k) / 2 : 0;
  // x dense: as it is when its rows are k apart, else copied (shared by the threads, read only).
  const bf16* xd = x;
  if (ldx != k) {
    bf16* dense = reinterpret_cast<bf16*>(internal::ScratchFloats((m * k + 1) / 2, 0));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(dense + i * k, x + i * ldx, static_cast<size_t>(k) * sizeof(bf16));
    }
    xd = dense;
  }
  auto body = [&](int64_t b0, int64_t b1) {
    OnOneThread();
    dnnl::stream& stream = ThreadStream();
    float* tile = internal::ScratchFloats(kOnednnBlockRows * kOnednnBlockColumns, 1);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kOnednnBlockColumns;
      const int64_t cols = std::min(kOnednnBlockColumns, n - c0);
      for (int64_t i = 0; i < m; i += kOnednnBlockRows) {
        const int64_t rows = std::min(kOnednnBlockRows, m - i);
        Primitive& p = PrimitiveFor(rows, k, cols);
        p.a.set_data_handle(const_cast<bf16*>(xd + i * k));
        p.w.set_data_handle(const_cast<bf16*>(w + b * block_elems));
        p.c.set_data_handle(tile);
        p.prim.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.w}, {DNNL_ARG_DST, p.c}});
        stream.wait();
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(y + (i + r) * ldy + c0, tile + r * cols,
                      static_cast<size_t>(cols) * sizeof(float));
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(blocks, m * n * k, body);
  } else {
    body(0, blocks);
  }
}

}  // namespace internal

bool OnednnGemmAvailable() { return !OnednnImplementation().empty(); }

GemmBackend SelectedGemmBackend() {
  static const GemmBackend backend = ChooseBackend();
  return backend;
}

const char* GemmBackendName(GemmBackend backend) {
  return backend == GemmBackend::kOnednn ? "onednn" : "own";
}

std::string GemmBackendDescription() {
  if (SelectedGemmBackend() == GemmBackend::kOnednn) {
    return absl::StrCat("onednn ", OnednnImplementation());
  }
  return absl::StrCat("own ", SimdLevelName(DetectSimd()));
}

}  // namespace tandem::engine
