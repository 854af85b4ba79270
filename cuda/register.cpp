// SPDX-License-Identifier: MIT
// The one place where the CUDA build meets core/ and memory/.
//
// core/backend.cpp calls ensure_registered() (through libsnug's forwarder,
// cuda/plugin_loader.cpp, which loads this plugin) the first time anything
// asks for the CUDA backend (backend_for / has_backend). No static
// initializer registers anything: loading the plugin must not touch the CUDA
// driver, and nothing may call back into libsnug's loader while dlopen runs
// (NOTE [ The CUDA plugin ]).
//
// With at least one GPU it registers CudaBackend for DeviceType::CUDA, the
// device-memory factory for the caching allocator and the pinned host memory
// of memory/pinned.h. Without one it registers nothing, so
// backend_for(DeviceType::CUDA) keeps throwing its DeviceError that says no
// GPU is present, and has_backend() stays false.
#include <memory>
#include <mutex>

#include <snug/core/backend.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/memory/allocator.h>
#include <snug/memory/pinned.h>
#include <snug/memory/raw_backend.h>

namespace snug::cuda {

std::unique_ptr<memory::RawBackend> make_device_memory_backend(Device d);  // memory.cpp
std::unique_ptr<memory::RawBackend> make_pinned_memory_backend();          // memory.cpp

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (device_count() == 0) return;
    memory::register_backend_factory(DeviceType::CUDA, [](Device d) { return make_device_memory_backend(d); });
    memory::register_pinned_backend(&make_pinned_memory_backend);
    register_backend(DeviceType::CUDA, &cuda_backend());
  });
}

}  // namespace snug::cuda
