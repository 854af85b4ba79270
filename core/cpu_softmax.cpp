// CPU softmax and log-softmax along one dim, forward and backward.
//
//   softmax:      y_i = exp(x_i - m) / s,        s = sum_j exp(x_j - m), m = max_j x_j
//   log_softmax:  y_i = x_i - m - log(s)
//   backward:     softmax      dx_i = y_i (g_i - sum_j g_j y_j)
//                 log_softmax  dx_i = g_i - exp(y_i) sum_j g_j
//
// Subtracting the row max keeps exp() from overflowing. f16/bf16 compute in
// f32; row sums accumulate in double for f32/f64 (NOTE [ Reduction
// accumulators ] in cpu_reduce.cpp) and in f32 for the half types.
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/cpu_backend.h"
#include "core/cpu_loop.h"

namespace snug {

namespace {

template <class T> using sum_t = std::conditional_t<std::is_same_v<compute_t<T>, float> &&
                                                        !std::is_same_v<T, float>, float, double>;

// The rows along `dim`: every index of the other dims, with per-operand
// base offsets computed from the operands' own strides (in elements).
template <int N>
struct Rows {
  int64_t count = 1, len = 1;
  int64_t step[N];  // stride along dim, per operand
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides[N];

  Rows(const Shape& shape, int64_t dim, const std::array<const Tensor*, N>& ops) {
    len = shape[dim];
    for (int k = 0; k < N; ++k) step[k] = ops[k]->strides()[dim];
    for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
      if (i == dim || shape[i] == 1) continue;
      sizes.push_back(shape[i]);
      for (int k = 0; k < N; ++k) strides[k].push_back(ops[k]->strides()[i]);
      count *= shape[i];
    }
  }
  void offsets(int64_t r, int64_t* off) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      int64_t i = r % sizes[d];
      r /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

}  // namespace

// x (any strides) -> out (x's shape).
void CpuBackend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (x.numel() == 0) return;
  const Rows<2> R(x.shape(), dim, {&x, &out});
  const int64_t L = R.len, sx = R.step[0], so = R.step[1];
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&]<class T>() {
    using C = compute_t<T>;
    using S = sum_t<T>;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
#pragma omp parallel for schedule(static) if (R.count * L > cpu::kParallelGrain && R.count > 1)
    for (int64_t r = 0; r < R.count; ++r) {
      int64_t off[2];
      R.offsets(r, off);
      const T* xr = xp + off[0];
      T* yr = op + off[1];
      // A NaN anywhere makes m NaN, and the whole row NaN, as in PyTorch.
      C m = -INFINITY;
      for (int64_t i = 0; i < L; ++i) {
        C v = static_cast<C>(xr[i * sx]);
        m = (v != v || v > m) ? v : m;
      }
      S s = 0;
      if (log) {
        for (int64_t i = 0; i < L; ++i) s += fmath::exp(static_cast<C>(xr[i * sx]) - m);
        // (x - m) - log(s), not x - (m + log(s)): x - m is exact near the
        // max, and m + log(s) would round away log(s)'s low bits when |m| is large.
        const C ls = static_cast<C>(std::log(s));
        for (int64_t i = 0; i < L; ++i) yr[i * so] = static_cast<T>((static_cast<C>(xr[i * sx]) - m) - ls);
      } else if constexpr (std::is_same_v<T, C>) {
        // Store exp() in out, then scale it: one exp per element.
        for (int64_t i = 0; i < L; ++i) {
          C e = fmath::exp(xr[i * sx] - m);
          yr[i * so] = e;
          s += e;
        }
        const C inv = static_cast<C>(1 / s);
        for (int64_t i = 0; i < L; ++i) yr[i * so] *= inv;
      } else {
        // 16-bit out would round exp() before the scaling: recompute instead.
        for (int64_t i = 0; i < L; ++i) s += fmath::exp(static_cast<C>(xr[i * sx]) - m);
        const C inv = static_cast<C>(1 / s);
        for (int64_t i = 0; i < L; ++i) yr[i * so] = static_cast<T>(fmath::exp(static_cast<C>(xr[i * sx]) - m) * inv);
      }
    }
  });
}

// grad_out and y (any strides, same shape) -> grad_in (same shape).
void CpuBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                                  const Tensor& grad_in) {
  if (y.numel() == 0) return;
  const Rows<3> R(y.shape(), dim, {&grad_out, &y, &grad_in});
  const int64_t L = R.len, sg = R.step[0], sy = R.step[1], sd = R.step[2];
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&]<class T>() {
    using C = compute_t<T>;
    using S = sum_t<T>;
    const T* gp = grad_out.data<T>();
    const T* yp = y.data<T>();
    T* dp = grad_in.data<T>();
#pragma omp parallel for schedule(static) if (R.count * L > cpu::kParallelGrain && R.count > 1)
    for (int64_t r = 0; r < R.count; ++r) {
      int64_t off[3];
      R.offsets(r, off);
      const T* g = gp + off[0];
      const T* yr = yp + off[1];
      T* d = dp + off[2];
      S s = 0;
      if (log) {
        for (int64_t i = 0; i < L; ++i) s += static_cast<C>(g[i * sg]);
        const C cs = static_cast<C>(s);
        for (int64_t i = 0; i < L; ++i)
          d[i * sd] = static_cast<T>(static_cast<C>(g[i * sg]) - fmath::exp(static_cast<C>(yr[i * sy])) * cs);
      } else {
        for (int64_t i = 0; i < L; ++i) s += static_cast<C>(g[i * sg]) * static_cast<C>(yr[i * sy]);
        const C cs = static_cast<C>(s);
        for (int64_t i = 0; i < L; ++i)
          d[i * sd] = static_cast<T>(static_cast<C>(yr[i * sy]) * (static_cast<C>(g[i * sg]) - cs));
      }
    }
  });
}

}  // namespace snug
