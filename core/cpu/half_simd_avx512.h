// SPDX-License-Identifier: MIT
// 16 floats to and from 16-bit storage in AVX-512 registers, bit-identical to
// the scalar conversions of core/half.h: the bodies of the bulk converters
// (core/cpu/half_convert.cpp) and of the kernels that convert in registers
// (core/cpu/gemm_half.cpp's packing and 16-bit store). Include only from files
// compiled with AVX-512 (the avx512 level).
#pragma once
#include <snug/core/cpu/level.h>

#include <immintrin.h>

namespace snug::inline SNUG_CPU_LEVEL::simd16 {

// vcvtph2ps is exact and quiets signalling NaNs, like half_to_float.
inline __m512 widen_f16(__m256i h) { return _mm512_cvtph_ps(h); }

// bf16 -> float is exact: the 16 bits become the top half.
inline __m512 widen_bf16(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }

// vcvtps2ph with an explicit round-to-nearest-even immediate ignores
// MXCSR.RC. It does honour MXCSR.DAZ (f32 subnormal inputs read as zero);
// snug never sets DAZ, and no build flag here (no -ffast-math) does either.
inline __m256i narrow_f16(__m512 f) { return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// Round to nearest even by integer arithmetic, a NaN kept (sign and top
// payload bits) and made quiet, as float_to_bf16. Not vcvtneps2bf16
// (AVX512_BF16): it flushes subnormal inputs to zero, which float_to_bf16
// does not.
inline __m256i narrow_bf16(__m512 f) {
  const __m512i x = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i nan_bits = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan_bits));
}

}  // namespace snug::SNUG_CPU_LEVEL::simd16
