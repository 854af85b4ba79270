// SPDX-License-Identifier: MIT
#include <snug/core/backend.h>

#include <snug/core/cpu_backend.h>
#include <snug/cuda/cuda_api.h>  // plain C++: ensure_registered(), plugin_error() (cuda/plugin_loader.cpp)

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
  if (b == nullptr && t == DeviceType::CUDA) {
    const std::string why = cuda::plugin_error();
    throw DeviceError(str("no backend for device type cuda: ", why.empty()
                                                                   ? "the CUDA plugin is loaded, but no GPU is present"
                                                                   : "no GPU is present (" + why + ")"));
  }
  SNUG_CHECK(b != nullptr, DeviceError, "no backend for device type ?");
  return *b;
}

}  // namespace snug
