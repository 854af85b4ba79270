#include "core/storage.h"

#include "memory/allocator.h"

namespace snug {

Storage::Storage(Device device, std::size_t nbytes)
    : data_(memory::allocate(device, nbytes)), nbytes_(nbytes), device_(device) {}

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
