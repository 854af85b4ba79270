// SPDX-License-Identifier: MIT
// DeviceStats: the caching allocator's counters for one device, a plain
// struct copied out under the allocator's lock. Meanings follow PyTorch's
// torch.cuda.memory_stats() so numbers compare across the two:
//
//   allocated   blocks handed to callers (rounded sizes)
//   requested   the sizes callers asked for (before rounding)
//   active      allocated blocks plus freed blocks still waiting for another
//               stream's event (not yet reusable)
//   inactive_split  free blocks inside segments that also hold other blocks;
//               they cannot be returned to the backend ("non-releasable")
//   reserved    segments held from the raw backend (allocated + cached)
//
// Each has bytes and a count, and each is a Stat: current, peak (since start
// or reset_peak), and running totals of what was added (allocated) and taken
// away (freed), so current == allocated - freed always.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include <snug/memory/allocator.h>

namespace snug::memory {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // total ever added
  int64_t freed = 0;      // total ever removed

  void add(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
};

struct DeviceStats {
  Stat allocated_bytes, requested_bytes, active_bytes, inactive_split_bytes, reserved_bytes;
  Stat allocation, active, inactive_split, segment;  // counts of blocks / segments

  int64_t num_alloc_retries = 0;   // allocations that had to free the cache and retry
  int64_t num_ooms = 0;            // OutOfMemoryErrors thrown
  int64_t num_cache_hits = 0;      // allocations served from a cached free block
  int64_t num_cache_misses = 0;    // allocations that needed a new segment (== raw allocs made for them)
  int64_t num_raw_allocs = 0;      // segments obtained from the backend
  int64_t num_raw_frees = 0;       // segments returned to the backend
  int64_t num_deferred_frees = 0;  // frees that waited for another stream's event

  // Allocated bytes per tag (index: static_cast<int>(Tag)). tag_at_peak is the
  // breakdown at the moment allocated_bytes last reached its peak, which
  // answers "how much of my peak is activations".
  std::array<Stat, kNumTags> tag_bytes{};
  std::array<int64_t, kNumTags> tag_at_peak{};

  std::size_t capacity = SIZE_MAX;  // the device's limit (SIZE_MAX: none)
};

// "12.50 MiB" (binary units), for messages and the summary table.
std::string format_bytes(std::size_t n);

// The statistics of device d (creates its allocator on first use).
DeviceStats stats(Device d);

}  // namespace snug::memory
