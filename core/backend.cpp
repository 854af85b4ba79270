// SPDX-License-Identifier: MIT
#include <snug/core/backend.h>

#include <snug/core/cpu_backend.h>
#include <snug/cuda/cuda_api.h>  // plain C++: ensure_registered() (cuda/register.cpp or cuda/no_cuda.cpp)

namespace snug {

namespace {
Backend*& slot(DeviceType t) {
  static Backend* table[kNumDeviceTypes] = {};
  return table[static_cast<int>(t)];
}
}  // namespace

void register_backend(DeviceType t, Backend* b) { slot(t) = b; }

bool has_backend(DeviceType t) {
  if (t == DeviceType::CPU) return true;
  if (t == DeviceType::CUDA && slot(t) == nullptr) cuda::ensure_registered();
  return slot(t) != nullptr;
}

Backend& backend_for(DeviceType t) {
  if (t == DeviceType::CPU) {
    static CpuBackend cpu;  // always present
    return cpu;
  }
  Backend* b = slot(t);
  if (b == nullptr && t == DeviceType::CUDA) {
    cuda::ensure_registered();  // registers the CUDA backend on first use when a GPU is present
    b = slot(t);
  }
  SNUG_CHECK(b != nullptr, DeviceError, "no backend for device type ", (t == DeviceType::CUDA ? "cuda" : "?"),
             ": this build of snug has no CUDA support (configure with -DSNUG_CUDA=ON) or no GPU is present");
  return *b;
}

}  // namespace snug
