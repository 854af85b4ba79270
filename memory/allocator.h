// SPDX-License-Identifier: MIT
// The memory API that the rest of snug sees. Every tensor byte is allocated
// here (CPU included) so statistics mean the same on every device.
// memory/ knows nothing of tensors: it deals in devices, bytes and pointers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <snug/base/device.h>

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
  master_weights,  // f32 master copies of half-precision parameters (nn/optim)
};
inline constexpr int kNumTags = 9;
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
// Bytes requested by allocate() on the calling thread since it started, on
// every device: a cheap running total the profiler takes differences of.
std::uint64_t thread_requested_bytes();

// ---- Caching allocator controls (docs/memory.md) -----------------------------
class RawBackend;
class CachingAllocator;
struct AllocatorSettings;

// p (from allocate(d, ...)) is also used by work on `stream`: it is not reused
// for its own stream until that work is done (NOTE [ Stream-aware reuse ]).
void record_stream(Device d, void* p, StreamId stream);
// Limits the bytes device d may reserve (SIZE_MAX: no limit, the default).
// Each cpu:N virtual device has its own pool and limit.
void set_capacity(Device d, std::size_t bytes);
// fraction in (0, 1] of the backend's total memory (physical RAM for cpu).
void set_capacity_fraction(Device d, double fraction);
std::size_t capacity(Device d);
// What device d may use in all: its capacity when set, else (a GPU) the pool's
// reservation plus the device's free memory, else SIZE_MAX
// (CachingAllocator::available). Placement's default capacities.
std::size_t available(Device d);
// Replaces device d's settings (validated; throws ValueError). Every device
// starts with the settings in SNUG_ALLOC_CONF (or the defaults).
void set_settings(Device d, const AllocatorSettings& s);

// A training step begins on device d: training loops call it at the start of
// each step. The planned policy plans its arena from the first step
// (NOTE [ Planned arena ]); recorded histories keep a "step" event, which
// replay passes on. Cheap for every other policy.
void mark_step(Device d);

// A readable table of device d's statistics, by tag, and its settings.
std::string summary(Device d);

// Starts/stops recording alloc/free/segment/oom events on every device
// (current and future), keeping the newest max_entries per device.
void record_history(bool enabled, std::size_t max_entries = 100000);
// Writes a JSON snapshot (segments, blocks, stats, events) of device d, or of
// every device that has an allocator. Load it with load_snapshot (history.h).
void dump_snapshot(Device d, const std::string& path);
void dump_snapshot(const std::string& path);

// How cuda/ plugs in: a factory that makes the raw backend for a device of
// type t (device memory for CUDA; the CPU default is HostBackend). Call it
// before the first allocation on such a device (cuda/register.cpp does, when
// the CUDA plugin registers its backend).
using BackendFactory = std::function<std::unique_ptr<RawBackend>(Device)>;
void register_backend_factory(DeviceType t, BackendFactory factory);

// The allocator behind device d, created on first use. It lives until the
// process ends (never destroyed, so frees after main returns still work).
CachingAllocator& allocator_for(Device d);

}  // namespace snug::memory
