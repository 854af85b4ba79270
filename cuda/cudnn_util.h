// SPDX-License-Identifier: MIT
// What conv.cpp and batch_norm.cpp share of cuDNN: the error check, one
// handle per device, dtype mapping, RAII tensor descriptors and the scaling
// factors. Internal to cuda/ (it includes cudnn.h).
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <mutex>

#include <snug/base/error.h>
#include <snug/core/dtype.h>

#define SNUG_CUDNN_CHECK(call)                                                                                      \
  do {                                                                                                              \
    const cudnnStatus_t snug_st_ = (call);                                                                          \
    if (snug_st_ != CUDNN_STATUS_SUCCESS)                                                                           \
      throw ::snug::DeviceError(::snug::str("cuDNN error: ", #call, " failed with ", cudnnGetErrorString(snug_st_), \
                                            " at ", __FILE__, ":", __LINE__));                                      \
  } while (0)

namespace snug::cuda {

// One handle per device, kept for the process, pointed at the calling
// thread's current stream (memory/stream.h) for each call. Its lock is held
// from setting the stream until the call is queued, so threads on different
// streams do not re-point it under each other.
struct LockedCudnn {
  std::unique_lock<std::mutex> lock;
  cudnnHandle_t h;
};
LockedCudnn cudnn_for(int device, std::uintptr_t stream);  // cudnn_util.cpp

// f32, f64, f16, bf16; anything else is a DTypeError naming `op`.
cudnnDataType_t cudnn_type(DType t, const char* op);

// An NCHW tensor descriptor (packed strides).
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType t, int64_t n, int64_t c, int64_t h, int64_t w, const char* op = "cuDNN");
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

// alpha/beta: float for every type but f64 (cuDNN's rule for the scaling factors).
struct Scale {
  float f;
  double d;
  const void* get(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d) : &f; }
};
inline const Scale kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

}  // namespace snug::cuda
