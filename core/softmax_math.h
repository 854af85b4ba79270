// SPDX-License-Identifier: MIT
// The math of one softmax row, written once for the host and the GPU (NOTE [
// One definition of each op's math ] in core/functors.h). The CPU loops
// (core/cpu/softmax.cpp: softmax, log_softmax, causal_softmax) and the CUDA
// row kernels (cuda/softmax.cu) call these; only the walk over the row (a
// vector of lanes, a strided loop, a block of threads) differs.
//
//   m = max_j v_j (a NaN wins, so a NaN anywhere makes the row NaN, as in PyTorch)
//   s = sum_j exp(v_j - m)                      (in sum_t: f64 for f32/f64 rows)
//   softmax:      y_i = exp(v_i - m) * (1 / s)
//   log_softmax:  y_i = (v_i - m) - log(s)
//   logsumexp:    lse = m + log(s)              (the causal softmax's optional output)
//   backward:     softmax      dx_i = y_i (g_i - c),  c = sum_j g_j y_j
//                 log_softmax  dx_i = g_i - exp(y_i) c,  c = sum_j g_j
//
// v is the row as the op sees it: x, or scale * x for the causal softmax.
// Subtracting m keeps exp() from overflowing. (x - m) - log(s), not
// x - (m + log(s)): x - m is exact near the max, and m + log(s) would round
// away log(s)'s low bits when |m| is large.
//
// The exp is a parameter: FastExp (fmath::exp_approx for float, NOTE [
// Vectorizable exp and erf for float ]) where the row is contiguous f32 on the
// CPU and on the GPU; ExactExp (expf / exp) in the CPU's strided loops.
//
// A leaf header apart from core/functors.h: nvcc compiles it too.
#pragma once
#include <type_traits>

#include <snug/base/macros.h>
#include <snug/core/functors.h>

namespace snug::softmax_row {

// Row sums: f64 for f32/f64 rows, f32 for the 16-bit types (computed in f32).
template <class T>
using sum_t = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double, float>;

struct FastExp {
  SNUG_HOST_DEVICE SNUG_INLINE float operator()(float v) const { return fmath::exp_approx(v); }
  SNUG_HOST_DEVICE SNUG_INLINE double operator()(double v) const { return fmath::exp(v); }
};
struct ExactExp {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C v) const {
    return fmath::exp(v);
  }
};

// The running max, m = max_nan(m, v_i) from m = -inf.
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C max_nan(C m, C v) {
  return (v != v || v > m) ? v : m;
}

// exp(v - m): the terms of s, and the numerators of softmax.
template <class C, class Exp>
SNUG_HOST_DEVICE SNUG_INLINE C shifted_exp(C v, C m, Exp exp) {
  return exp(v - m);
}

// 1 / s and log(s), each rounded once to the compute type C from the sum's type S.
template <class C, class S>
SNUG_HOST_DEVICE SNUG_INLINE C inverse_sum(S s) {
  return static_cast<C>(S(1) / s);
}
template <class C, class S>
SNUG_HOST_DEVICE SNUG_INLINE C log_sum(S s) {
  return static_cast<C>(fmath::log(s));
}

// The row's logsumexp, m + log(s), in the type of its arguments (the caller
// picks it: the causal softmax's lse output adds in its sum type, then rounds
// once to f32). Kept by the attention for backward (core/attention_math.h).
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C logsumexp(C m, C s) {
  return m + fmath::log(s);
}

// y_i from e = shifted_exp(v_i, m) (stored first where the row is written twice).
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C normalize(C e, C inv) {
  return e * inv;
}
template <class C, class Exp>
SNUG_HOST_DEVICE SNUG_INLINE C softmax_at(C v, C m, C inv, Exp exp) {
  return normalize(shifted_exp(v, m, exp), inv);
}
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C log_softmax_at(C v, C m, C ls) {
  return (v - m) - ls;
}

// Backward: c sums backward_term(g_j, y_j) over the row.
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C backward_term(C g, C y, bool log) {
  return log ? g : g * y;
}
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C softmax_backward_at(C g, C y, C c) {
  return y * (g - c);
}
template <class C, class Exp>
SNUG_HOST_DEVICE SNUG_INLINE C log_softmax_backward_at(C g, C y, C c, Exp exp) {
  return g - exp(y) * c;
}

}  // namespace snug::softmax_row
