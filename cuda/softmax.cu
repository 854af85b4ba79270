// SPDX-License-Identifier: MIT
// Softmax row kernels (the CUDA twin of core/cpu/softmax.cpp): softmax /
// log_softmax forward and backward, the causal softmax, and the attention's
// masked softmax with its logsumexp and that softmax's backward from it, for
// the attention's cuBLAS path. One
// block per row; each thread strides over the row, then block_reduce combines
// the partial results in a fixed order. The formulas are core/softmax_math.h's
// (softmax_row::), the same functions the CPU loops call:
//
//   softmax:      y_i = exp(x_i - m) / s,  s = sum_j exp(x_j - m),  m = max_j x_j
//   log_softmax:  y_i = x_i - m - log(s)
//   backward:     softmax      dx_i = y_i (g_i - sum_j g_j y_j)
//                 log_softmax  dx_i = g_i - exp(y_i) sum_j g_j
//
// Compute types: float for f16/bf16/f32 (exp is fmath::exp_approx, as on the
// CPU's contiguous f32 rows), double for f64; row sums in double for f32/f64.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/core/attention_math.h>
#include <snug/core/softmax_math.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

using softmax_row::ExactExp;
using softmax_row::FastExp;

template <class A>
struct MaxOp {
  __device__ A operator()(A a, A b) const { return softmax_row::max_nan(a, b); }  // NaN wins
};

template <class T>
__global__ void softmax_kernel(bool log, Geometry<2> rows, int64_t len, int64_t xstep, int64_t ystep, const T* x,
                               T* y) {
  using A = compute_t<T>;
  using S = softmax_row::sum_t<T>;
  __shared__ A mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    rows.offsets(r, o);
    const T* xr = x + o[0];
    T* yr = y + o[1];
    A m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = MaxOp<A>{}(m, A(xr[i * xstep]));
    m = block_reduce(m, MaxOp<A>{}, mbuf);
    S s = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      s += S(softmax_row::shifted_exp(A(xr[i * xstep]), m, FastExp{}));
    s = block_reduce(s, SumOp<S>{}, sbuf);
    if (log) {
      const A ls = softmax_row::log_sum<A>(s);
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
        yr[i * ystep] = T(softmax_row::log_softmax_at(A(xr[i * xstep]), m, ls));
    } else {
      const A inv = softmax_row::inverse_sum<A>(s);
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
        yr[i * ystep] = T(softmax_row::softmax_at(A(xr[i * xstep]), m, inv, FastExp{}));
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(bool log, Geometry<3> rows, int64_t len, int64_t gstep, int64_t ystep,
                                        int64_t dstep, const T* g, const T* y, T* d) {
  using A = compute_t<T>;
  using S = softmax_row::sum_t<T>;
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[3];
    rows.offsets(r, o);
    const T* gr = g + o[0];
    const T* yr = y + o[1];
    T* dr = d + o[2];
    S s = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      s += S(softmax_row::backward_term(A(gr[i * gstep]), A(yr[i * ystep]), log));
    const A cs = A(block_reduce(s, SumOp<S>{}, sbuf));
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const A gi = A(gr[i * gstep]), yi = A(yr[i * ystep]);
      dr[i * dstep] = T(log ? softmax_row::log_softmax_backward_at(gi, yi, cs, FastExp{})
                            : softmax_row::softmax_backward_at(gi, yi, cs));
    }
  }
}

// x, y (rows, Tk); row r is query i = r % Tq and sees columns j <= i + Tk - Tq.
// x may be y.
template <class T>
__global__ void causal_softmax_kernel(int64_t rows, int64_t Tq, int64_t Tk, compute_t<T> scale, const T* x, T* y) {
  using A = compute_t<T>;
  using S = softmax_row::sum_t<T>;
  __shared__ A mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % Tq;
    int64_t visible = i + (Tk - Tq) + 1;
    visible = visible < 0 ? 0 : (visible > Tk ? Tk : visible);
    const T* xr = x + r * Tk;
    T* yr = y + r * Tk;
    A m = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = MaxOp<A>{}(m, scale * A(xr[j]));
    m = block_reduce(m, MaxOp<A>{}, mbuf);
    S s = 0;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      s += S(softmax_row::shifted_exp(scale * A(xr[j]), m, FastExp{}));
    s = block_reduce(s, SumOp<S>{}, sbuf);
    const A inv = softmax_row::inverse_sum<A>(s);  // unused when no column is visible (s = 0)
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x)
      yr[j] = j < visible ? T(softmax_row::softmax_at(scale * A(xr[j]), m, inv, FastExp{})) : T(0);
  }
}

// NOTE [ Attention through cuBLAS ]'s two row kernels (cuda/attention.cu):
// one block per (chunk) row r, the global row row0 + r = (b H + h) T + i,
// the keys it sees from km.
__global__ void attention_softmax_lse_kernel(int64_t rows, int64_t row0, int64_t T, int64_t H, float scale,
                                             KeyMask km, float* __restrict__ s, float* __restrict__ lse) {
  using S = softmax_row::sum_t<float>;
  __shared__ float mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t g = row0 + r, i = g % T, b = g / T / H;
    float* row = s + r * T;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
      if (km.sees(b, i, j, T)) m = MaxOp<float>{}(m, scale * row[j]);
    m = block_reduce(m, MaxOp<float>{}, mbuf);
    S sum = 0;
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
      if (km.sees(b, i, j, T)) sum += S(softmax_row::shifted_exp(scale * row[j], m, FastExp{}));
    sum = block_reduce(sum, SumOp<S>{}, sbuf);
    const float inv = softmax_row::inverse_sum<float>(sum);  // unused when the row sees no key (sum = 0)
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x)  // each thread rewrites only what it read
      row[j] = km.sees(b, i, j, T) ? softmax_row::softmax_at(scale * row[j], m, inv, FastExp{}) : 0.0f;
    if (threadIdx.x == 0) lse[r] = sum == 0 ? -INFINITY : float(softmax_row::logsumexp(double(m), double(sum)));
  }
}

// The backward row of NOTE [ Attention row math ] (core/attention_math.h)
// from lse: s (raw scores) -> P, dp -> dS with the scale folded in.
__global__ void attention_softmax_lse_backward_kernel(int64_t row0, int64_t T, int64_t H, float scale, KeyMask km,
                                                      float* __restrict__ s, float* __restrict__ dp,
                                                      const float* __restrict__ lse) {
  extern __shared__ float buf[];  // blockDim.x floats
  const int64_t r = blockIdx.x, g = row0 + r, i = g % T, b = g / T / H;
  float* srow = s + r * T;
  float* drow = dp + r * T;
  const float L = lse[r];
  const bool any = L != -INFINITY;  // a row that saw no key has zero gradients
  float d = 0.0f;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    if (any && km.sees(b, i, j, T))
      d += attention_row::correction_term(attention_row::prob(scale * srow[j], L, ExactExp{}), drow[j]);
  d = block_reduce(d, SumOp<float>{}, buf);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    if (any && km.sees(b, i, j, T)) {
      const float p = attention_row::prob(scale * srow[j], L, ExactExp{});
      srow[j] = p;
      drow[j] = attention_row::score_grad(scale * p, drow[j], d);  // scale folded into p
    } else {
      srow[j] = 0.0f;
      drow[j] = 0.0f;
    }
  }
}

// A power of two from 32 to 256, about the row length.
int row_threads(int64_t T) {
  int t = 32;
  while (t < 256 && t < T) t *= 2;
  return t;
}

}  // namespace

void softmax(DType t, bool log, const Geometry<2>& rows, int64_t len, int64_t xstep, int64_t ystep, const void* x,
             void* y, StreamHandle s) {
  if (rows.numel == 0 || len == 0) return;
  dispatch_floating(t, log ? "log_softmax" : "softmax", [&]<class T>() {
    softmax_kernel<T><<<row_grid(rows.numel), kThreads, 0, as_stream(s)>>>(
        log, rows, len, xstep, ystep, static_cast<const T*>(x), static_cast<T*>(y));
    check_launch("softmax");
  });
}

void softmax_backward(DType t, bool log, const Geometry<3>& rows, int64_t len, int64_t gstep, int64_t ystep,
                      int64_t dstep, const void* g, const void* y, void* d, StreamHandle s) {
  if (rows.numel == 0 || len == 0) return;
  dispatch_floating(t, "softmax_backward", [&]<class T>() {
    softmax_backward_kernel<T><<<row_grid(rows.numel), kThreads, 0, as_stream(s)>>>(
        log, rows, len, gstep, ystep, dstep, static_cast<const T*>(g), static_cast<const T*>(y), static_cast<T*>(d));
    check_launch("softmax_backward");
  });
}

void causal_softmax(DType t, int64_t rows, int64_t Tq, int64_t Tk, double scale, const void* x, void* y, StreamHandle s) {
  if (rows == 0 || Tk == 0) return;
  dispatch_floating(t, "causal_softmax", [&]<class T>() {
    causal_softmax_kernel<T><<<row_grid(rows), kThreads, 0, as_stream(s)>>>(
        rows, Tq, Tk, compute_t<T>(scale), static_cast<const T*>(x), static_cast<T*>(y));
    check_launch("causal_softmax");
  });
}

void attention_softmax_lse(int64_t rows, int64_t row0, int64_t T, int64_t H, float scale, KeyMask km, float* s,
                           float* lse, StreamHandle st) {
  if (rows == 0 || T == 0) return;
  attention_softmax_lse_kernel<<<row_grid(rows), kThreads, 0, as_stream(st)>>>(rows, row0, T, H, scale, km, s, lse);
  check_launch("attention_softmax_lse");
}

void attention_softmax_lse_backward(int64_t rows, int64_t row0, int64_t T, int64_t H, float scale, KeyMask km,
                                    float* s, float* dp, const float* lse, StreamHandle st) {
  if (rows == 0 || T == 0) return;
  const int t = row_threads(T);
  attention_softmax_lse_backward_kernel<<<unsigned(rows), t, t * sizeof(float), as_stream(st)>>>(row0, T, H, scale,
                                                                                                  km, s, dp, lse);
  check_launch("attention_softmax_lse_backward");
}

}  // namespace snug::cuda::kernels
