// SPDX-License-Identifier: MIT
// Small AVX2 helpers shared by the CPU kernels of the avx2 level, the twins of
// core/cpu/simd_avx512.h's: the mask of a row's first lanes (vmaskmovps: a
// lane is on when its sign bit is set) and fixed-order folds of 8 lanes
// (layer norm rows, attention rows, tile_gemm's edges).
#pragma once
#include <snug/core/cpu/level.h>

#if defined(__AVX2__) && !defined(__AVX512F__)
#include <cstdint>

#include <immintrin.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

// Lanes [0, n) of an 8-float vector, for n >= 0 (8 and more: all of them).
inline __m256i head_mask8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The sum and the max of 8 lanes by a fixed tree: the same order every call.
inline float reduce_add8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline float reduce_max8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
