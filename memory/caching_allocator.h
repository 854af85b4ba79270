// SPDX-License-Identifier: MIT
// CachingAllocator: one device's pool of memory, in the style of PyTorch's
// CUDA caching allocator but device-agnostic (it talks to a RawBackend).
//
// NOTE [ Caching allocator layout ]
// Memory comes from the backend in segments. A segment is cut into blocks,
// which are doubly linked in address order and always cover it exactly.
// Requests are rounded up to settings.round. Requests <= small_threshold use
// the small pool (segments of small_segment bytes); larger ones use the large
// pool (for requests < large_threshold a segment that grows with the pool up
// to large_segment, NOTE [ Segment growth ]; otherwise a segment of the
// request rounded up to large_round). Each pool keeps its free
// blocks ordered by (stream, size, address): best fit is one lower_bound.
// Taking a block splits off the rest when the rest is worth keeping (>= round
// in the small pool, > small_threshold in the large pool, and never for blocks
// >= max_split_size). Freeing a block merges it with free neighbours, so no
// two free blocks are ever adjacent. A segment that is one free block can be
// returned to the backend (empty_cache, or the out-of-memory path).
//
// NOTE [ Stream-aware reuse ]
// A block belongs to the stream it was allocated on and is only reused for
// that stream. record_stream(p, s) says another stream s also uses it; when
// it is freed, an event is recorded on each such stream and the block goes
// back to the pool only when all of them complete (checked at the start of
// each allocate, and waited for before the cache is freed).
//
// Thread-safe: one mutex per allocator guards everything.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/history.h>
#include <snug/memory/node_pool.h>
#include <snug/memory/ptr_map.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/settings.h>
#include <snug/memory/stats.h>

namespace snug::memory {

class CachingAllocator {
 public:
  CachingAllocator(Device device, std::unique_ptr<RawBackend> backend, AllocatorSettings settings = {});
  ~CachingAllocator();  // returns free segments; segments still in use are left alone
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nbytes may be 0 (a smallest block is still handed out, so the pointer is
  // unique). Throws OutOfMemoryError after freeing the cache and retrying.
  void* allocate(std::size_t nbytes, StreamId stream = 0, Tag tag = Tag::other, const char* op = nullptr);
  // nullptr is ignored; a pointer this allocator did not hand out throws ValueError.
  void deallocate(void* p);
  // p (live) is also used on `stream`; see NOTE [ Stream-aware reuse ].
  void record_stream(void* p, StreamId stream);

  void empty_cache();                    // waits for pending events, returns free segments
  void set_capacity(std::size_t bytes);  // kNoLimit: none; frees the cache if over
  void set_capacity_fraction(double f);  // f in (0, 1] of backend().total_memory()
  std::size_t capacity() const;
  // The bytes this device may use in all: the capacity when one is set, else
  // what the pool has reserved plus the backend's free memory when it knows
  // it (a GPU's cudaMemGetInfo), else kNoLimit. Placement plans with it
  // (parallel/placement.h).
  std::size_t available() const;
  void set_settings(const AllocatorSettings& s);  // validates; cached blocks stay
  AllocatorSettings settings() const;

  DeviceStats stats() const;
  void reset_peak();
  void record_history(bool enabled, std::size_t max_entries);
  DeviceSnapshot snapshot() const;

  Device device() const { return device_; }
  RawBackend& backend() { return *backend_; }
  std::size_t round_size(std::size_t nbytes) const;
  std::size_t block_size(void* p) const;  // rounded size of a live allocation
  bool owns(const void* p) const;         // p is a live allocation of this allocator
  // Throws snug::Error describing the first broken invariant (tests call it).
  void check_invariants() const;

 private:
  struct Block;
  struct BlockLess {
    bool by_address = false;  // first fit orders by address, best fit by size
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockLess, PoolAllocator<Block*>>;

  std::size_t segment_size(std::size_t size) const;
  FreeSet& pool_of(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(bool small, std::size_t size, StreamId stream);
  bool should_split(const Block* b, std::size_t size) const;
  Block* new_segment(bool small, std::size_t seg, StreamId stream);
  Block* alloc_slow(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag, const char* op);
  [[noreturn]] void throw_oom(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                              const char* op, bool backend_failed);
  void pool_insert(Block* b);
  void pool_erase(Block* b);
  void free_block(Block* b);
  void process_events(bool wait);
  void release_cached();
  void release_segment(Block* b);
  std::size_t largest_free_block() const;
  void record(Action a, const Block* b, std::size_t requested);

  const Device device_;
  std::unique_ptr<RawBackend> backend_;
  AllocatorSettings settings_;
  std::size_t capacity_ = kNoLimit;
  std::size_t large_reserved_ = 0;  // bytes of large-pool segments (NOTE [ Segment growth ])

  Block* new_block();
  void delete_block(Block* b);
  const char* intern_op(const char* op);

  mutable std::mutex mu_;
  // The node pool first: the sets using it are destroyed before it.
  NodePool set_nodes_;
  std::vector<Block*> spare_blocks_;  // Block objects kept for reuse
  FreeSet small_free_, large_free_;
  PtrMap<Block*> live_;                                  // allocated blocks by address
  std::map<std::uintptr_t, Block*> segments_;            // first block of each segment
  std::vector<std::pair<EventHandle, Block*>> pending_;  // see NOTE [ Stream-aware reuse ]
  // An OpScope's string need only outlive the scope, but a block keeps its op
  // name for snapshots: blocks point at copies here (by content, never freed;
  // op names are a small set). op_seen_ maps a caller's pointer to its copy.
  std::unordered_set<std::string> op_names_;
  PtrMap<const char*> op_seen_;
  DeviceStats stats_;
  History history_;
};

}  // namespace snug::memory
