// SPDX-License-Identifier: MIT
#include <snug/core/storage.h>

#include <snug/memory/allocator.h>
#include <snug/memory/stream.h>

namespace snug {

Storage::Storage(Device device, std::size_t nbytes)
    // From the pool of the device's current stream (memory/stream.h): always 0 on the CPU.
    : data_(memory::allocate(device, nbytes, memory::current_stream(device))), nbytes_(nbytes), device_(device) {}

Storage::Storage(Device device, void* data, std::size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), owned_(false), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    memory::deallocate(device_, data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace snug
