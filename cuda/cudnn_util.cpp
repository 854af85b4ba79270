// SPDX-License-Identifier: MIT
// cuda/cudnn_util.h.
#include <snug/cuda/cudnn_util.h>

#include <cuda_runtime.h>

namespace snug::cuda {

namespace {
constexpr int kMaxHandles = 64;
}  // namespace

LockedCudnn cudnn_for(int device, std::uintptr_t stream) {
  static std::mutex mu[kMaxHandles];
  static cudnnHandle_t handles[kMaxHandles] = {};
  SNUG_CHECK(device >= 0 && device < kMaxHandles, DeviceError, "cuDNN: device index ", device, " out of range");
  std::unique_lock<std::mutex> lock(mu[device]);
  if (!handles[device]) SNUG_CUDNN_CHECK(cudnnCreate(&handles[device]));
  SNUG_CUDNN_CHECK(cudnnSetStream(handles[device], reinterpret_cast<cudaStream_t>(stream)));
  return {std::move(lock), handles[device]};
}

cudnnDataType_t cudnn_type(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      throw DTypeError(str(op, ": expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(t)));
  }
}

TensorDesc::TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w, const char* op) {
  SNUG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  SNUG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(t, op), int(n), int(c), int(h), int(w)));
}

}  // namespace snug::cuda
