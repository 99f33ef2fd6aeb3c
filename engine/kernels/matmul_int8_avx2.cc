// The 256-bit int8 paths: AVX2 (vpmaddubsw) and AVX-VNNI (vpdpbusd), the same tiles
// (matmul_int8_avx2_impl.inc) compiled for each instruction set.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/matmul_int8_internal.h"

namespace tandem::engine::internal {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace int8_avx2 {
#define TANDEM_INT8_VNNI 0
#include "engine/kernels/matmul_int8_avx2_impl.inc"
#undef TANDEM_INT8_VNNI
}  // namespace int8_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace int8_avxvnni {
#define TANDEM_INT8_VNNI 1
#include "engine/kernels/matmul_int8_avx2_impl.inc"
#undef TANDEM_INT8_VNNI
}  // namespace int8_avxvnni
#pragma GCC pop_options

void MatmulInt8GroupsAvx2(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  int8_avx2::GroupsEntry(job, g_begin, g_end);
}

void MatmulInt8GroupsAvxVnni(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  int8_avxvnni::GroupsEntry(job, g_begin, g_end);
}

}  // namespace tandem::engine::internal
