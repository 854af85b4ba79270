// SPDX-License-Identifier: MIT
// Trace replay: runs the alloc/free events of a recorded trace against a
// fresh CachingAllocator on a SimulatedBackend with other settings, to ask
// "what would the peak reserved memory have been with max_split_size=...?".
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <snug/memory/history.h>
#include <snug/memory/settings.h>

namespace snug::memory {

struct ReplayResult {
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t raw_allocs = 0;
  int64_t num_ooms = 0;       // allocations that failed under `capacity`
  int64_t ops = 0;            // allocate + deallocate calls made
  int64_t skipped_frees = 0;  // frees of blocks allocated before the trace began
  double ns_per_op = 0;       // wall time of the replay / ops
  DeviceStats stats;          // the replaying allocator's final statistics
  // With snapshot_at_peak: the segments and blocks at the moment allocated
  // bytes reached their peak (the last time, if reached more than once), for
  // "where is the slack?" questions. Events are not recorded.
  DeviceSnapshot at_peak;
};

// Replays the alloc and free events in order (other actions are ignored).
// Each alloc requests the recorded `requested` size on the recorded stream
// with the recorded tag. Blocks still live at the end are freed afterwards
// (not timed; with snapshot_at_peak the timing includes the snapshots). Throws ValueError if the trace allocates an address twice.
ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings,
                    std::size_t capacity = kNoLimit, bool snapshot_at_peak = false);

}  // namespace snug::memory
