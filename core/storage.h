// SPDX-License-Identifier: MIT
// Storage: a refcounted run of bytes on one device, shared by all views of it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <snug/base/device.h>

namespace snug {

// NOTE [ Version Counter Sharing ]
// A tensor's version lives in its Storage, so every view of the same bytes sees
// the same counter. Each in-place op bumps it; autograd records the version of
// each tensor it saves and refuses to use a saved tensor whose version changed
// (SavedTensor, autograd/node.h), so an in-place write can never produce a silently
// wrong gradient.
class Storage {
 public:
  // Allocates nbytes on device through the caching allocator (memory/).
  Storage(Device device, std::size_t nbytes);
  // Wraps memory snug does not own; deleter (may be empty) runs on destruction.
  Storage(Device device, void* data, std::size_t nbytes, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
};

}  // namespace snug
