// SPDX-License-Identifier: MIT
// AllocPolicy: the decisions the caching front end (CachingAllocator) leaves
// to a policy, so an allocator experiment is one small class.
//
// NOTE [ Allocation policies ]
// The front end owns everything that does not change between policies: the
// lock, segments and their blocks (linked in address order, always tiling
// the segment), the live map, statistics, history, streams and events, the
// out-of-memory path. A policy answers five questions:
//   block_size    how big a block a request of n (rounded) bytes takes;
//   find          which free block of the pool serves it (nullptr: none);
//   split         whether to cut the chosen block, and where (asked again
//                 after each cut, so buddy halves until the block fits);
//   may_merge     whether two adjacent free blocks may become one (asked
//                 again after each merge, so buddies cascade upwards);
//   segment_size  how much to ask the device for when nothing fits, and
//                 grows(): whether to extend the stream's one segment
//                 (expandable) instead of asking for another.
// The policies (AllocPolicy in settings.h, chosen by SNUG_ALLOC_CONF=policy=...):
//   best_fit    the smallest fitting block; split when the rest is worth
//               keeping; merge any free neighbours. PyTorch's rule.
//   first_fit   the lowest-addressed fitting block; otherwise best_fit.
//   size_class  best_fit on sizes rounded up to classes (size_classes per
//               doubling: 1, 1.25, 1.5, 1.75 x 2^k by default, jemalloc's
//               spacing), so freed blocks fit later requests exactly more often.
//   buddy       power-of-two blocks in power-of-two segments, split in
//               halves, merged only with their buddy (the half they were cut
//               from): no search for merges, but up to 2x rounding waste.
//   expandable  best_fit inside one growing segment per stream and pool:
//               a reserved address range (RawBackend::reserve) into which
//               the front end maps map_granularity pages at the end when
//               nothing fits, merging them with a free tail; empty_cache
//               unmaps a free tail. Fragmentation across segments cannot
//               happen because there is one segment.
//   planned     a tape-planned arena (memory/planned_arena.h) that serves the
//               steps after the first with no search; best_fit (or
//               planned_base=expandable) serves everything else.
#pragma once
#include <cstddef>
#include <memory>

#include <snug/memory/block.h>
#include <snug/memory/settings.h>

namespace snug::memory {

class BlockPolicy {
 public:
  explicit BlockPolicy(const AllocatorSettings& s) : s_(s) {}
  virtual ~BlockPolicy() = default;
  virtual const char* name() const = 0;
  // Free pools ordered by address (first fit) instead of by size.
  virtual bool by_address() const { return false; }
  // The block a request of `rounded` bytes (a multiple of settings.round) takes.
  virtual std::size_t block_size(std::size_t rounded) const { return rounded; }
  // A free block of `stream` in `pool` that fits `size`, left in the pool; nullptr: none.
  virtual Block* find(const FreeSet& pool, std::size_t size, StreamId stream) const;
  // The size to cut b down to (the rest becomes a free block), 0 to keep it whole.
  virtual std::size_t split(const Block& b, std::size_t size) const;
  // Whether adjacent free blocks lo (lower address) and hi may merge.
  virtual bool may_merge(const Block& /*lo*/, const Block& /*hi*/) const { return true; }
  // Bytes of a new segment for a request of `size` in the small or large
  // pool; large_reserved is what the large pool holds already.
  virtual std::size_t segment_size(std::size_t size, bool small, std::size_t large_reserved) const;
  // Grow the stream's one segment instead of adding segments (expandable).
  virtual bool grows() const { return false; }

 protected:
  const AllocatorSettings s_;
  bool acceptable(const Block& b, std::size_t size) const;  // max_split_size's oversize rules
};

// The policy settings.policy names (planned: its planned_base; the arena lives beside it).
std::unique_ptr<BlockPolicy> make_block_policy(const AllocatorSettings& s);

}  // namespace snug::memory
