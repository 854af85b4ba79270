// SPDX-License-Identifier: MIT
// Dropout in one kernel each way (Backend::dropout, dropout_backward). Element
// i draws uniform_at(state, i), the value rand() gives it (core/philox.h), so
// the GPU drops exactly the elements the CPU drops; the products are the
// composition's (rand, ge, to_dtype, affine, mul), rounding for rounding:
//
//   forward   keep = u_i >= p;  out = x * (keep ? m : 0),  m = 1 / (1 - p) rounded to x's dtype
//   backward  gx = g * (keep ? m : 0),                      m rounded to g's dtype
//
// x's storage type in and out (f32 math for 16-bit), a bool mask: no f32
// draw of the activation's size is made.
#include <cuda_runtime.h>

#include <snug/core/philox.h>
#include <snug/cuda/kernels.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

template <class T>
__global__ void dropout_kernel(PhiloxState st, float p, double scale, int64_t n, const T* x, T* out, bool* keep) {
  using C = compute_t<T>;
  const C m = C(T(C(scale)));  // the mask's value in x's dtype, as affine(1) writes it
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const bool k = uniform_at(st, uint64_t(i)) >= p;
    keep[i] = k;
    out[i] = T(C(x[i]) * (k ? m : C(0)));
  }
}

template <class T>
__global__ void dropout_backward_kernel(double scale, int64_t n, const T* g, const bool* keep, T* gx) {
  using C = compute_t<T>;
  const C m = C(T(C(scale)));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    gx[i] = T(C(g[i]) * (keep[i] ? m : C(0)));
}

}  // namespace

void dropout(DType t, PhiloxState st, double p, int64_t n, const void* x, void* out, bool* keep, StreamHandle s) {
  if (n == 0) return;
  dispatch_floating(t, "dropout", [&]<class T>() {
    dropout_kernel<T><<<grid_for(n), kThreads, 0, as_stream(s)>>>(st, float(p), 1.0 / (1.0 - p), n,
                                                                   static_cast<const T*>(x), static_cast<T*>(out), keep);
    check_launch("dropout");
  });
}

void dropout_backward(DType t, double scale, int64_t n, const void* g, const bool* keep, void* gx, StreamHandle s) {
  if (n == 0) return;
  dispatch_floating(t, "dropout_backward", [&]<class T>() {
    dropout_backward_kernel<T><<<grid_for(n), kThreads, 0, as_stream(s)>>>(scale, n, static_cast<const T*>(g), keep,
                                                                            static_cast<T*>(gx));
    check_launch("dropout_backward");
  });
}

}  // namespace snug::cuda::kernels
