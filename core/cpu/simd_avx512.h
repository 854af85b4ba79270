// SPDX-License-Identifier: MIT
// Small AVX-512 helpers shared by the CPU kernels: the mask of a row's first
// lanes (GEMM packing, layer norm rows, attention row dots, transposes) and a
// 16 x 16 float transpose in registers (the GEMM's packers and
// kernels::transpose_f32 in core/cpu/tile_gemm.cpp).
#pragma once
#include <snug/core/cpu/level.h>

#if defined(__AVX512F__)
#include <cstdint>

// GCC 12 flags the intrinsics' internal _mm512_undefined_ps() pass-through
// operands (masked loads, the _mm512_reduce_* folds) as "(maybe) used
// uninitialized" once they are inlined; a false positive. Files that include
// this header take the switches with it.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

// Lanes [0, n) of a 16-float vector, for n >= 0 (16 and more: all of them).
inline __mmask16 head_mask(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// In-register 16x16 transpose: r[i] holds row i; afterwards r[j] holds column j.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // interleave pairs of rows within 128-bit lanes
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c] holds, in 128-bit lane L, rows 4g..4g+3 of column 4L + c.
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    __m512d lo0 = _mm512_castps_pd(t[4 * g]), lo1 = _mm512_castps_pd(t[4 * g + 2]);
    __m512d hi0 = _mm512_castps_pd(t[4 * g + 1]), hi1 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  // Gather lane L of the four row groups into column 4L + c.
  for (int c = 0; c < 4; ++c) {
    __m512 x = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);       // g0.L0 g0.L2 g1.L0 g1.L2
    __m512 y = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);       // g0.L1 g0.L3 g1.L1 g1.L3
    __m512 z = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);  // g2.L0 g2.L2 g3.L0 g3.L2
    __m512 w = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);  // g2.L1 g2.L3 g3.L1 g3.L3
    r[c] = _mm512_shuffle_f32x4(x, z, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(y, w, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(x, z, 0xDD);
    r[12 + c] = _mm512_shuffle_f32x4(y, w, 0xDD);
  }
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
