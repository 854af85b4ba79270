// SPDX-License-Identifier: MIT
// Allocation-failure injection, for testing that every code path survives
// running out of memory (docs/reliability.md, tests/test_alloc_failure.cpp).
//
//   memory::FailAllocation fail(17);   // the 17th allocation from now fails
//   try { train_step(); } catch (const OutOfMemoryError&) { ... }
//   fail.count();                       // allocations seen so far
//
// Counts every memory::allocate call on every device and thread while the
// guard lives; the nth throws OutOfMemoryError (as a full device would),
// later ones succeed. nth = 0 only counts. One guard at a time.
#pragma once
#include <cstdint>

namespace snug::memory {

class FailAllocation {
 public:
  explicit FailAllocation(std::uint64_t nth);
  ~FailAllocation();
  FailAllocation(const FailAllocation&) = delete;
  FailAllocation& operator=(const FailAllocation&) = delete;
  std::uint64_t count() const;  // allocations made since the guard began
  bool fired() const;           // whether the nth allocation was reached (and failed)
};

}  // namespace snug::memory
