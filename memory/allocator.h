// The memory API that the rest of snug sees. Every tensor byte is allocated
// here (CPU included) so statistics mean the same on every device.
// memory/ knows nothing of tensors: it deals in devices, bytes and pointers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace snug::memory {

// A stream is an ordering domain for work on a device. CPU devices have one
// stream (0). On CUDA it is the cudaStream_t value (0 = default stream).
using StreamId = std::uintptr_t;

// What an allocation is for; statistics break down by tag.
enum class Tag : uint8_t {
  other = 0,
  parameter,
  gradient,
  optimizer_state,
  activation,
  temporary,
  data,
  workspace,
};
inline constexpr int kNumTags = 8;
const char* tag_name(Tag t);

// Allocates nbytes (may be 0) on device d; the pointer is 64-byte aligned at
// least. Throws OutOfMemoryError (with numbers) when it cannot.
void* allocate(Device d, std::size_t nbytes, StreamId stream = 0);
// Returns a pointer obtained from allocate(d, ...). nullptr is ignored.
void deallocate(Device d, void* p);

// Scope guards, thread-local: the tag and op name given to allocations made
// while they live. They nest; the innermost wins.
class TagScope {
 public:
  explicit TagScope(Tag t);
  ~TagScope();
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  Tag prev_;
};
class OpScope {
 public:
  explicit OpScope(const char* op_name);  // the string must outlive the scope
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* prev_;
};
Tag current_tag();
const char* current_op();

// Quick counters (full statistics live in memory/stats.h).
std::size_t allocated(Device d);       // bytes in live allocations (rounded)
std::size_t reserved(Device d);        // bytes held from the raw backend
std::size_t peak_allocated(Device d);  // since start or reset_peak(d)
void reset_peak(Device d);
void empty_cache(Device d);

}  // namespace snug::memory
