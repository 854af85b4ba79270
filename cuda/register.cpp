// SPDX-License-Identifier: MIT
// The one place where the CUDA build meets core/ and memory/.
//
// core/backend.cpp calls ensure_registered() the first time anything asks for
// the CUDA backend (backend_for / has_backend). That call is also what keeps
// this object file in every link: a static registrar in a static library is
// dropped unless something references it, and this way no static initializer
// touches the CUDA driver at program start.
//
// With at least one GPU it registers CudaBackend for DeviceType::CUDA and the
// device-memory factory for the caching allocator. Without one it registers
// nothing, so backend_for(DeviceType::CUDA) keeps throwing its DeviceError
// that says no GPU is present, and has_backend() stays false.
#include <memory>
#include <mutex>

#include <snug/core/backend.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/memory/allocator.h>
#include <snug/memory/raw_backend.h>

namespace snug::cuda {

std::unique_ptr<memory::RawBackend> make_device_memory_backend(Device d);  // memory.cpp

bool compiled() { return true; }

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (device_count() == 0) return;
    memory::register_backend_factory(DeviceType::CUDA, [](Device d) { return make_device_memory_backend(d); });
    register_backend(DeviceType::CUDA, &cuda_backend());
  });
}

}  // namespace snug::cuda
