// The AVX-512-VNNI int8 path: vpdpbusd on 512-bit registers, x as qx + 128 (matmul_int8.h).
// A 64-byte block of a weight row is one register; a tile is up to 4 rows of x against a group of
// 4 weight rows (16 accumulators), so each weight register loaded feeds up to 4 vpdpbusd. At m = 1
// the group is one contiguous stream of 256 bytes per block.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/matmul_int8_internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx2,fma,f16c")
// GCC 12 reports the deliberately undefined upper lanes inside _mm512_reduce_add_epi32's
// extraction once the tiles are inlined; every lane read is written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::engine::internal {
namespace {

constexpr int kTileRows = 4;

template <int MR>
void Tile(const uint8_t* x, int64_t kp, const int8_t* wg, int32_t out[MR][4]) {
  __m512i acc[MR][4];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[i][r] = _mm512_setzero_si512();
  }
  const int64_t blocks = kp / kInt8Block;
  for (int64_t q = 0; q < blocks; ++q) {
    const int8_t* wb = wg + q * 4 * kInt8Block;
    __m512i w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) w[r] = _mm512_loadu_si512(wb + r * kInt8Block);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + i * kp + q * kInt8Block);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], xv, w[r]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) out[i][r] = _mm512_reduce_add_epi32(acc[i][r]);
  }
}

template <int MR>
void RunTile(const Int8Job& job, int64_t i, int64_t g) {
  int32_t out[MR][4];
  Tile<MR>(job.xq + i * job.kp, job.kp, job.w->data + g * 4 * job.kp, out);
#pragma GCC unroll 8
  for (int t = 0; t < MR; ++t) StoreInt8Group<true>(job, i + t, g, out[t]);
}

}  // namespace

void MatmulInt8GroupsAvx512Vnni(const Int8Job& job, int64_t g_begin, int64_t g_end) {
  for (int64_t g = g_begin; g < g_end; ++g) {
    int64_t i = 0;
    for (; i + kTileRows <= job.m; i += kTileRows) RunTile<kTileRows>(job, i, g);
    switch (job.m - i) {
      case 3:
        RunTile<3>(job, i, g);
        break;
      case 2:
        RunTile<2>(job, i, g);
        break;
      case 1:
        RunTile<1>(job, i, g);
        break;
      default:
        break;
    }
  }
}

}  // namespace tandem::engine::internal

#pragma GCC diagnostic pop
#pragma GCC pop_options
