// SPDX-License-Identifier: MIT
// Compile-time proof that the shared leaf headers (core/half.h, core/philox.h)
// build as device code: if a host-only call sneaks into them, this file stops
// compiling in CI, which has nvcc but no GPU. Nothing launches these kernels;
// the real ones live beside their ops and use the same functions.
#include <cstdint>

#include <snug/core/half.h>
#include <snug/core/philox.h>

namespace snug::cuda {

// in is (n,) f32, out is (n,) f16 bits.
__global__ void float_to_half_kernel(const float* in, uint16_t* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float_to_half(in[i]);
}

// in is (n,) bf16, out is (n,) f32; goes through the storage type and its
// float arithmetic so operators are compiled for the device too.
__global__ void bf16_axpy_kernel(const BFloat16* in, float* out, float alpha, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(in[i] * BFloat16(alpha) + Half(1.0f));
}

// out is (n,): element i = uniform_at(state, i), exactly what the CPU computes
// for the same state (NOTE [ Philox element mapping ]).
__global__ void philox_uniform_kernel(PhiloxState state, float* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = uniform_at(state, uint64_t(i));
}

// out is (n,) standard normals.
__global__ void philox_normal_kernel(PhiloxState state, float* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = normal_at(state, uint64_t(i));
}

}  // namespace snug::cuda
