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
// NOTE [ Allocation policies ] (memory/alloc_policy.h) says which of these
// decisions a policy makes instead: how a fit is found, how blocks split and
// merge, how big a new segment is, whether the one segment grows
// (expandable), and the planned arena beside best fit (planned).
//
// Thread-safe: one lock per allocator (a SpinLock: memory/spin_lock.h) guards everything.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>
#include <snug/memory/block.h>
#include <snug/memory/history.h>
#include <snug/memory/node_pool.h>
#include <snug/memory/planned_arena.h>
#include <snug/memory/ptr_map.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/settings.h>
#include <snug/memory/spin_lock.h>
#include <snug/memory/stats.h>

namespace snug::memory {

class BlockPolicy;

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
  // Validates; cached blocks stay. A policy whose blocks another could not
  // take over (buddy, expandable, planned, to or from them) changes only on a
  // pool with no segments left after freeing the cache (else ValueError).
  void set_settings(const AllocatorSettings& s);
  AllocatorSettings settings() const;

  DeviceStats stats() const;
  void reset_peak();
  void record_history(bool enabled, std::size_t max_entries);
  DeviceSnapshot snapshot() const;

  // A training step begins (memory::mark_step). The planned policy records
  // the first step and plans its arena at the second mark (NOTE [ Planned
  // arena ]); the history records a "step" event for replay.
  void mark_step();
  PlannedStats planned_stats() const;  // zeros unless policy=planned

  Device device() const { return device_; }
  RawBackend& backend() { return *backend_; }
  // nbytes rounded to the allocator's granule (settings.round), then the
  // policy's size (size_class, buddy). Inline: every allocation asks.
  std::size_t round_size(std::size_t nbytes) const {
    // Room for the policy's rounding too (at most a doubling, buddy's).
    SNUG_CHECK(valid_size(nbytes), ValueError, "memory::allocate: ", nbytes, " bytes is not a valid size");
    const std::size_t n = round_to_setting(nbytes);
    return own_rounding_ ? policy_block_size(n) : n;
  }
  static bool valid_size(std::size_t nbytes) { return nbytes <= (SIZE_MAX >> 2); }
  std::size_t round_to_setting(std::size_t nbytes) const {  // up to a multiple of settings_.round
    const std::size_t r = settings_.round;
    return nbytes < r ? r : (nbytes + r - 1) & ~(r - 1);
  }
  std::size_t block_size(void* p) const;  // rounded size of a live allocation
  bool owns(const void* p) const;         // p is a live allocation of this allocator
  // Throws snug::Error describing the first broken invariant (tests call it).
  void check_invariants() const;

 private:
  FreeSet& pool_of(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(bool small, std::size_t size, StreamId stream);
  Block* new_segment(bool small, std::size_t seg, StreamId stream);
  bool fits_capacity(std::size_t more) const;
  std::size_t seg_for(bool small, std::size_t size) const;  // the policy's new segment size
  // expandable: one reserved range per (stream, pool). Its blocks tile
  // [base, base + extent); each granule (map_granularity bytes) of that is
  // mapped or not (NOTE [ Expandable segments ] in the .cpp).
  struct Expanse {
    char* base = nullptr;
    std::size_t reserved = 0, extent = 0;
    StreamId stream = 0;
    Block* head = nullptr;        // nullptr while the extent is 0
    std::vector<uint8_t> mapped;  // per granule of the extent
  };
  Expanse& expanse_of(const Block* b);
  Block* grow(bool small, std::size_t size, StreamId stream);
  bool map_block(const Block* b, bool reclaim);  // maps the granules b overlaps; false: the device refused
  void unmap_free(Expanse& e, const Block* keep = nullptr);  // unmaps every granule no allocated block (or keep) overlaps
  void shrink(Expanse& e);
  void plan_arena();
  void attach_arena(std::size_t bytes);
  void release_arena();
  // NOTE [ Held blocks ]
  void make_held(bool adopt);
  void release_held();
  bool release_idle_held();  // true if any went back to the pool
  void index_held();
  bool idle_held(const Block* b) const { return b->held >= 0 && !held_[static_cast<std::size_t>(b->held)].busy; }
  Block* serve_held(int32_t h, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag, const char* op);
  DeviceSnapshot snapshot_locked() const;
  // Under the lock: every allocation but a planned arena block's, every free but an arena block's.
  // held_miss: the held entry whose blocks were all out (-1: none).
  [[gnu::noinline]] void* allocate_locked(std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                                          const char* op, int32_t held_miss);
  [[gnu::noinline]] void deallocate_locked(void* p);
  // NOTE [ Planned fast path ]: the rest of allocate and deallocate, the lock
  // taken first (*_slow) or already held (*_slow_locked: released on return).
  [[gnu::noinline]] void* allocate_slow(std::size_t nbytes, StreamId stream, Tag tag, const char* op);
  [[gnu::noinline]] void* allocate_slow_locked(std::size_t nbytes, StreamId stream, Tag tag, const char* op);
  [[gnu::noinline]] void deallocate_slow(void* p);
  [[gnu::noinline]] void deallocate_slow_locked(void* p);
  [[gnu::noinline]] void* allocate_held_locked(int32_t h, std::size_t size, std::size_t nbytes, Tag tag);
  [[gnu::noinline]] void free_expected_settling(int32_t s);
  [[gnu::noinline]] void free_held_locked(void* p);
  void wait_arena_uses(void* p);
  Block* alloc_slow(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag, const char* op);
  [[noreturn]] void throw_oom(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                              const char* op, bool backend_failed);
  void pool_insert(Block* b);
  void pool_erase(Block* b);
  std::size_t policy_block_size(std::size_t n) const;
  // count_alloc leaves peaks due; settle them before anything decreases (NOTE [ Deferred peaks ]).
  void count_alloc(std::size_t size, std::size_t nbytes, Tag tag);
  void settle_into(DeviceStats& st, const PlannedArena::Counts& a) const;
  DeviceStats merged() const;  // stats_ with the planned arena's counts added in
  static void add_counts(DeviceStats& st, const PlannedArena::Counts& a);
  static inline const PlannedArena::Counts kNoArena{};  // an allocator without an arena adds these
  [[gnu::always_inline]] void settle_peaks() {  // (no call: NOTE [ Planned fast path ])
    if (peaks_due_) {
      settle_into(stats_, arena_ ? arena_->counts() : kNoArena);
      peaks_due_ = false;
      due_tags_ = 0;
    }
  }
  void count_free(std::size_t size, std::size_t requested, Tag tag);
  void free_block(Block* b);
  void merge_and_pool(Block* b);
  void split_block(Block* b, std::size_t keep);
  void process_events(bool wait);
  void release_cached();
  void release_segment(Block* b);
  std::size_t largest_free_block() const;
  void record(Action a, const Block* b, std::size_t requested);

  const Device device_;
  std::unique_ptr<RawBackend> backend_;
  AllocatorSettings settings_;
  std::unique_ptr<BlockPolicy> policy_;
  bool own_rounding_ = false;  // the policy rounds sizes itself (size_class, buddy): round_size asks it
  std::unique_ptr<PlannedArena> arena_;          // policy=planned only
  struct Held {
    Block* b = nullptr;  // nullptr: none could be had
    bool busy = false;   // handed out (else idle: kept for its entry, not in live_, counted nowhere)
  };
  std::vector<Held> held_;  // NOTE [ Held blocks ]: entry h's at 2h and 2h + 1; Block::held indexes this
  std::vector<int32_t> held_table_;  // index_held(): slots of held_, -1 empty
  unsigned held_bits_ = 4;           // held_table_ has 2^this slots
  Held* held_at(const void* p);  // p's held block (handed out or idle), or nullptr
  const Held* held_at(const void* p) const { return const_cast<CachingAllocator*>(this)->held_at(p); }
  void unhold(Held& hd);
  // serve_held's and deallocate's steps, shared with the fast path (inline, no call):
  Held* find_idle_held(int32_t h, std::size_t size, StreamId stream);  // entry h's idle block that fits, or nullptr
  void hand_out_held(Held& hd, std::size_t nbytes, Tag tag, const char* interned_op);
  void take_back_held(Held& hd);  // handed out -> idle (its stream uses none)
  int64_t held_hits_ = 0;
  std::unordered_map<const void*, std::vector<StreamId>> arena_uses_;  // record_stream on planned blocks
  std::map<std::pair<StreamId, bool>, Expanse> expanses_;  // policy=expandable only
  std::size_t capacity_ = kNoLimit;
  std::size_t large_reserved_ = 0;  // bytes of large-pool segments (NOTE [ Segment growth ])

  Block* new_block();
  void delete_block(Block* b);
  // The op name's interned copy (nullptr stays nullptr: a replay's, inline).
  const char* intern_op(const char* op) { return op ? intern_op_name(op) : nullptr; }
  const char* intern_op_name(const char* op);

  mutable SpinLock mu_;
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
  bool peaks_due_ = false;  // NOTE [ Deferred peaks ]
  uint32_t due_tags_ = 0;   // bit t: tag t was allocated since the last settling
  // policy=planned: bytes best fit holds (held blocks included), and the
  // most that the arena in place (if any) and those held at once since the
  // last reset_peak (PlannedStats::planned_peak). (The arena plus best fit's
  // own peak would count a re-recorded step's blocks, made while no arena was
  // in place, on top of the next arena.)
  int64_t outside_arena_ = 0;
  int64_t need_peak_ = 0;
  void note_need() {
    need_peak_ = std::max(need_peak_, outside_arena_ + static_cast<int64_t>(arena_->base() ? arena_->bytes() : 0));
  }
  void add_outside(std::size_t bytes) {
    outside_arena_ += static_cast<int64_t>(bytes);
    note_need();
  }
  History history_;
};

}  // namespace snug::memory
