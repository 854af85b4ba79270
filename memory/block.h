// SPDX-License-Identifier: MIT
// Block: one piece of a segment, as the caching front end (caching_allocator.cpp)
// and the allocation policies (alloc_policy.h) see it. Internal to memory/.
#pragma once
#include <cstddef>
#include <functional>
#include <set>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/history.h>
#include <snug/memory/node_pool.h>

namespace snug::memory {

struct Block;

// Free pools are ordered by (stream, size, address) for the size-searching
// policies, or by (stream, address) for first fit: both find a fit with one
// lower_bound and take it out without a search.
struct BlockLess {
  bool by_address = false;
  bool operator()(const Block* a, const Block* b) const;
};
using FreeSet = std::set<Block*, BlockLess, PoolAllocator<Block*>>;

struct Block {
  char* ptr = nullptr;
  char* segment = nullptr;  // the first byte of its segment (buddy offsets count from here)
  std::size_t size = 0;
  std::size_t requested = 0;
  StreamId stream = 0;
  bool small = false;
  BlockState state = BlockState::free;
  Tag tag = Tag::other;
  const char* op = nullptr;
  int pending_events = 0;
  int32_t held = -1;  // policy=planned: its index among the planner's held blocks (CachingAllocator::held_)
  Block* prev = nullptr;  // neighbours in the same segment, by address
  Block* next = nullptr;
  std::vector<StreamId> stream_uses;  // other streams that use this block
  FreeSet::iterator pool_it;          // where it is in its pool, while free (erase without a search)

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

inline bool BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (!by_address && a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

}  // namespace snug::memory
