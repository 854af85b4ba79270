// SPDX-License-Identifier: MIT
// AllocatorSettings: every constant of the caching allocator and the policy
// it runs (memory/alloc_policy.h), so trace replay can try other values.
// Parsed from a string such as
//   "round=512,small_threshold=1MiB,max_split_size=64MiB,policy=buddy"
// (the shape of PyTorch's PYTORCH_CUDA_ALLOC_CONF: "key:value" works too),
// read from the environment variable SNUG_ALLOC_CONF when the allocator
// registry starts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace snug::memory {

// How blocks are found, split, merged and segments grown (NOTE [ Allocation
// policies ] in memory/alloc_policy.h):
//   best_fit    the smallest free block that fits (PyTorch's rule; the default)
//   first_fit   the lowest-addressed free block that fits
//   size_class  requests rounded up to size classes (size_classes per doubling), then best fit
//   buddy       power-of-two blocks split in halves, merged only with their buddy
//   expandable  one growing address range per stream and pool, pages mapped on demand
//   planned     from the second step on, an arena planned from the first; best fit
//               (or planned_base=expandable) serves the rest
enum class AllocPolicy : uint8_t { best_fit, first_fit, size_class, buddy, expandable, planned };
inline constexpr int kNumPolicies = 6;
const char* policy_name(AllocPolicy p);
AllocPolicy parse_policy(const std::string& name);  // throws ValueError listing the names

inline constexpr std::size_t kNoLimit = SIZE_MAX;

struct AllocatorSettings {
  std::size_t round = 512;                  // every request is rounded up to a multiple
  std::size_t small_threshold = 1u << 20;   // requests <= this use the small pool
  std::size_t small_segment = 2u << 20;     // raw segment size of the small pool
  std::size_t large_segment = 20u << 20;    // raw segment for large requests < large_threshold
  std::size_t large_threshold = 10u << 20;  // requests >= this get their own segment...
  std::size_t large_round = 2u << 20;       // ...rounded up to a multiple of this
  // Requests < large_threshold get a segment of large-pool reserved bytes /
  // large_growth (at least the request, at most large_segment, rounded up to
  // large_round); 0: always large_segment. See NOTE [ Segment growth ].
  std::size_t large_growth = 16;
  std::size_t max_split_size = kNoLimit;        // blocks >= this are never split
  std::size_t max_split_tolerance = 20u << 20;  // an oversize request may take a block this much bigger
  AllocPolicy policy = AllocPolicy::best_fit;  // "fit=best|first" still reads as best_fit|first_fit
  std::size_t size_classes = 4;               // size_class: classes per doubling (1: powers of two)
  std::size_t map_granularity = 2u << 20;     // expandable: bytes mapped at a time
  // planned: the policy that serves what the arena does not (best_fit or expandable).
  AllocPolicy planned_base = AllocPolicy::best_fit;
  // Where an OutOfMemoryError first writes a snapshot with the history that led
  // to it (history is then recorded from the start); empty: none.
  std::string oom_snapshot;

  // Throws snug::ValueError naming the first bad setting.
  void validate() const;
  // The settings string that parse_settings() reads back to the same values.
  std::string to_string() const;
  bool operator==(const AllocatorSettings&) const = default;
};

// Parses "key=value,key=value" over `base`. Sizes take an optional suffix
// (K, M, G, KiB, MiB, GiB; powers of 1024); max_split_size also takes "none".
// Unknown keys, bad numbers and invalid combinations throw snug::ValueError.
AllocatorSettings parse_settings(const std::string& conf, AllocatorSettings base = {});

// parse_settings(getenv("SNUG_ALLOC_CONF")) or defaults when it is unset/empty;
// the error message names the variable.
AllocatorSettings settings_from_env();


}  // namespace snug::memory
