// SPDX-License-Identifier: MIT
// The math of one layer norm row (over its C elements), written once for the
// host and the GPU (NOTE [ One definition of each op's math ] in
// core/functors.h). core/cpu/layer_norm.cpp's scalar loops and the kernels of
// cuda/layer_norm.cu call these; the AVX-512 rows of layer_norm.cpp are the
// same formulas, sixteen lanes at a time.
//
//   forward:  mean = sum(x) / C,  rstd = 1 / sqrt(sum((x - mean)^2) / C + eps)  (biased var)
//             y = (x - mean) rstd w + b                 (w, b optional)
//   backward, with xhat = (x - mean) rstd and gh = g w:
//             gx = rstd (gh - mean(gh) - xhat mean(gh xhat))
//             gw = sum_rows(g xhat),  gb = sum_rows(g)
//
// Two passes (mean, then centred squares) are stable without Welford. A is
// the compute type: f64 for f64 rows, else f32. mean and rstd are saved in f32.
//
// A leaf header apart from core/functors.h: nvcc compiles it too.
#pragma once
#include <cstdint>

#include <snug/base/macros.h>
#include <snug/core/functors.h>

namespace snug::layer_norm_row {

template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A mean(A sum, int64_t C) {
  return sum / A(C);
}
// sq_sum = sum over the row of (x - mean)^2.
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A rstd(A sq_sum, int64_t C, A eps) {
  return A(1) / fmath::sqrt(sq_sum / A(C) + eps);
}

template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A xhat(A x, A mu, A rs) {
  return (x - mu) * rs;
}

// y at column c; w and b (stored as W, or null) are the affine weight and bias.
template <class A, class W>
SNUG_HOST_DEVICE SNUG_INLINE A normalize_at(A x, A mu, A rs, const W* w, const W* b, int64_t c) {
  A h = xhat(x, mu, rs);
  if (w) h *= A(w[c]);
  if (b) h += A(b[c]);
  return h;
}

// gh = g w at column c (g alone without a weight).
template <class A, class W>
SNUG_HOST_DEVICE SNUG_INLINE A ghat(A g, const W* w, int64_t c) {
  return w ? g * A(w[c]) : g;
}

// gx at one column, from m1 = mean(gh) and m2 = mean(gh xhat) over the row.
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A grad_x_at(A gh, A xh, A m1, A m2, A rs) {
  return rs * (gh - m1 - xh * m2);
}

}  // namespace snug::layer_norm_row
