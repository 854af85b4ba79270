// SPDX-License-Identifier: MIT
// SNUG_CUDA_CHECK(call): throws snug::DeviceError naming the failed call, the
// CUDA error, and the file and line. Only for files in cuda/ (it includes the
// CUDA runtime header).
#pragma once
#include <cuda_runtime.h>

#include <snug/base/error.h>

#define SNUG_CUDA_CHECK(call)                                                            \
  do {                                                                                   \
    const cudaError_t snug_cuda_err_ = (call);                                           \
    if (snug_cuda_err_ != cudaSuccess)                                                   \
      ::snug::cuda::detail::throw_cuda_error(snug_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

namespace snug::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw DeviceError(::snug::str("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (",
                                cudaGetErrorString(err), ") at ", file, ":", line));
}

}  // namespace snug::cuda::detail

namespace snug::cuda {
// Throws DeviceError naming `what` unless a GPU `device` is present (cuda/device.cu).
void require_device(const char* what, int device);
}  // namespace snug::cuda
