// SPDX-License-Identifier: MIT
// 16-bit floating point storage types: IEEE binary16 (Half) and bfloat16
// (BFloat16). A leaf header compiled for both the host and, under nvcc, the
// GPU, so the CPU loop and the CUDA kernel of an op convert identically.
//
// Both types are storage types: arithmetic converts to float, computes in
// float, and rounds back. Every conversion to 16 bits rounds to nearest, ties
// to even, in portable integer arithmetic (no hardware intrinsics, no
// dependence on the FP rounding mode or on flush-to-zero settings):
//
//   float -> half   overflow (|x| >= 65520) gives +-inf; subnormal halves are
//                   produced exactly; a NaN stays a NaN with its sign and the
//                   top 9 bits of its payload, and is made quiet (what F16C's
//                   vcvtps2ph does).
//   half -> float   exact; a signalling NaN comes back quiet (what vcvtph2ps
//                   does), every other value, subnormals and -0 included, is
//                   exact.
//   float -> bf16   overflow rounds to +-inf; subnormal floats are rounded,
//                   not flushed; a NaN stays a NaN (sign and top payload
//                   bits kept) and is made quiet.
//   bf16 -> float   exact: the 16 bits become the top half of the float.
//
// The bulk versions in core/cpu/half_convert.cpp use SIMD where the CPU level has it and give
// bit-identical results (tests/test_half.cpp checks every f16 pattern).
#pragma once
#include <cstdint>
#include <type_traits>

#include <snug/base/macros.h>

namespace snug {

namespace detail {

// Bit casts usable in host and device code without memcpy.
SNUG_HOST_DEVICE SNUG_INLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}

SNUG_HOST_DEVICE SNUG_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

}  // namespace detail

// ---- IEEE binary16 ---------------------------------------------------------
// Layout: 1 sign, 5 exponent (bias 15), 10 mantissa bits.

SNUG_HOST_DEVICE SNUG_INLINE float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    // inf (mant == 0) or NaN; a NaN gets the quiet bit (0x400000 in f32).
    return detail::bits_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24. mant < 2^10, so the product is
    // exact and is a normal float (immune to flush-to-zero).
    const float mag = float(mant) * 5.9604644775390625e-8f;  // 2^-24
    return detail::bits_float(sign | detail::float_bits(mag));
  }
  // Normal: rebias the exponent from 15 to 127.
  return detail::bits_float(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

SNUG_HOST_DEVICE SNUG_INLINE uint16_t float_to_half(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;  // |f|
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return uint16_t(sign | 0x7c00u);   // inf
    return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  }
  // 65520 = 65504 + half an ulp: from here on (ties to even, 65504's mantissa
  // is odd) everything rounds to inf.
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below 2^-14, the smallest normal half: the result is the integer
    // round(|f| * 2^24), a subnormal half (or the smallest normal when it
    // rounds up to 1024). |f| = m * 2^(e - 150) with the implicit bit in m,
    // so |f| * 2^24 = m >> (126 - e).
    const uint32_t e = a >> 23;
    const uint32_t shift = 126u - e;  // >= 14 here
    if (shift > 24) return sign;      // < 2^-25 (or its tie): rounds to zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t up = (rem > halfway) | ((rem == halfway) & q);
    return uint16_t(sign | (q + up));
  }
  // Normal: rebias the exponent (127 -> 15), then round the 13 dropped bits to
  // nearest even by adding 0xfff plus the kept lsb; a carry out of the mantissa
  // correctly bumps the exponent.
  uint32_t y = a - ((127u - 15u) << 23);
  y += 0xfffu + ((y >> 13) & 1u);
  return uint16_t(sign | (y >> 13));
}

// ---- bfloat16 ---------------------------------------------------------------
// Layout: the top 16 bits of a float (1 sign, 8 exponent, 7 mantissa bits).

SNUG_HOST_DEVICE SNUG_INLINE float bf16_to_float(uint16_t b) { return detail::bits_float(uint32_t(b) << 16); }

SNUG_HOST_DEVICE SNUG_INLINE uint16_t float_to_bf16(float f) {
  const uint32_t x = detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  // Round the low 16 bits to nearest even; a carry walks into the exponent,
  // which turns the largest finite values into inf exactly when IEEE says so.
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- the storage types ------------------------------------------------------

struct Half {
  uint16_t bits;

  Half() = default;
  SNUG_HOST_DEVICE SNUG_INLINE Half(float f) : bits(float_to_half(f)) {}  // NOLINT: implicit like c10::Half
  SNUG_HOST_DEVICE SNUG_INLINE operator float() const { return half_to_float(bits); }
  SNUG_HOST_DEVICE SNUG_INLINE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  SNUG_HOST_DEVICE SNUG_INLINE BFloat16(float f) : bits(float_to_bf16(f)) {}  // NOLINT: implicit like c10::BFloat16
  SNUG_HOST_DEVICE SNUG_INLINE operator float() const { return bf16_to_float(bits); }
  SNUG_HOST_DEVICE SNUG_INLINE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half>);
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

// ---- arithmetic: computed in float ------------------------------------------
// With implicit conversions both ways, `h + 1.0f` would be ambiguous between
// the built-in float + float and Half + Half; these overloads settle it the
// way C++ promotion would: 16-bit op the same 16-bit type stays 16-bit, an
// int keeps the 16-bit type, float or double widens the result to that type,
// and Half op BFloat16 is float (neither holds the other; as dtype promotion).

// Plain overloads per type rather than one constrained template: clang 14
// instantiates a template's declaration before it checks the constraint, and
// `float operator+(float, T)` with T = float is then a hard error.

#define SNUG_LOWP_BINARY_OP(T, op)                                                                 \
  SNUG_HOST_DEVICE SNUG_INLINE T operator op(T a, T b) { return T(float(a) op float(b)); }         \
  SNUG_HOST_DEVICE SNUG_INLINE float operator op(T a, float b) { return float(a) op b; }           \
  SNUG_HOST_DEVICE SNUG_INLINE float operator op(float a, T b) { return a op float(b); }           \
  SNUG_HOST_DEVICE SNUG_INLINE double operator op(T a, double b) { return double(float(a)) op b; } \
  SNUG_HOST_DEVICE SNUG_INLINE double operator op(double a, T b) { return a op double(float(b)); } \
  SNUG_HOST_DEVICE SNUG_INLINE T operator op(T a, int b) { return T(float(a) op float(b)); }       \
  SNUG_HOST_DEVICE SNUG_INLINE T operator op(int a, T b) { return T(float(a) op float(b)); }       \
  SNUG_HOST_DEVICE SNUG_INLINE T& operator op##=(T& a, T b) {                                      \
    a = a op b;                                                                                    \
    return a;                                                                                      \
  }                                                                                                \
  SNUG_HOST_DEVICE SNUG_INLINE T& operator op##=(T& a, float b) {                                  \
    a = T(float(a) op b);                                                                          \
    return a;                                                                                      \
  }

// Half op BFloat16: float, in either order.
#define SNUG_MIXED_LOWP_OP(op)                                                                        \
  SNUG_HOST_DEVICE SNUG_INLINE float operator op(Half a, BFloat16 b) { return float(a) op float(b); } \
  SNUG_HOST_DEVICE SNUG_INLINE float operator op(BFloat16 a, Half b) { return float(a) op float(b); }

#define SNUG_LOWP_OPS(op)           \
  SNUG_LOWP_BINARY_OP(Half, op)     \
  SNUG_LOWP_BINARY_OP(BFloat16, op) \
  SNUG_MIXED_LOWP_OP(op)

SNUG_LOWP_OPS(+)
SNUG_LOWP_OPS(-)
SNUG_LOWP_OPS(*)
SNUG_LOWP_OPS(/)
#undef SNUG_LOWP_OPS
#undef SNUG_MIXED_LOWP_OP
#undef SNUG_LOWP_BINARY_OP

// Negation flips the sign bit: exact, and keeps NaN payloads (as IEEE negate does).
SNUG_HOST_DEVICE SNUG_INLINE Half operator-(Half a) { return Half::from_bits(uint16_t(a.bits ^ 0x8000u)); }
SNUG_HOST_DEVICE SNUG_INLINE BFloat16 operator-(BFloat16 a) { return BFloat16::from_bits(uint16_t(a.bits ^ 0x8000u)); }

// Comparisons go through operator float (built-in float comparisons), so NaN
// compares unequal to everything and +0 == -0.

// Whole arrays: core/cpu/half_convert.h (SIMD per CPU level, bit-identical to
// the scalar functions above).

}  // namespace snug
