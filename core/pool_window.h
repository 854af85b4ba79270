// SPDX-License-Identifier: MIT
// The pooling windows and their per-window math, written once for the host
// and the GPU (NOTE [ One definition of each op's math ] in core/functors.h).
// core/cpu/pool.cpp computes each output row's and column's span once per
// call and walks planes in threads; cuda/pool.cu's kernels call
// pool_forward_at / pool_backward_at once per thread (a thread per output
// forward, a thread per input element backward, gathering the outputs whose
// windows hold it: no atomics, the CPU's order). tests/test_cuda_host.cpp
// runs those two in a host loop and compares them with the CPU backend.
//
//   max/avg:  window o covers [o stride - pad, o stride - pad + kernel) clipped
//             to the input; avg divides by the window clipped to the padded
//             input (count_include_pad), as PyTorch.
//   adaptive: window o covers [floor(o n / no), ceil((o + 1) n / no)).
//   max takes the first largest tap in (row, column) order; a NaN tap wins.
//
// A leaf header apart from base/macros.h: nvcc compiles it too.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <snug/base/macros.h>

namespace snug {

// Geometry of a 2-D pooling window (index 0 = height, 1 = width). max/avg:
// window kernel, moved by stride, over the input padded by padding
// (Ho = (H + 2 padding - kernel) / stride + 1). adaptive_avg: kernel, stride
// and padding are unused.
enum class PoolKind { max, avg, adaptive_avg };
struct Pool2dParams {
  PoolKind kind = PoolKind::max;
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
};

// The params with the sizes: x (planes, H, W), out (planes, Ho, Wo).
struct PoolGeometry : Pool2dParams {
  int64_t planes = 0, H = 0, W = 0, Ho = 0, Wo = 0;
};

inline PoolGeometry pool_geometry(const Pool2dParams& p, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
  PoolGeometry g;
  static_cast<Pool2dParams&>(g) = p;
  g.planes = planes, g.H = H, g.W = W, g.Ho = Ho, g.Wo = Wo;
  return g;
}

struct PoolSpan {
  int64_t lo, hi, size;  // clipped [lo, hi); size: the divisor's share (counts padding for avg)
};

SNUG_HOST_DEVICE SNUG_INLINE int64_t pool_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Window o along dim d (0 rows, 1 columns) over an input of n, output of no.
SNUG_HOST_DEVICE SNUG_INLINE PoolSpan pool_span(const Pool2dParams& p, int d, int64_t o, int64_t n, int64_t no) {
  PoolSpan s;
  if (p.kind == PoolKind::adaptive_avg) {
    s.lo = o * n / no;
    s.hi = pool_ceil_div((o + 1) * n, no);
    s.size = s.hi - s.lo;
    return s;
  }
  const int64_t start = o * p.stride[d] - p.padding[d];
  const int64_t end = start + p.kernel[d];
  s.size = (end < n + p.padding[d] ? end : n + p.padding[d]) - start;
  s.lo = start > 0 ? start : 0;
  s.hi = end < n ? end : n;
  return s;
}

// [o0, o1): the outputs whose window along d can contain input i (a superset;
// each is still checked against its span).
SNUG_HOST_DEVICE SNUG_INLINE void pool_outputs_of(const Pool2dParams& p, int d, int64_t i, int64_t n, int64_t no,
                                                  int64_t& o0, int64_t& o1) {
  if (p.kind == PoolKind::adaptive_avg) {
    o0 = i * no / n - 2;
    o1 = (i + 1) * no / n + 2;
  } else {
    // start(o) <= i < start(o) + kernel  <=>  (i + pad - kernel) / stride < o <= (i + pad) / stride
    const int64_t a = i + p.padding[d] - p.kernel[d] + 1;
    o0 = a <= 0 ? 0 : pool_ceil_div(a, p.stride[d]);
    o1 = (i + p.padding[d]) / p.stride[d] + 1;
  }
  o0 = o0 < 0 ? 0 : o0;
  o1 = o1 > no ? no : o1;
}

// Whether max pooling's tap v replaces the best so far: taps come in (row,
// column) order, so the first largest wins; a NaN wins (as in PyTorch). `|`,
// not `||`: no branch, so the CPU's whole-window loop vectorizes.
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE bool pool_max_takes(A v, A best) {
  return (v > best) | (v != v);
}

// Max over window (r, c) of plane xq (width W): best, and arg = h W + w of the tap.
template <class A, class T>
SNUG_HOST_DEVICE SNUG_INLINE void pool_max_window(const T* xq, int64_t W, PoolSpan r, PoolSpan c, A& best,
                                                  int64_t& arg) {
  best = -INFINITY;
  arg = r.lo * W + c.lo;
  for (int64_t h = r.lo; h < r.hi; ++h)
    for (int64_t w = c.lo; w < c.hi; ++w) {
      const A v = A(xq[h * W + w]);
      if (pool_max_takes(v, best)) {
        best = v;
        arg = h * W + w;
      }
    }
}

// v / window size: the average from the window's sum, and each tap's share of
// the window's output gradient.
template <class A>
SNUG_HOST_DEVICE SNUG_INLINE A pool_avg_divide(A v, PoolSpan r, PoolSpan c) {
  return v / A(r.size * c.size);
}

// Average over window (r, c) of plane xq (width W).
template <class A, class T>
SNUG_HOST_DEVICE SNUG_INLINE A pool_avg_window(const T* xq, int64_t W, PoolSpan r, PoolSpan c) {
  A s = 0;
  for (int64_t h = r.lo; h < r.hi; ++h)
    for (int64_t w = c.lo; w < c.hi; ++w) s += A(xq[h * W + w]);
  return pool_avg_divide(s, r, c);
}

// Output element e (over planes * Ho * Wo): out[e], and indices[e] for max
// when indices is not null.
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE void pool_forward_at(const PoolGeometry& g, const T* x, T* out, int64_t* indices,
                                                  int64_t e) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, pl = e / (g.Wo * g.Ho);
  const PoolSpan r = pool_span(g, 0, oh, g.H, g.Ho), c = pool_span(g, 1, ow, g.W, g.Wo);
  const T* xq = x + pl * g.H * g.W;
  if (g.kind == PoolKind::max) {
    A best;
    int64_t arg;
    pool_max_window(xq, g.W, r, c, best, arg);
    out[e] = T(best);
    if (indices) indices[e] = arg;  // none when no backward follows
  } else {
    out[e] = T(pool_avg_window<A>(xq, g.W, r, c));
  }
}

// Input element e (over planes * H * W): grad_x[e], summing the shares of the
// outputs whose windows hold it in (oh, ow) order, as the CPU adds them.
template <class T>
SNUG_HOST_DEVICE SNUG_INLINE void pool_backward_at(const PoolGeometry& g, const T* grad_out, const int64_t* indices,
                                                   T* grad_x, int64_t e) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t w = e % g.W, h = (e / g.W) % g.H, pl = e / (g.W * g.H);
  int64_t oh0, oh1, ow0, ow1;
  pool_outputs_of(g, 0, h, g.H, g.Ho, oh0, oh1);
  pool_outputs_of(g, 1, w, g.W, g.Wo, ow0, ow1);
  const T* gq = grad_out + pl * g.Ho * g.Wo;
  A acc = 0;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const PoolSpan r = pool_span(g, 0, oh, g.H, g.Ho);
    if (h < r.lo || h >= r.hi) continue;
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      const PoolSpan c = pool_span(g, 1, ow, g.W, g.Wo);
      if (w < c.lo || w >= c.hi) continue;
      const int64_t o = oh * g.Wo + ow;
      if (g.kind == PoolKind::max) {
        if (indices[pl * g.Ho * g.Wo + o] == h * g.W + w) acc += A(gq[o]);
      } else {
        acc += pool_avg_divide(A(gq[o]), r, c);
      }
    }
  }
  grad_x[e] = T(acc);
}

}  // namespace snug
