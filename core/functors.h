// SPDX-License-Identifier: MIT
// NOTE [ One definition of each op's math ]
// Every elementwise op is a small functor here, marked SNUG_HOST_DEVICE. The
// CPU loops (core/cpu/loop.h) and the CUDA kernels (cuda/) both instantiate
// these same functors; only the launch differs. Functors take and return the
// compute type C (float for f16/bf16 storage, else the storage type).
// Row and window ops follow the same rule in their own leaf headers:
// core/softmax_math.h, core/attention_math.h (the fused attention's rows),
// core/layer_norm_math.h, core/pool_window.h, core/update_math.h (fused
// optimizer updates), core/philox.h (random draws).
//
// The op lists are enums guarded by static_asserts on their counts, and
// visit_*() maps an enum value to its functor with a switch that names every
// case, so adding an op without its functor fails to compile (-Werror=switch).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <snug/base/macros.h>

namespace snug {

// ---- math wrappers usable on host and device --------------------------------
namespace fmath {
SNUG_HOST_DEVICE SNUG_INLINE float exp(float x) { return ::expf(x); }
SNUG_HOST_DEVICE SNUG_INLINE double exp(double x) { return ::exp(x); }
SNUG_HOST_DEVICE SNUG_INLINE float log(float x) { return ::logf(x); }
SNUG_HOST_DEVICE SNUG_INLINE double log(double x) { return ::log(x); }
SNUG_HOST_DEVICE SNUG_INLINE float sqrt(float x) { return ::sqrtf(x); }
SNUG_HOST_DEVICE SNUG_INLINE double sqrt(double x) { return ::sqrt(x); }
SNUG_HOST_DEVICE SNUG_INLINE float tanh(float x) { return ::tanhf(x); }
SNUG_HOST_DEVICE SNUG_INLINE double tanh(double x) { return ::tanh(x); }
SNUG_HOST_DEVICE SNUG_INLINE float erf(float x) { return ::erff(x); }
SNUG_HOST_DEVICE SNUG_INLINE double erf(double x) { return ::erf(x); }
SNUG_HOST_DEVICE SNUG_INLINE float pow(float x, float y) { return ::powf(x, y); }
SNUG_HOST_DEVICE SNUG_INLINE double pow(double x, double y) { return ::pow(x, y); }
SNUG_HOST_DEVICE SNUG_INLINE float fabs(float x) { return ::fabsf(x); }
SNUG_HOST_DEVICE SNUG_INLINE double fabs(double x) { return ::fabs(x); }
// Integer fallbacks so integer tensors can use the same functors where sensible.
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE T fabs(T x) {
  if constexpr (std::is_unsigned_v<T>)
    return x;  // (nvcc warns on `x < 0` for unsigned T)
  else
    return x < 0 ? -x : x;
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double exp(T x) {
  return ::exp(double(x));
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double log(T x) {
  return ::log(double(x));
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double sqrt(T x) {
  return ::sqrt(double(x));
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double tanh(T x) {
  return ::tanh(double(x));
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double erf(T x) {
  return ::erf(double(x));
}
template <class T, class U>
SNUG_HOST_DEVICE SNUG_INLINE double pow(T x, U y) {
  return ::pow(double(x), double(y));
}

// NOTE [ Vectorizable exp and erf for float ]
// glibc's expf and erff are scalar calls, so a loop over them cannot use SIMD,
// and GELU (erf forward, erf and exp backward) cost more than the matmuls
// around it. exp_approx and erf_approx are plain arithmetic that compilers
// turn into SIMD on the CPU and straight-line code on the GPU:
//   exp_approx(y), for y <= 88: y = n ln2 + r with |r| <= ln2/2; exp(r) by
//     its Taylor series to r^7 (truncation error < 6e-9 relative), times 2^n
//     built from the exponent bits; <= 1.5 ulp. Results below 2^-126 (y <
//     -87.34) flush to 0, so exp(-inf) = 0 as softmax needs; NaN gives NaN.
//   erf_approx(x): |x| <= 1: x P(x^2); 1 < |x| < 4: 1 - exp(-x^2) Q(v) with
//     v = (1/|x| - 0.625) / 0.375 in [-1, 1]; |x| >= 4: +-1 (erfc(4) = 1.5e-8
//     is under half an ulp of 1). P (degree 6) and Q (degree 9) are
//     least-squares fits made for snug; <= 3 ulp. NaN gives NaN.
// GELU built on them is as accurate as GELU built on a correctly rounded
// erff (tests/test_elementwise.cpp checks both functions on dense grids).
// The f32 softmax kernels use exp_approx too (always at x - max <= 0).
SNUG_HOST_DEVICE SNUG_INLINE float pow2i(int n) {  // 2^n for -126 <= n <= 127
#ifdef __CUDA_ARCH__
  return __int_as_float((n + 127) << 23);
#else
  return std::bit_cast<float>((n + 127) << 23);
#endif
}
// exp_approx's constants, shared with the AVX-512 exp of the fused attention
// (exp16 in core/cpu/attention.cpp), which evaluates the same formula.
inline constexpr float kExpMin = -87.33654f;  // below it exp flushes to 0 (2^-126)
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860676533018e-06f;  // ln2 = hi + lo
SNUG_HOST_DEVICE SNUG_INLINE float exp_approx(float y) {
  // Clamped so 2^n stays a normal float; NaN lands on 88 and is put back below.
  const float yc = y < 88.0f ? (y > kExpMin ? y : kExpMin) : 88.0f;
  // n = round(y / ln2). Adding and taking away 1.5 * 2^23 rounds to an integer
  // in plain arithmetic; floorf would do, but GCC vectorizes it only under
  // -fno-trapping-math.
  const float n = (yc * kLog2e + 12582912.0f) - 12582912.0f;
  const float r = (yc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float e = p * pow2i(static_cast<int>(n));
  return y != y ? y : (y < kExpMin ? 0.0f : e);
}
SNUG_HOST_DEVICE SNUG_INLINE float erf_approx(float x) {
  const float ax = ::fabsf(x);
  const float t = ax * ax;
  float pa = 7.761460612894919e-05f;
  pa = pa * t - 0.0007977174786286072f;
  pa = pa * t + 0.0051838011272599994f;
  pa = pa * t - 0.026850836646251392f;
  pa = pa * t + 0.11283490026622803f;
  pa = pa * t - 0.37612612752799146f;
  pa = pa * t + 1.1283791605606748f;
  const float small = ax * pa;
  const float xb = ax < 1.0f ? 1.0f : (ax < 4.0f ? ax : 4.0f);
  const float v = (1.0f / xb - 0.625f) * (1.0f / 0.375f);
  float q = 4.400024969240414e-06f;
  q = q * v - 2.4804786126907805e-06f;
  q = q * v - 2.931863016909412e-05f;
  q = q * v + 0.00012366770979202102f;
  q = q * v - 0.0003472431567704497f;
  q = q * v + 0.0004602385161433141f;
  q = q * v + 0.002307796407907274f;
  q = q * v - 0.024242887627146117f;
  q = q * v + 0.14335642987972347f;
  q = q * v + 0.305952990132641f;
  const float large = 1.0f - exp_approx(-xb * xb) * q;
  const float r = ax <= 1.0f ? small : (ax < 4.0f ? large : 1.0f);
  const float signed_r = x < 0.0f ? -r : r;
  return x != x ? x : signed_r;
}
// NOTE [ GELU's erf ]
// GELU needs erf only to an absolute error: x Phi(x) is off by x/2 times
// erf's error, and the tests scale GELU's error by |x|. erf_approx keeps
// both branches (a polynomial, and a reciprocal, a second polynomial and an
// exp) because it aims at 3 ulp relative; for GELU one rational function is
// enough, at a third of the work (W-GPT's GELU forward 2.7x, backward 1.9x
// faster, one thread, 2048 x 512):
// erf(z) ~ z P(s) / Q(s) with s = (z / 3.92)^2, for |z| < 3.92, and +-1
// beyond (1 - erf(3.92) = 1.1e-8). P and Q (degree 5 each, all coefficients
// positive, so Horner's rule does not cancel) are a rational least-squares
// fit made for snug. Largest absolute error in float over the whole line:
// 3.5e-7 at -O3, 4.2e-7 at -O1 (other multiply-adds fused); erf_approx 1.8e-7,
// PyTorch's vectorized erf 1.5e-7 before rounding. tests/test_elementwise.cpp.
SNUG_HOST_DEVICE SNUG_INLINE float erf_gelu(float x) {
  constexpr float kZ = 3.92f;
  const float z = x < -kZ ? -kZ : (x > kZ ? kZ : x);  // NaN stays NaN
  const float u = z * (1.0f / kZ), s = u * u;
  float p = 1.7385507203099109f;
  p = p * s + 16.059937908348303f;
  p = p * s + 14.13033829648213f;
  p = p * s + 12.547428601500505f;
  p = p * s + 2.9713916464472465f;
  p = p * s + 1.1283789741206276f;
  float q = 32.594917593614554f;
  q = q * s + 66.59673404481171f;
  q = q * s + 55.23772050183596f;
  q = q * s + 27.233224038376818f;
  q = q * s + 7.755431112768824f;
  q = q * s + 1.0f;
  const float r = z * p / q;
  return x <= -kZ ? -1.0f : (x >= kZ ? 1.0f : r);
}
// Overloads the GELU functors pick by compute type: float takes the
// vectorizable forms, double keeps libm's.
SNUG_HOST_DEVICE SNUG_INLINE float gelu_erf(float x) { return erf_gelu(x); }
SNUG_HOST_DEVICE SNUG_INLINE double gelu_erf(double x) { return ::erf(x); }
SNUG_HOST_DEVICE SNUG_INLINE float gelu_exp(float y) { return exp_approx(y); }
SNUG_HOST_DEVICE SNUG_INLINE double gelu_exp(double y) { return ::exp(y); }
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double gelu_erf(T x) {
  return ::erf(double(x));
}
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE double gelu_exp(T y) {
  return ::exp(double(y));
}
}  // namespace fmath

// ---- unary ops ----------------------------------------------------------------
enum class UnaryOp : int {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  tanh,
  sigmoid,
  relu,
  gelu,
  gelu_tanh,
  silu,
  sign,
  square,
  reciprocal,
  clamp,       // a = lo, b = hi
  pow_scalar,  // a = exponent
  affine,      // a * x + b (scalar multiply/add without a broadcast tensor)
  count
};
inline constexpr int kNumUnaryOps = 18;
static_assert(static_cast<int>(UnaryOp::count) == kNumUnaryOps, "add the new op's functor to visit_unary");

// sqrt(2/pi) and 1/sqrt(2), for the gelu forms.
inline constexpr double kSqrt2OverPi = 0.7978845608028654;
inline constexpr double kInvSqrt2 = 0.7071067811865476;

struct NegF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return -x;
  }
};
struct ExpF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(fmath::exp(x));
  }
};
struct LogF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(fmath::log(x));
  }
};
struct SqrtF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(fmath::sqrt(x));
  }
};
struct RsqrtF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(1 / fmath::sqrt(x));
  }
};
struct AbsF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(fmath::fabs(x));
  }
};
struct TanhF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(fmath::tanh(x));
  }
};
struct SigmoidF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(1 / (1 + fmath::exp(-x)));
  }
};
struct ReluF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return x > C(0) ? x : C(0);
  }
};
// gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
struct GeluF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(0.5) * x * (C(1) + C(fmath::gelu_erf(x * C(kInvSqrt2))));
  }
};
// tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanhF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    C u = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + C(fmath::tanh(u)));
  }
};
struct SiluF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(x / (1 + fmath::exp(-x)));
  }
};
struct SignF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return C(x != C(0));
    else
      return C((x > C(0)) - (x < C(0)));
  }
};
struct SquareF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return x * x;
  }
};
struct ReciprocalF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(1) / x;
  }
};
struct ClampF {
  double lo, hi;
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    // NaN passes through (neither comparison holds), as in PyTorch.
    return x < C(lo) ? C(lo) : (x > C(hi) ? C(hi) : x);
  }
};
struct PowScalarF {
  double e;
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    if (e == 2) return x * x;  // exact and fast for the common case
    if (e == 1) return x;
    return C(fmath::pow(x, C(e)));
  }
};
struct AffineF {
  double a, b;
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return C(C(a) * x + C(b));
  }
};

// fn(functor) for op; a and b are the op's scalar parameters.
template <class Fn>
SNUG_HOST_DEVICE decltype(auto) visit_unary(UnaryOp op, double a, double b, Fn&& fn) {
  switch (op) {
    case UnaryOp::neg:
      return fn(NegF{});
    case UnaryOp::exp:
      return fn(ExpF{});
    case UnaryOp::log:
      return fn(LogF{});
    case UnaryOp::sqrt:
      return fn(SqrtF{});
    case UnaryOp::rsqrt:
      return fn(RsqrtF{});
    case UnaryOp::abs:
      return fn(AbsF{});
    case UnaryOp::tanh:
      return fn(TanhF{});
    case UnaryOp::sigmoid:
      return fn(SigmoidF{});
    case UnaryOp::relu:
      return fn(ReluF{});
    case UnaryOp::gelu:
      return fn(GeluF{});
    case UnaryOp::gelu_tanh:
      return fn(GeluTanhF{});
    case UnaryOp::silu:
      return fn(SiluF{});
    case UnaryOp::sign:
      return fn(SignF{});
    case UnaryOp::square:
      return fn(SquareF{});
    case UnaryOp::reciprocal:
      return fn(ReciprocalF{});
    case UnaryOp::clamp:
      return fn(ClampF{a, b});
    case UnaryOp::pow_scalar:
      return fn(PowScalarF{a});
    case UnaryOp::affine:
      return fn(AffineF{a, b});
    case UnaryOp::count:
      break;
  }
  return fn(NegF{});  // unreachable: callers validate op
}
const char* unary_op_name(UnaryOp op);

// ---- binary ops ---------------------------------------------------------------
// The *_backward ops take (grad_out, saved) and give grad_in; they live here so
// that the gradient math is shared by CPU and CUDA just like the forward math.
enum class BinaryOp : int {
  add,
  sub,
  mul,
  div,
  pow,
  maximum,
  minimum,
  relu_backward,       // (g, x)
  gelu_backward,       // (g, x)
  gelu_tanh_backward,  // (g, x)
  silu_backward,       // (g, x)
  sigmoid_backward,    // (g, y)  y = sigmoid(x)
  tanh_backward,       // (g, y)  y = tanh(x)
  count
};
inline constexpr int kNumBinaryOps = 13;
static_assert(static_cast<int>(BinaryOp::count) == kNumBinaryOps, "add the new op's functor to visit_binary");

struct AddF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return a + b;
  }
};
struct SubF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return a - b;
  }
};
struct MulF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return a * b;
  }
};
struct DivF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return a / b;
  }
};
struct PowF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return C(fmath::pow(a, b));
  }
};
// maximum/minimum propagate NaN, as in PyTorch.
struct MaximumF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return (a != a || a > b) ? a : b;
  }
};
struct MinimumF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C a, C b) const {
    return (a != a || a < b) ? a : b;
  }
};
struct ReluBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C x) const {
    return x > C(0) ? g : C(0);
  }
};
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
struct GeluBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C x) const {
    C cdf = C(0.5) * (C(1) + C(fmath::gelu_erf(x * C(kInvSqrt2))));
    C pdf = C(fmath::gelu_exp(C(-0.5) * x * x)) * C(0.3989422804014327);  // 1/sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C x) const {
    C u = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
    C t = C(fmath::tanh(u));
    C du = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * x * x);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
  }
};
// silu = x s(x);  d = s(x) (1 + x (1 - s(x)))
struct SiluBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C x) const {
    C s = C(1 / (1 + fmath::exp(-x)));
    return g * s * (C(1) + x * (C(1) - s));
  }
};
struct SigmoidBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C y) const {
    return g * y * (C(1) - y);
  }
};
struct TanhBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C y) const {
    return g * (C(1) - y * y);
  }
};

template <class Fn>
SNUG_HOST_DEVICE decltype(auto) visit_binary(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::add:
      return fn(AddF{});
    case BinaryOp::sub:
      return fn(SubF{});
    case BinaryOp::mul:
      return fn(MulF{});
    case BinaryOp::div:
      return fn(DivF{});
    case BinaryOp::pow:
      return fn(PowF{});
    case BinaryOp::maximum:
      return fn(MaximumF{});
    case BinaryOp::minimum:
      return fn(MinimumF{});
    case BinaryOp::relu_backward:
      return fn(ReluBackwardF{});
    case BinaryOp::gelu_backward:
      return fn(GeluBackwardF{});
    case BinaryOp::gelu_tanh_backward:
      return fn(GeluTanhBackwardF{});
    case BinaryOp::silu_backward:
      return fn(SiluBackwardF{});
    case BinaryOp::sigmoid_backward:
      return fn(SigmoidBackwardF{});
    case BinaryOp::tanh_backward:
      return fn(TanhBackwardF{});
    case BinaryOp::count:
      break;
  }
  return fn(AddF{});  // unreachable: callers validate op
}
const char* binary_op_name(BinaryOp op);

// ---- comparisons (bool result) ------------------------------------------------
enum class CompareOp : int { eq, ne, lt, le, gt, ge, count };
inline constexpr int kNumCompareOps = 6;
static_assert(static_cast<int>(CompareOp::count) == kNumCompareOps, "add the new op to CompareF");
struct CompareF {
  CompareOp op;
  template <class C>
  SNUG_HOST_DEVICE bool operator()(C a, C b) const {
    switch (op) {
      case CompareOp::eq:
        return a == b;
      case CompareOp::ne:
        return a != b;
      case CompareOp::lt:
        return a < b;
      case CompareOp::le:
        return a <= b;
      case CompareOp::gt:
        return a > b;
      case CompareOp::ge:
        return a >= b;
      case CompareOp::count:
        break;
    }
    return false;
  }
};
const char* compare_op_name(CompareOp op);

// ---- reductions ---------------------------------------------------------------
// A reduction is init / combine / finish over an accumulator type A. The CPU
// reduces rows with these (core/cpu/reduce.cpp); CUDA uses them per block.
enum class ReduceOp : int { sum, mean, max, min, prod, count };
inline constexpr int kNumReduceOps = 5;
static_assert(static_cast<int>(ReduceOp::count) == kNumReduceOps, "add the new op to visit_reduce");

// NOTE [ Integer sums wrap ]
// Signed overflow is undefined behaviour in C++, and a sum or product of
// int64 values overflows easily (the safetensors fuzzer found it summing a
// file's random int64 tensor). PyTorch's integer sums wrap around (two's
// complement); here sums, means and products of signed integers are computed
// in uint64_t, where wrapping is defined, and converted back (modular since
// C++20): the same results, without the undefined behaviour, on every backend.
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A add_wrapping(A a, A b) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>)
    return A(uint64_t(a) + uint64_t(b));
  else
    return a + b;
}
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A mul_wrapping(A a, A b) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>)
    return A(uint64_t(a) * uint64_t(b));
  else
    return a * b;
}

template <class A>
struct SumR {
  SNUG_HOST_DEVICE A init() const { return A(0); }
  SNUG_HOST_DEVICE A combine(A acc, A x) const { return add_wrapping(acc, x); }
  SNUG_HOST_DEVICE A finish(A acc, int64_t) const { return acc; }
};
template <class A>
struct MeanR {
  SNUG_HOST_DEVICE A init() const { return A(0); }
  SNUG_HOST_DEVICE A combine(A acc, A x) const { return add_wrapping(acc, x); }
  SNUG_HOST_DEVICE A finish(A acc, int64_t n) const { return n ? acc / A(n) : A(NAN); }
};
// Identity of max/min: -inf/+inf for floating A, the type's extremes for
// integers (converting INFINITY to an integer is undefined behaviour).
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A lowest_value() {
  if constexpr (std::numeric_limits<A>::has_infinity)
    return -std::numeric_limits<A>::infinity();
  else
    return std::numeric_limits<A>::lowest();
}
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A highest_value() {
  if constexpr (std::numeric_limits<A>::has_infinity)
    return std::numeric_limits<A>::infinity();
  else
    return std::numeric_limits<A>::max();
}
template <class A>
struct MaxR {  // NaN wins, as in PyTorch
  SNUG_HOST_DEVICE A init() const { return lowest_value<A>(); }
  SNUG_HOST_DEVICE A combine(A acc, A x) const { return (x != x || x > acc) ? x : acc; }
  SNUG_HOST_DEVICE A finish(A acc, int64_t) const { return acc; }
};
template <class A>
struct MinR {
  SNUG_HOST_DEVICE A init() const { return highest_value<A>(); }
  SNUG_HOST_DEVICE A combine(A acc, A x) const { return (x != x || x < acc) ? x : acc; }
  SNUG_HOST_DEVICE A finish(A acc, int64_t) const { return acc; }
};
template <class A>
struct ProdR {
  SNUG_HOST_DEVICE A init() const { return A(1); }
  SNUG_HOST_DEVICE A combine(A acc, A x) const { return mul_wrapping(acc, x); }
  SNUG_HOST_DEVICE A finish(A acc, int64_t) const { return acc; }
};

template <class A, class Fn>
SNUG_HOST_DEVICE decltype(auto) visit_reduce(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::sum:
      return fn(SumR<A>{});
    case ReduceOp::mean:
      return fn(MeanR<A>{});
    case ReduceOp::max:
      return fn(MaxR<A>{});
    case ReduceOp::min:
      return fn(MinR<A>{});
    case ReduceOp::prod:
      return fn(ProdR<A>{});
    case ReduceOp::count:
      break;
  }
  return fn(SumR<A>{});
}
const char* reduce_op_name(ReduceOp op);

}  // namespace snug
