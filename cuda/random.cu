// SPDX-License-Identifier: MIT
// Random fills (uniform, normal), the CUDA twin of core/cpu/random.cpp.
// Element i of a draw is a pure function of the Philox state and i
// (core/philox.h), so each thread computes its elements as the CPU loop does:
// uniforms (rand, dropout masks) are bit-identical on both devices, normals
// agree to a few ulp (box_muller's logf, sinf, cosf).
#include <cuda_runtime.h>

#include <snug/core/philox.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

// Element i of a draw at st, exactly as core/cpu/random.cpp computes it.
template <class T>
__global__ void random_kernel(bool normal, PhiloxState st, double a, double b, int64_t n, T* out) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float draw = normal ? normal_at(st, uint64_t(i)) : uniform_at(st, uint64_t(i));
    out[i] = static_cast<T>(static_cast<C>(random_value(normal, a, b, draw)));
  }
}

}  // namespace

void random(bool normal, DType t, PhiloxState st, double a, double b, int64_t n, void* out, StreamHandle s) {
  if (n == 0) return;
  dispatch_floating(t, "random", [&]<class T>() {
    random_kernel<T><<<grid_for(n), kThreads, 0, as_stream(s)>>>(normal, st, a, b, n, static_cast<T*>(out));
    check_launch("random");
  });
}

}  // namespace snug::cuda::kernels
