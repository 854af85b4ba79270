// SPDX-License-Identifier: MIT
// AllocatorSettings: every constant of the caching allocator, so trace replay
// can try other values. Parsed from a string such as
//   "round=512,small_threshold=1MiB,max_split_size=64MiB,fit=first"
// (the shape of PyTorch's PYTORCH_CUDA_ALLOC_CONF), read from the environment
// variable SNUG_ALLOC_CONF when the allocator registry starts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace snug::memory {

// best: the smallest free block that fits (less fragmentation, PyTorch's rule).
// first: the lowest-addressed free block that fits (for replay experiments).
enum class FitPolicy : uint8_t { best, first };

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
  FitPolicy fit = FitPolicy::best;

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

const char* fit_name(FitPolicy f);

}  // namespace snug::memory
