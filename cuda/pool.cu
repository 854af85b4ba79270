// SPDX-License-Identifier: MIT
// Pooling kernels (max with argmax indices, average, adaptive average),
// forward and backward: a thread per output forward, a thread per input
// element backward (it gathers the outputs whose windows hold it, so no
// atomics, in the CPU's order). The per-element work and the windows are in
// core/pool_window.h, shared with core/cpu/pool.cpp; tests/test_cuda_host.cpp
// runs them on the CPU.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/core/pool_window.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

template <class T>
__global__ void pool_forward_kernel(PoolGeometry g, const T* x, T* out, int64_t* indices) {
  const int64_t total = g.planes * g.Ho * g.Wo;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step)
    pool_forward_at(g, x, out, indices, e);
}

template <class T>
__global__ void pool_backward_kernel(PoolGeometry g, const T* grad_out, const int64_t* indices, T* grad_x) {
  const int64_t total = g.planes * g.H * g.W;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step)
    pool_backward_at(g, grad_out, indices, grad_x, e);
}

}  // namespace

void pool2d(DType t, const PoolGeometry& g, const void* x, void* out, int64_t* indices, StreamHandle s) {
  const int64_t total = g.planes * g.Ho * g.Wo;
  if (total == 0) return;
  dispatch_floating(t, "pool2d", [&]<class T>() {
    pool_forward_kernel<T>
        <<<grid_for(total), kThreads, 0, as_stream(s)>>>(g, static_cast<const T*>(x), static_cast<T*>(out), indices);
    check_launch("pool2d");
  });
}

void pool2d_backward(DType t, const PoolGeometry& g, const void* grad_out, const int64_t* indices, void* grad_x,
                     StreamHandle s) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return;
  dispatch_floating(t, "pool2d_backward", [&]<class T>() {
    pool_backward_kernel<T><<<grid_for(total), kThreads, 0, as_stream(s)>>>(g, static_cast<const T*>(grad_out), indices,
                                                                            static_cast<T*>(grad_x));
    check_launch("pool2d_backward");
  });
}

}  // namespace snug::cuda::kernels
