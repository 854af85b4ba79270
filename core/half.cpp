// SPDX-License-Identifier: MIT
// Bulk 16-bit <-> 32-bit float conversion. Each function has a SIMD body for
// CPUs that have one and a scalar tail that calls the SNUG_HOST_DEVICE scalar
// conversions in core/half.h; both must agree bit for bit (tests/test_half.cpp).
#include <snug/core/half.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

// GCC 12 warns about the deliberately undefined registers inside its own
// AVX-512 intrinsic headers (_mm512_undefined_*); nothing here is uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace snug {

void half_to_float_array(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // vcvtph2ps is exact and quiets signalling NaNs, like half_to_float.
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
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
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_loadu_ps(src + i);
    const __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
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
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m512i widened = _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16);
    _mm512_storeu_si512(dst + i, widened);
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void float_to_bf16_array(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  // Not vcvtneps2bf16 (AVX512_BF16): it flushes subnormal inputs to zero,
  // which float_to_bf16 does not. The same integer rounding as the scalar
  // code is only a few instructions wider.
#if defined(__AVX512F__)
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, lsb)), 16);
    const __m512i nan_bits = _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf_bits);
    const __m512i out = _mm512_mask_blend_epi32(is_nan, rounded, nan_bits);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(out));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace snug
