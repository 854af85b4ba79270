// SPDX-License-Identifier: MIT
// Generator: the (seed, offset) pair that random ops draw from. Each random op
// reserves the counters it needs (philox_counters(numel), see NOTE [ Philox
// element mapping ] in core/philox.h) and gets back the state to draw at; the
// generator's offset moves past them. Saving the state before a segment and
// restoring it later replays every random op in the segment exactly, on any
// device, which is what recomputation (autograd/checkpoint) relies on.
#pragma once
#include <cstdint>
#include <mutex>

#include <snug/core/philox.h>

namespace snug {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 0x5eed5eed5eedULL;

  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed), offset_(0) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Sets the seed and restarts the counter at 0.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_offset(uint64_t offset);

  // Returns the state to draw n_counters blocks at and advances the offset
  // past them, atomically: concurrent callers get disjoint counter ranges.
  PhiloxState reserve(uint64_t n_counters);

  PhiloxState get_state() const;
  void set_state(PhiloxState state);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_;
};

// The process-wide generator random ops use when given none.
Generator& default_generator();

// Seeds default_generator() (and restarts its offset at 0).
void manual_seed(uint64_t seed);

}  // namespace snug
