// SPDX-License-Identifier: MIT
// The fused cross-entropy (NOTE [ Fused cross-entropy ] in
// core/fused_defaults.cpp): one block per row of logits, in their own dtype,
// f32 math inside (f64 for f64 logits).
//
//   forward   m = max_c x_c, s = sum_c exp(x_c - m), lse = m + log s
//             loss = (1 - eps) (lse - x_t) + eps (lse - mean_c x_c), 0 for an ignored row
//   backward  dx_c = w (exp(x_c - lse) - eps / C - (1 - eps) [c == t]), 0 for an ignored row
//
// The forward reads the row twice (max, then the sums), the backward once;
// neither writes anything of (N, C) but the gradient, in the logits' dtype.
// The row's max and sums use softmax_row:: (core/softmax_math.h) as the
// softmax kernels do, so the loss is the log-softmax's to rounding.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/core/softmax_math.h>
#include <snug/cuda/kernels.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

using softmax_row::FastExp;

template <class A>
struct CeMaxOp {
  __device__ A operator()(A a, A b) const { return softmax_row::max_nan(a, b); }  // NaN wins
};

// T: the logits' storage; L: the loss's (f32, f64 for f64 logits).
template <class T, class L>
__global__ void cross_entropy_kernel(int64_t N, int64_t C, int64_t ignore_index, float eps, const T* x,
                                     const int64_t* target, L* loss, L* lse) {
  using A = compute_t<T>;
  using S = softmax_row::sum_t<T>;
  __shared__ A mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    A m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = CeMaxOp<A>{}(m, A(xr[c]));
    m = block_reduce(m, CeMaxOp<A>{}, mbuf);
    S s = 0, sx = 0;  // sum of exp(x - m); sum of x (the smoothing term's)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A v = A(xr[c]);
      s += S(softmax_row::shifted_exp(v, m, FastExp{}));
      sx += S(v);
    }
    s = block_reduce(s, SumOp<S>{}, sbuf);
    if (eps > 0) sx = block_reduce(sx, SumOp<S>{}, sbuf);
    if (threadIdx.x == 0) {
      const L l = L(m) + L(softmax_row::log_sum<A>(s));
      lse[r] = l;
      const int64_t t = target[r];
      if (t == ignore_index) {
        loss[r] = L(0);
      } else {
        L v = l - L(xr[t]);
        if (eps > 0) v = L(1 - eps) * v + L(eps) * (l - L(sx) / L(C));
        loss[r] = v;
      }
    }
  }
}

template <class T, class L>
__global__ void cross_entropy_backward_kernel(int64_t N, int64_t C, int64_t ignore_index, float eps, const T* x,
                                              const int64_t* target, const L* lse, const L* w, T* gx) {
  using A = compute_t<T>;
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    T* gr = gx + r * C;
    const int64_t t = target[r];
    if (t == ignore_index) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) gr[c] = T(0);
      continue;
    }
    const A l = A(lse[r]), wr = A(w[r]), off = A(eps) / A(C), hot = A(1) - A(eps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A p = FastExp{}(A(xr[c]) - l);
      gr[c] = T(wr * (p - off - (c == t ? hot : A(0))));
    }
  }
}

template <class T>
using loss_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace

void cross_entropy(DType t, int64_t N, int64_t C, int64_t ignore_index, double eps, const void* x,
                   const int64_t* target, void* loss, void* lse, StreamHandle s) {
  if (N == 0) return;
  dispatch_floating(t, "cross_entropy", [&]<class T>() {
    using L = loss_t<T>;
    cross_entropy_kernel<T, L><<<row_grid(N), kThreads, 0, as_stream(s)>>>(
        N, C, ignore_index, float(eps), static_cast<const T*>(x), target, static_cast<L*>(loss), static_cast<L*>(lse));
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(DType t, int64_t N, int64_t C, int64_t ignore_index, double eps, const void* x,
                            const int64_t* target, const void* lse, const void* w, void* gx, StreamHandle s) {
  if (N == 0) return;
  dispatch_floating(t, "cross_entropy_backward", [&]<class T>() {
    using L = loss_t<T>;
    cross_entropy_backward_kernel<T, L><<<row_grid(N), kThreads, 0, as_stream(s)>>>(
        N, C, ignore_index, float(eps), static_cast<const T*>(x), target, static_cast<const L*>(lse),
        static_cast<const L*>(w), static_cast<T*>(gx));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace snug::cuda::kernels
