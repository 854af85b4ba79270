// SPDX-License-Identifier: MIT
// Bulk 16-bit <-> 32-bit float conversion, compiled per CPU level (NOTE [ CPU
// levels ]): AVX-512 bodies, F16C and AVX2 bodies at the avx2 level, and a
// scalar tail (the whole loop at the baseline) that calls the SNUG_HOST_DEVICE
// scalar conversions in core/half.h. All must agree bit for bit
// (tests/test_half.cpp at every level; tests/test_cpu_isa.cpp across them).
#include <snug/core/cpu/half_convert.h>

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#include <snug/core/cpu/half_simd_avx512.h>
#endif

// GCC 12 warns about the deliberately undefined registers inside its own
// AVX-512 intrinsic headers (_mm512_undefined_*); nothing here is uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace snug::inline SNUG_CPU_LEVEL {

void half_to_float_array(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, simd16::widen_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void float_to_half_array(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  // vcvtps2ph with an explicit round-to-nearest-even immediate ignores
  // MXCSR.RC. It does honour MXCSR.DAZ (f32 subnormal inputs read as zero);
  // snug never sets DAZ, and no build flag here (no -ffast-math) does either.
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), simd16::narrow_f16(_mm512_loadu_ps(src + i)));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void bf16_to_float_array(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, simd16::widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i widened = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), widened);
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void float_to_bf16_array(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  // Not vcvtneps2bf16 (AVX512_BF16): it flushes subnormal inputs to zero,
  // which float_to_bf16 does not. The same integer rounding as the scalar
  // code is only a few instructions wider (simd16::narrow_bf16).
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), simd16::narrow_bf16(_mm512_loadu_ps(src + i)));
#elif defined(__AVX2__)
  // The same integer rounding in 8 lanes; a NaN's mask is the signed compare
  // of |x| (never negative) against the infinity's bits.
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  auto round8 = [&](const float* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf_bits);
    return _mm256_blendv_epi8(rounded, nan_bits, is_nan);  // each lane < 0x10000
  };
  // Pack the 32-bit lanes to 16 bits: packus works within 128-bit halves,
  // so the halves' results are put in order afterwards. Two vectors at a
  // time fill one 256-bit store with one pack and one permute (one vector
  // took the same two for half a store).
  for (; i + 16 <= n; i += 16) {
    const __m256i packed = _mm256_packus_epi32(round8(src + i), round8(src + i + 8));  // a0 b0 a1 b1 (qwords)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i out = round8(src + i);
    const __m256i ordered = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0x08);  // qwords 0 and 2
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(ordered));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace snug::SNUG_CPU_LEVEL
