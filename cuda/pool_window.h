// SPDX-License-Identifier: MIT
// The pooling windows and the per-element work of cuda/pool.cu's kernels, as
// SNUG_HOST_DEVICE functions in plain C++: the kernels call them once per
// thread, and tests/test_cuda_host.cpp calls them in a host loop and compares
// with the CPU backend's pooling.
//   max/avg: window o covers [o stride - pad, o stride - pad + kernel) clipped
//            to the input; avg divides by the window clipped to the padded
//            input (count_include_pad), as PyTorch.
//   adaptive: window o covers [floor(o n / no), ceil((o + 1) n / no)).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <snug/base/macros.h>

namespace snug::cuda {

// kind: 0 max, 1 avg, 2 adaptive_avg. x (planes, H, W), out (planes, Ho, Wo).
struct PoolGeometry {
  int kind = 0;
  int64_t planes = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0};
};

struct PoolSpan {
  int64_t lo, hi, size;  // clipped [lo, hi); size: the divisor's share
};

SNUG_HOST_DEVICE SNUG_INLINE int64_t pool_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Window o along dim d (0 rows, 1 columns) over an input of n, output of no.
SNUG_HOST_DEVICE SNUG_INLINE PoolSpan pool_span(const PoolGeometry& g, int d, int64_t o, int64_t n, int64_t no) {
  PoolSpan s;
  if (g.kind == 2) {
    s.lo = o * n / no;
    s.hi = pool_ceil_div((o + 1) * n, no);
    s.size = s.hi - s.lo;
    return s;
  }
  const int64_t start = o * g.stride[d] - g.padding[d];
  const int64_t end = start + g.kernel[d];
  s.size = (end < n + g.padding[d] ? end : n + g.padding[d]) - start;
  s.lo = start > 0 ? start : 0;
  s.hi = end < n ? end : n;
  return s;
}

// [o0, o1): the outputs whose window along d can contain input i (a superset;
// each is still checked against its span).
SNUG_HOST_DEVICE SNUG_INLINE void pool_outputs_of(const PoolGeometry& g, int d, int64_t i, int64_t n, int64_t no,
                                                  int64_t& o0, int64_t& o1) {
  if (g.kind == 2) {
    o0 = i * no / n - 2;
    o1 = (i + 1) * no / n + 2;
  } else {
    // start(o) <= i < start(o) + kernel  <=>  (i + pad - kernel) / stride < o <= (i + pad) / stride
    const int64_t a = i + g.padding[d] - g.kernel[d] + 1;
    o0 = a <= 0 ? 0 : pool_ceil_div(a, g.stride[d]);
    o1 = (i + g.padding[d]) / g.stride[d] + 1;
  }
  o0 = o0 < 0 ? 0 : o0;
  o1 = o1 > no ? no : o1;
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
  if (g.kind == 0) {
    A best = -INFINITY;
    int64_t arg = r.lo * g.W + c.lo;
    for (int64_t h = r.lo; h < r.hi; ++h)
      for (int64_t w = c.lo; w < c.hi; ++w) {
        const A v = A(xq[h * g.W + w]);
        if (v > best || v != v) {  // NaN propagates, as in PyTorch
          best = v;
          arg = h * g.W + w;
        }
      }
    out[e] = T(best);
    if (indices) indices[e] = arg;  // none when no backward follows
  } else {
    A s = 0;
    for (int64_t h = r.lo; h < r.hi; ++h)
      for (int64_t w = c.lo; w < c.hi; ++w) s += A(xq[h * g.W + w]);
    out[e] = T(s / A(r.size * c.size));
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
      if (g.kind == 0) {
        if (indices[pl * g.Ho * g.Wo + o] == h * g.W + w) acc += A(gq[o]);
      } else {
        acc += A(gq[o]) / A(r.size * c.size);
      }
    }
  }
  grad_x[e] = T(acc);
}

}  // namespace snug::cuda
