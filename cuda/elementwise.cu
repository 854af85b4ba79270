// Elementwise kernels. The math is not here: each kernel is a template over a
// functor from core/functors.h, the same functor the CPU loop instantiates
// (NOTE [ One definition of each op's math ]), so only the launch is CUDA's.
#include <cuda_runtime.h>

#include "core/functors.h"
#include "cuda/check.h"
#include "cuda/cuda_api.h"

namespace snug::cuda {

namespace {

constexpr int kThreads = 256;

// x, out are (n,); grid-stride loop so any n fits any grid.
template <class F>
__global__ void unary_kernel(F f, const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = f(x[i]);
}

// x, y, out are (n,).
template <class F>
__global__ void binary_kernel(F f, const float* __restrict__ x, const float* __restrict__ y,
                              float* __restrict__ out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = f(x[i], y[i]);
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 65535 ? blocks : 65535);
}

void check_launch(const char* what, const char* op_name) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw DeviceError(::snug::str("cuda::", what, "(", op_name, "): kernel launch failed with ",
                                  cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

// Host-side visitors: turn the runtime op into a launch of the kernel for its
// functor. visit_unary/visit_binary are SNUG_HOST_DEVICE, so their callbacks
// must be too (else nvcc warns #20014); the launch itself is host-only.
struct LaunchUnary {
  unsigned grid;
  const float* x;
  float* out;
  int64_t n;
  template <class F> SNUG_HOST_DEVICE void operator()(F f) const {
#if !defined(__CUDA_ARCH__)  // launched from the host only; the device pass never calls this
    unary_kernel<F><<<grid, kThreads>>>(f, x, out, n);
#endif
  }
};
struct LaunchBinary {
  unsigned grid;
  const float* x;
  const float* y;
  float* out;
  int64_t n;
  template <class F> SNUG_HOST_DEVICE void operator()(F f) const {
#if !defined(__CUDA_ARCH__)
    binary_kernel<F><<<grid, kThreads>>>(f, x, y, out, n);
#endif
  }
};

}  // namespace

void unary_f32(UnaryOp op, double a, double b, const float* x, float* out, int64_t n) {
  SNUG_CHECK(int(op) >= 0 && op < UnaryOp::count, ValueError, "cuda::unary_f32: invalid op ", int(op));
  SNUG_CHECK(n >= 0, ValueError, "cuda::unary_f32(", unary_op_name(op), "): negative length ", n);
  if (n == 0) return;
  visit_unary(op, a, b, LaunchUnary{grid_for(n), x, out, n});
  check_launch("unary_f32", unary_op_name(op));
}

void binary_f32(BinaryOp op, const float* x, const float* y, float* out, int64_t n) {
  SNUG_CHECK(int(op) >= 0 && op < BinaryOp::count, ValueError, "cuda::binary_f32: invalid op ", int(op));
  SNUG_CHECK(n >= 0, ValueError, "cuda::binary_f32(", binary_op_name(op), "): negative length ", n);
  if (n == 0) return;
  visit_binary(op, LaunchBinary{grid_for(n), x, y, out, n});
  check_launch("binary_f32", binary_op_name(op));
}

}  // namespace snug::cuda
