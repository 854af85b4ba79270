// SPDX-License-Identifier: MIT
// A device's memory without the device, for tests of the allocator's stream
// logic: segments are address ranges from a bump pointer, never touched and
// never reused, 2 MiB-aligned like the caching allocator's. Tests derive from
// it and add the events and streams they need to observe.
#pragma once
#include <cstddef>
#include <cstdint>

#include <snug/memory/raw_backend.h>

namespace snug::testing {

class AddressOnlyBackend : public memory::RawBackend {
 public:
  static constexpr std::size_t kSegmentAlign = std::size_t{1} << 21;
  explicit AddressOnlyBackend(std::uintptr_t base = std::uintptr_t{1} << 40) : next(base) {}
  void* alloc(std::size_t n) override {
    void* p = reinterpret_cast<void*>(next);
    next += (n + (kSegmentAlign - 1)) / kSegmentAlign * kSegmentAlign;
    return p;
  }
  void free(void*, std::size_t) override {}
  std::size_t total_memory() const override { return std::size_t{1} << 30; }

  std::uintptr_t next;
};

}  // namespace snug::testing
