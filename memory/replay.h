// SPDX-License-Identifier: MIT
// Trace replay: runs the alloc/free events of a recorded trace against a
// fresh CachingAllocator on a SimulatedBackend with other settings or another
// policy (memory/alloc_policy.h), to ask "what would the peak reserved memory
// have been with max_split_size=..., or with buddy?". replay_malloc runs the
// same events through glibc's malloc, the baseline every policy is measured
// against.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <snug/memory/history.h>
#include <snug/memory/planned_arena.h>
#include <snug/memory/settings.h>

namespace snug::memory {

struct ReplayResult {
  int64_t peak_allocated_bytes = 0;  // blocks as the policy rounded them
  int64_t peak_requested_bytes = 0;  // what the trace asked for: the same for every policy
  int64_t peak_reserved_bytes = 0;
  int64_t raw_allocs = 0;            // device allocations (segments, mappings, the arena)
  // From the second step on (the trace's second "step" event; a trace
  // without steps: from its second pass when planned, else from the start):
  // what a long run settles to once the first step has shaped the pool.
  int64_t steady_peak_reserved_bytes = 0;
  int64_t steady_raw_allocs = 0;
  int64_t steps = 0;                 // "step" events seen (planned, step-less: the 2 passes)
  double ns_per_alloc_free = 0;      // wall time of the replay / allocations
  // From the second step on: the median over those steps of each step's wall
  // time / its allocations (the step's mark included), and the plain mean.
  double steady_ns_per_alloc_free = 0;
  double steady_ns_per_alloc_free_mean = 0;
  int64_t steady_steps_timed = 0;  // the steps the median is over (0: the whole replay's mean)
  PlannedStats planned;              // policy=planned: hits, fallbacks, arena and its lower bound
  int64_t num_ooms = 0;       // allocations that failed under `capacity`
  int64_t ops = 0;            // allocate + deallocate calls made
  int64_t skipped_frees = 0;  // frees of blocks allocated before the trace began
  double ns_per_op = 0;       // wall time of the replay / ops
  DeviceStats stats;          // the replaying allocator's final statistics
  // With snapshot_at_peak: the segments and blocks at the moment allocated
  // bytes reached their peak (the last time, if reached more than once), for
  // "where is the slack?" questions. Events are not recorded.
  DeviceSnapshot at_peak;
  DeviceSnapshot history;  // with ReplayOptions::record_history
};

// Replays the alloc, free and step events in order (other actions are
// ignored). Each alloc requests the recorded `requested` size on the
// recorded stream with the recorded tag. Blocks still live at the end are
// freed afterwards (not timed; with snapshot_at_peak the timing includes the
// snapshots). With repeats > 1 the trace runs that many times: a trace with
// steps replays its steps from the second on in each later pass, one without
// whole, its leftovers freed after each pass (the steady_* figures cover the
// later passes: timing a few thousand operations once measures cold caches).
// A trace with no step events takes each pass as one step; under
// policy=planned it runs at least twice, so the second pass runs on the plan
// made from the first. Throws ValueError if the trace allocates an address
// twice.
ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings,
                    std::size_t capacity = kNoLimit, bool snapshot_at_peak = false, int repeats = 1);

// The same, and with record_history the replaying allocator's own history
// and final layout in ReplayResult::history (a snapshot tools/memory_timeline.py
// draws: how this policy would have held the trace); its timing then
// includes the recording.
struct ReplayOptions {
  std::size_t capacity = kNoLimit;
  bool snapshot_at_peak = false;
  int repeats = 1;
  bool record_history = false;
};
ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings,
                    const ReplayOptions& options);

// The same events through malloc/free (each alloc mallocs its requested
// size; nothing is touched). Peak reserved is the most the heap held above
// where it started (mallinfo2: the main arena plus mmapped chunks, sampled
// after each alloc in a second, untimed pass); raw_allocs counts the times
// the heap grew or a chunk was mmapped. Timing covers the first pass only.
// Under a sanitizer, whose malloc keeps no mallinfo2 figures, both are 0.
ReplayResult replay_malloc(const std::vector<TraceEntry>& events);

}  // namespace snug::memory
