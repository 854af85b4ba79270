// SPDX-License-Identifier: MIT
#include <snug/memory/caching_allocator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include <snug/base/error.h>
#include <snug/memory/alloc_policy.h>
#include <snug/memory/planned_arena.h>

namespace snug::memory {

namespace {
// History kept when only oom_snapshot asked for it: enough for the steps
// before the failure, bounded so a long run does not grow.
constexpr std::size_t kOomHistory = 200000;
}  // namespace

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<RawBackend> backend, AllocatorSettings settings)
    : device_(device),
      backend_(std::move(backend)),
      settings_(settings),
      small_free_(BlockLess{settings.policy == AllocPolicy::first_fit}, PoolAllocator<Block*>(&set_nodes_)),
      large_free_(BlockLess{settings.policy == AllocPolicy::first_fit}, PoolAllocator<Block*>(&set_nodes_)) {
  SNUG_CHECK(backend_ != nullptr, ValueError, "CachingAllocator(", device, "): backend is null");
  settings_.validate();
  policy_ = make_block_policy(settings_);
  SNUG_CHECK(!policy_->grows() || backend_->can_reserve(), ValueError, "CachingAllocator(", device,
             "): policy=expandable needs address reservation, which the ", backend_->name(), " backend does not offer");
  own_rounding_ = settings_.policy == AllocPolicy::size_class || settings_.policy == AllocPolicy::buddy;
  if (settings_.policy == AllocPolicy::planned) arena_ = std::make_unique<PlannedArena>();
  if (!settings_.oom_snapshot.empty()) history_.enable(true, kOomHistory);
}

Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block;
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  // Reset field by field: keeps stream_uses' (empty) storage, no temporaries.
  b->requested = 0;
  b->state = BlockState::free;
  b->tag = Tag::other;
  b->op = nullptr;
  b->pending_events = 0;
  b->held = -1;
  b->prev = b->next = nullptr;
  return b;
}

void CachingAllocator::delete_block(Block* b) { spare_blocks_.push_back(b); }

const char* CachingAllocator::intern_op_name(const char* op) {
  // Fast path: the same pointer with the same text as last time (a pointer
  // may be reused for other text once its scope ends, hence the compare).
  const char** seen = op_seen_.find(op);
  if (seen && std::strcmp(*seen, op) == 0) return *seen;
  const char* copy = op_names_.emplace(op).first->c_str();
  if (seen)
    *seen = copy;
  else
    op_seen_.insert(op, copy);
  return copy;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<SpinLock> lock(mu_);
  release_held();
  for (auto& [e, b] : pending_) backend_->destroy_event(e);
  if (arena_ && arena_->base() && arena_->live_count() == 0) backend_->free(arena_->base(), arena_->bytes());
  for (auto& [key, e] : expanses_) {
    bool all_free = true;
    for (Block* b = e.head; b;) {
      all_free = all_free && b->state == BlockState::free;
      Block* n = b->next;
      delete b;
      b = n;
    }
    if (all_free) {
      const std::size_t g = settings_.map_granularity;
      for (std::size_t i = 0; i < e.mapped.size(); ++i)
        if (e.mapped[i]) backend_->unmap(e.base + i * g, g);
      backend_->release(e.base, e.reserved);
    }
  }
  for (auto& [addr, head] : segments_) {
    if (policy_->grows()) break;  // expandable: every segment was an expanse, gone above
    bool all_free = true;
    std::size_t total = 0;
    for (Block* b = head; b; b = b->next) {
      all_free = all_free && b->state == BlockState::free;
      total += b->size;
    }
    // Memory still handed out is left mapped: its owner may yet touch it.
    if (all_free) backend_->free(head->ptr, total);
    for (Block* b = head; b;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
  }
  for (Block* b : spare_blocks_) delete b;
}

// ---- pools --------------------------------------------------------------------

void CachingAllocator::pool_insert(Block* b) {
  b->pool_it = pool_of(b->small).insert(b).first;
  if (b->is_split()) {
    stats_.inactive_split_bytes.add(static_cast<int64_t>(b->size));
    stats_.inactive_split.add(1);
  }
}

void CachingAllocator::pool_erase(Block* b) {
  pool_of(b->small).erase(b->pool_it);
  if (b->is_split()) {
    stats_.inactive_split_bytes.sub(static_cast<int64_t>(b->size));
    stats_.inactive_split.sub(1);
  }
}

// Takes the policy's fitting free block of `stream` out of the pool, or returns nullptr.
Block* CachingAllocator::find_free(bool small, std::size_t size, StreamId stream) {
  Block* found = policy_->find(pool_of(small), size, stream);
  if (found) pool_erase(found);
  return found;
}

// ---- segments -------------------------------------------------------------------

std::size_t CachingAllocator::seg_for(bool small, std::size_t size) const {
  return policy_->segment_size(size, small, large_reserved_);
}

bool CachingAllocator::fits_capacity(std::size_t more) const {
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  return capacity_ == kNoLimit || (more <= capacity_ && reserved <= capacity_ - more);
}

Block* CachingAllocator::new_segment(bool small, std::size_t seg, StreamId stream) {
  if (!fits_capacity(seg)) return nullptr;
  void* p = backend_->alloc(seg);
  if (!p) return nullptr;
  Block* b = new_block();
  b->ptr = static_cast<char*>(p);
  b->segment = b->ptr;
  b->size = seg;
  b->stream = stream;
  b->small = small;
  segments_.emplace(reinterpret_cast<std::uintptr_t>(p), b);
  stats_.reserved_bytes.add(static_cast<int64_t>(seg));
  if (!small) large_reserved_ += seg;
  stats_.segment.add(1);
  ++stats_.num_raw_allocs;
  record(Action::segment_alloc, b, 0);
  return b;
}

void CachingAllocator::release_segment(Block* b) {
  segments_.erase(reinterpret_cast<std::uintptr_t>(b->ptr));
  record(Action::segment_free, b, 0);
  backend_->free(b->ptr, b->size);
  stats_.reserved_bytes.sub(static_cast<int64_t>(b->size));
  if (!b->small) large_reserved_ -= b->size;
  stats_.segment.sub(1);
  ++stats_.num_raw_frees;
  delete_block(b);
}

// Returns every segment that is one free block to the backend (expandable:
// unmaps every free tail).
void CachingAllocator::release_cached() {
  // An arena with nothing live in it is cache too, and so are idle held
  // blocks; the next step takes them again.
  if (arena_ && arena_->base() && arena_->live_count() == 0) release_arena();
  release_held();
  if (policy_->grows()) {
    for (auto& [key, e] : expanses_) shrink(e);
    return;
  }
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->is_split()) {
        ++it;
        continue;
      }
      it = pool->erase(it);  // whole segment: not counted in inactive_split
      release_segment(b);
    }
  }
}

// ---- expandable segments ---------------------------------------------------------

// NOTE [ Expandable segments ]
// Each (stream, pool) has one range of addresses, reserved once for all the
// memory the device could give it, and blocks tile [base, base + extent).
// Memory is mapped into the range one granule (map_granularity, 2 MiB: a
// GPU's page for cuMemMap) at a time, where blocks need it:
//   - a block handed out has every granule it overlaps mapped (map_block);
//   - when no free block fits, the extent grows at its end (merging with a
//     free tail), and before the new end is mapped, every granule of every
//     expanse that no allocated block overlaps is unmapped (unmap_free).
// So a hole between live blocks holds no memory once the pool needs to grow:
// its pages move to where they are needed. (Only then: a block taken from a
// hole maps its own granules back, and nothing else moves, so a steady
// step maps nothing.) Reserved bytes are the mapped
// granules; what remains over the live blocks is at most the partly used
// granules at block edges. empty_cache unmaps every free granule and trims
// a free tail off the extent. PyTorch's expandable_segments unmaps free pages
// only when freeing the cache (an OOM retry or empty_cache).

CachingAllocator::Expanse& CachingAllocator::expanse_of(const Block* b) { return expanses_[{b->stream, b->small}]; }

bool CachingAllocator::map_block(const Block* b, bool reclaim) {
  Expanse& e = expanse_of(b);
  const std::size_t g = settings_.map_granularity;
  const auto first = static_cast<std::size_t>(b->ptr - e.base) / g;
  const auto last = (static_cast<std::size_t>(b->ptr - e.base) + b->size - 1) / g;
  // reclaim: the extent grew for this block. Take the
  // pages of every free granule first (the block's own stay), so the mapped
  // bytes follow the live ones. A block inside the extent maps only its own.
  if (reclaim)
    for (auto& [key, other] : expanses_) unmap_free(other, b);
  for (std::size_t i = first; i <= last; ++i) {
    if (e.mapped[i]) continue;
    std::size_t j = i;  // map the run of unmapped granules in one call
    while (j + 1 <= last && !e.mapped[j + 1]) ++j;
    const std::size_t bytes = (j - i + 1) * g;
    if (!fits_capacity(bytes) || !backend_->map(e.base + i * g, bytes)) return false;
    std::fill(e.mapped.begin() + static_cast<std::ptrdiff_t>(i), e.mapped.begin() + static_cast<std::ptrdiff_t>(j + 1),
              uint8_t{1});
    stats_.reserved_bytes.add(static_cast<int64_t>(bytes));
    if (!b->small) large_reserved_ += bytes;
    ++stats_.num_raw_allocs;
    // The history sees each mapping as a segment of its own (PyTorch's segment_map).
    if (history_.enabled())
      history_.record(Action::segment_alloc, trace_now_ns(), reinterpret_cast<std::uintptr_t>(e.base + i * g), bytes,
                      0, e.stream, Tag::other, nullptr);
    i = j;
  }
  return true;
}

void CachingAllocator::unmap_free(Expanse& e, const Block* keep) {
  const std::size_t g = settings_.map_granularity;
  std::vector<uint8_t> used(e.mapped.size(), 0);
  for (const Block* b = e.head; b; b = b->next) {
    if (b->state == BlockState::free && b != keep) continue;
    const auto off = static_cast<std::size_t>(b->ptr - e.base);
    for (std::size_t i = off / g; i <= (off + b->size - 1) / g; ++i) used[i] = 1;
  }
  for (std::size_t i = 0; i < e.mapped.size(); ++i) {
    if (!e.mapped[i] || used[i]) continue;
    std::size_t j = i;
    while (j + 1 < e.mapped.size() && e.mapped[j + 1] && !used[j + 1]) ++j;
    const std::size_t bytes = (j - i + 1) * g;
    backend_->unmap(e.base + i * g, bytes);
    std::fill(e.mapped.begin() + static_cast<std::ptrdiff_t>(i), e.mapped.begin() + static_cast<std::ptrdiff_t>(j + 1),
              uint8_t{0});
    stats_.reserved_bytes.sub(static_cast<int64_t>(bytes));
    if (e.head && !e.head->small) large_reserved_ -= std::min(large_reserved_, bytes);
    ++stats_.num_raw_frees;
    if (history_.enabled())
      history_.record(Action::segment_free, trace_now_ns(), reinterpret_cast<std::uintptr_t>(e.base + i * g), bytes, 0,
                      e.stream, Tag::other, nullptr);
    i = j;
  }
}

// The extent grows at its end by whole granules, enough for `size` together
// with a free tail; returns that (unpooled, not yet mapped) block, or nullptr
// when the reservation is used up or the memory is not there.
Block* CachingAllocator::grow(bool small, std::size_t size, StreamId stream) {
  Expanse& e = expanses_[{stream, small}];
  const std::size_t g = settings_.map_granularity;
  if (!e.base) {
    // Addresses for all the memory this pool could ever use: the capacity, or the device.
    std::size_t want = capacity_ != kNoLimit ? capacity_ : backend_->total_memory();
    if (want == 0) want = std::size_t{1} << 40;
    want = (want + g - 1) / g * g;
    e.base = static_cast<char*>(backend_->reserve(want));
    if (!e.base) return nullptr;
    e.reserved = want;
    e.stream = stream;
  }
  Block* tail = e.head;
  while (tail && tail->next) tail = tail->next;
  const bool tail_free = tail && tail->state == BlockState::free;
  const std::size_t have = tail_free ? tail->size : 0;
  const std::size_t more = (size - have + g - 1) / g * g;
  if (more > e.reserved - e.extent) return nullptr;
  char* at = e.base + e.extent;
  e.extent += more;
  e.mapped.resize(e.extent / g, 0);
  Block* b;
  if (tail_free) {
    pool_erase(tail);
    tail->size += more;
    b = tail;
  } else {
    b = new_block();
    b->ptr = at;
    b->segment = e.base;
    b->size = more;
    b->stream = stream;
    b->small = small;
    b->prev = tail;
    if (tail) {
      tail->next = b;
    } else {
      e.head = b;
      segments_.emplace(reinterpret_cast<std::uintptr_t>(e.base), b);
      stats_.segment.add(1);
    }
  }
  return b;
}

// empty_cache: every free granule unmapped, and a free tail off the extent.
void CachingAllocator::shrink(Expanse& e) {
  unmap_free(e);
  Block* tail = e.head;
  while (tail && tail->next) tail = tail->next;
  if (!tail || tail->state != BlockState::free) return;
  const std::size_t g = settings_.map_granularity;
  const auto start = static_cast<std::size_t>(tail->ptr - e.base);
  const std::size_t cut = (start + g - 1) / g * g;  // the first granule wholly in the tail
  if (cut >= e.extent) return;
  pool_erase(tail);
  if (cut == start) {  // the tail goes entirely
    if (tail->prev) {
      tail->prev->next = nullptr;
    } else {
      segments_.erase(reinterpret_cast<std::uintptr_t>(e.base));
      stats_.segment.sub(1);
      e.head = nullptr;
    }
    delete_block(tail);
  } else {
    tail->size -= e.extent - cut;
    pool_insert(tail);
  }
  e.extent = cut;
  e.mapped.resize(cut / g);
}

// The out-of-memory path: a new segment (expandable: a longer one); then
// wait for blocks held back by other streams and look again; then free the
// cache and retry; then throw.
Block* CachingAllocator::alloc_slow(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                                    const char* op) {
  auto more = [&]() { return policy_->grows() ? grow(small, size, stream) : new_segment(small, seg_for(small, size), stream); };
  // Idle held blocks are cache: before the pool grows they go back to it, one
  // by one (their entries adopt a block again at their next fallback).
  if (release_idle_held())
    if (Block* b = find_free(small, size, stream)) {
      ++stats_.num_cache_hits;
      return b;
    }
  if (Block* b = more()) {
    ++stats_.num_cache_misses;
    return b;
  }
  if (!pending_.empty()) {
    process_events(/*wait=*/true);
    if (Block* b = find_free(small, size, stream)) {
      ++stats_.num_cache_hits;
      return b;
    }
  }
  ++stats_.num_alloc_retries;
  release_cached();
  if (Block* b = more()) {
    ++stats_.num_cache_misses;
    return b;
  }
  // Tell a capacity refusal from the backend's own failure.
  throw_oom(small, size, nbytes, stream, tag, op, fits_capacity(seg_for(small, size)));
}

// ---- allocate / free --------------------------------------------------------------

// A block of `size` bytes (asked: nbytes) is handed out, or comes back:
// the statistics every policy keeps (active bytes follow the block's state).
std::size_t CachingAllocator::policy_block_size(std::size_t n) const { return policy_->block_size(n); }

// NOTE [ Deferred peaks ]: an allocation raises the counts it changes, but
// not their peaks: it marks them due. A running sum's peak is always reached
// just before a decrease (or at the end), so bringing every peak up to its
// current value before anything of count_alloc's (or the arena's) decreases,
// and before any reader looks, gives exactly the peaks an update on every
// add would, with one store per allocation instead of a compare per count.
// A planned arena block counts only in PlannedArena::Counts (live and ever),
// which merged() adds to stats_ for every reader; stats_'s peaks for these
// counts are the peaks of the sums. (The arena's path is a few dozen
// instructions; these counts were a third of them.)
// `a`: the arena's counts (kNoArena without one). Inline: it is most of
// free_expected_settling's work (NOTE [ Planned fast path ]), and of
// settle_peaks() wherever a count goes down.
[[gnu::always_inline]] inline void CachingAllocator::settle_into(DeviceStats& st, const PlannedArena::Counts& a) const {
  // tag_at_peak: the breakdown when allocated_bytes reaches (or meets again) its peak.
  if (st.allocated_bytes.current + a.bytes >= st.allocated_bytes.peak) [[unlikely]]
    for (int t = 0; t < kNumTags; ++t) st.tag_at_peak[t] = st.tag_bytes[t].current + a.tag[t];
  auto up = [](Stat& x, int64_t arena) { x.peak = std::max(x.peak, x.current + arena); };
  up(st.allocated_bytes, a.bytes);
  up(st.active_bytes, a.bytes);
  up(st.allocation, a.blocks);
  up(st.active, a.blocks);
  up(st.requested_bytes, a.requested);
  // Only the tags allocated since the last settling can have risen (a step
  // that allocates and frees by turns settles on every free): one round per
  // due tag (a shift loop took a round per tag below the highest due one).
  // __builtin_ctz of a nonzero source: GCC's tzcnt here runs as bsf on a CPU
  // without BMI1 (tools/check_cpu_levels.py).
  for (uint32_t due = due_tags_; due != 0; due &= due - 1) {
    const auto t = static_cast<std::size_t>(__builtin_ctz(due));
    up(st.tag_bytes[t], a.tag[t]);
  }
}

// stats_ with the arena's blocks added in: what every reader sees.
DeviceStats CachingAllocator::merged() const {
  DeviceStats st = stats_;
  if (peaks_due_) settle_into(st, arena_ ? arena_->counts() : kNoArena);
  if (arena_) add_counts(st, arena_->counts());
  st.capacity = capacity_;
  return st;
}

void CachingAllocator::add_counts(DeviceStats& st, const PlannedArena::Counts& a) {
  auto add = [](Stat& x, int64_t live, int64_t total) {
    x.current += live;
    x.allocated += total;
    x.freed += total - live;
  };
  add(st.allocated_bytes, a.bytes, a.total_bytes);
  add(st.active_bytes, a.bytes, a.total_bytes);
  add(st.allocation, a.blocks, a.total_blocks);
  add(st.active, a.blocks, a.total_blocks);
  add(st.requested_bytes, a.requested, a.total_requested);
  for (int t = 0; t < kNumTags; ++t) add(st.tag_bytes[t], a.tag[t], a.tag_total[t]);
}

[[gnu::always_inline]] inline void CachingAllocator::count_alloc(std::size_t size, std::size_t nbytes, Tag tag) {
  const auto bytes = static_cast<int64_t>(size);
  for (Stat* x : {&stats_.allocated_bytes, &stats_.active_bytes, &stats_.tag_bytes[static_cast<int>(tag)]}) {
    x->current += bytes;
    x->allocated += bytes;
  }
  for (Stat* x : {&stats_.allocation, &stats_.active}) {
    ++x->current;
    ++x->allocated;
  }
  stats_.requested_bytes.current += static_cast<int64_t>(nbytes);
  stats_.requested_bytes.allocated += static_cast<int64_t>(nbytes);
  peaks_due_ = true;
  due_tags_ |= 1u << static_cast<int>(tag);
}

[[gnu::always_inline]] inline void CachingAllocator::count_free(std::size_t size, std::size_t requested, Tag tag) {
  settle_peaks();
  const auto bytes = static_cast<int64_t>(size);
  stats_.allocated_bytes.sub(bytes);
  stats_.allocation.sub(1);
  stats_.requested_bytes.sub(static_cast<int64_t>(requested));
  stats_.tag_bytes[static_cast<int>(tag)].sub(bytes);
}

// held_table_: an open-addressing table of the held blocks by address
// (Fibonacci hashing, linear probing, at most a quarter full), rebuilt when
// the set of held blocks changes (a plan, an adoption, a release: rare), so a
// free finds its held block, or learns it has none, in a probe or two.
namespace {
std::size_t held_home(const void* p, unsigned bits) {
  const auto k = reinterpret_cast<std::uintptr_t>(p) >> 9;  // blocks are 512-byte aligned
  return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}
}  // namespace

// (Inline: the fast path of deallocate finds held blocks with it, NOTE [ Planned fast path ].)
[[gnu::always_inline]] inline CachingAllocator::Held* CachingAllocator::held_at(const void* p) {
  if (held_table_.empty()) return nullptr;
  const std::size_t mask = held_table_.size() - 1;
  for (std::size_t at = held_home(p, held_bits_);; at = (at + 1) & mask) {
    const int32_t i = held_table_[at];
    if (i < 0) return nullptr;
    if (held_[static_cast<std::size_t>(i)].b->ptr == p) return &held_[static_cast<std::size_t>(i)];
  }
}

[[gnu::always_inline]] inline CachingAllocator::Held* CachingAllocator::find_idle_held(int32_t h, std::size_t size,
                                                                                      StreamId stream) {
  for (std::size_t i = 2 * static_cast<std::size_t>(h); i < 2 * static_cast<std::size_t>(h) + 2 && i < held_.size(); ++i)
    if (Held& hd = held_[i]; hd.b && !hd.busy && hd.b->stream == stream && hd.b->size >= size) return &hd;
  return nullptr;
}

[[gnu::always_inline]] inline void CachingAllocator::hand_out_held(Held& hd, std::size_t nbytes, Tag tag,
                                                                   const char* interned_op) {
  Block* b = hd.b;
  hd.busy = true;
  b->requested = nbytes;
  b->tag = tag;
  b->op = interned_op;
  count_alloc(b->size, nbytes, tag);
  ++held_hits_;
}

[[gnu::always_inline]] inline void CachingAllocator::take_back_held(Held& hd) {
  Block* b = hd.b;
  hd.busy = false;
  count_free(b->size, b->requested, b->tag);
  stats_.active_bytes.sub(static_cast<int64_t>(b->size));
  stats_.active.sub(1);
}

// NOTE [ Planned fast path ]: a planned step's arena block is taken and given
// back by allocate and deallocate themselves, under one lock exchange, and
// that path calls nothing, so the compiler saves almost no registers for it
// (when the slow paths were calls inside allocate, its prologue and epilogue
// were a sixth of a planned pair's instructions: callgrind). Each case that
// needs more registers is a tail call, the lock held, to a function of its
// own: a held block handed out (allocate_held_locked) or taken back
// (free_held_locked), the expected free with peaks to settle first
// (free_expected_settling); each of them falls back to a *_slow_locked
// function. Every other case is a tail call to allocate_slow /
// deallocate_slow (the lock still to take) or *_slow_locked (the lock held),
// which hold the lock through whatever the allocator does.
void* CachingAllocator::allocate(std::size_t nbytes, StreamId stream, Tag tag, const char* op) {
  if (!mu_.try_lock()) [[unlikely]]
    return allocate_slow(nbytes, stream, tag, op);
  // NOTE [ Planned arena ]: a planned step's block, with no search (its
  // stream is the default one: the plan records one stream's step).
  // (No own rounding to ask about: policy=planned rounds as best fit does.)
  if (arena_ && stream == 0 && valid_size(nbytes) && arena_->state() == PlannedArena::State::planned &&
      !history_.enabled()) {
    const std::size_t size = round_to_setting(nbytes);  // round_size (no policy rounding here)
    int32_t h = -1;
    if (const int32_t s = arena_->ready(size, &h); s >= 0) {
      char* p = arena_->hand_out_next(s, nbytes, tag);
      peaks_due_ = true;  // the arena counted it (NOTE [ Deferred peaks ])
      due_tags_ |= 1u << static_cast<int>(tag);
      mu_.unlock();
      return p;
    } else if (s == PlannedArena::kHeld && !op) {  // a held entry's block (an op name to intern goes the slow way)
      return allocate_held_locked(h, size, nbytes, tag);
    }
  }
  return allocate_slow_locked(nbytes, stream, tag, op);
}

// Called with the lock held (released on the way out): held entry h's idle
// block, as take() + serve_held() give it, else the slow way.
void* CachingAllocator::allocate_held_locked(int32_t h, std::size_t size, std::size_t nbytes, Tag tag) {
  if (Held* hd = find_idle_held(h, size, 0)) {
    arena_->take_held_entry();
    hand_out_held(*hd, nbytes, tag, nullptr);
    mu_.unlock();
    return hd->b->ptr;
  }
  return allocate_slow_locked(nbytes, 0, tag, nullptr);
}

void* CachingAllocator::allocate_slow(std::size_t nbytes, StreamId stream, Tag tag, const char* op) {
  mu_.lock();
  return allocate_slow_locked(nbytes, stream, tag, op);
}

// Called with the lock held: it is released on the way out.
void* CachingAllocator::allocate_slow_locked(std::size_t nbytes, StreamId stream, Tag tag, const char* op) {
  std::lock_guard<SpinLock> lock(mu_, std::adopt_lock);
  const std::size_t size = round_size(nbytes);
  if (arena_ && stream == 0 && arena_->state() == PlannedArena::State::planned) {
    if (char* p = arena_->take(size, nbytes, tag)) {
      peaks_due_ = true;  // the arena counted it (NOTE [ Deferred peaks ])
      due_tags_ |= 1u << static_cast<int>(tag);
      if (history_.enabled()) [[unlikely]]
        history_.record(Action::alloc, trace_now_ns(), reinterpret_cast<std::uintptr_t>(p), size, nbytes, stream, tag,
                        intern_op(op));
      return p;
    } else if (const int32_t h = arena_->take_held_request(); h >= 0) {  // NOTE [ Held blocks ]
      if (Block* b = serve_held(h, size, nbytes, stream, tag, op)) return b->ptr;
      return allocate_locked(size, nbytes, stream, tag, op, h);
    }
  }
  return allocate_locked(size, nbytes, stream, tag, op, -1);
}

void* CachingAllocator::allocate_locked(std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                                        const char* op, int32_t held_miss) {
  // A step of another kind (take() just said so): the arena's memory goes
  // back now, not after the step (it would sit idle beside the fallback's),
  // and this step is recorded for a new plan (NOTE [ Planned arena ]).
  if (arena_ && arena_->state() == PlannedArena::State::planned && arena_->other_step()) {
    release_arena();
    arena_->replan();
  }
  int32_t adopt = -1;
  if (held_miss >= 0) {  // its held block(s) were out (allocate)
    arena_->count_fallback();
    // Both busy, or one missing: the block the base policy gives now
    // becomes the entry's (its second: a value replaced while the old one
    // is still held, `loss = step()`), so the next step has one free.
    for (std::size_t i = 2 * static_cast<std::size_t>(held_miss); i < 2 * static_cast<std::size_t>(held_miss) + 2; ++i)
      if (stream == 0 && i < held_.size() && !held_[i].b) {
        adopt = static_cast<int32_t>(i);
        break;
      }
  }
  if (!pending_.empty()) process_events(/*wait=*/false);
  const bool small = size <= settings_.small_threshold;
  Block* b = find_free(small, size, stream);
  const bool hit = b != nullptr;
  if (hit)
    ++stats_.num_cache_hits;
  else
    b = alloc_slow(small, size, nbytes, stream, tag, op);

  // The policy cuts the block down (buddy: in halves, so possibly more than once).
  while (const std::size_t keep = policy_->split(*b, size)) split_block(b, keep);
  if (policy_->grows() && !map_block(b, /*reclaim=*/!hit)) {
    // Not enough memory for its pages: free granules elsewhere first, then
    // give the block back and fail.
    for (auto& [key, e] : expanses_) unmap_free(e, b);
    if (!map_block(b, false)) {
      merge_and_pool(b);
      throw_oom(small, size, nbytes, stream, tag, op, fits_capacity(settings_.map_granularity));
    }
  }
  if (arena_) {
    if (stream == 0 && arena_->state() == PlannedArena::State::recording) arena_->record_alloc(b->ptr, size);
    add_outside(b->size);
  }
  b->state = BlockState::allocated;
  b->requested = nbytes;
  b->tag = tag;
  b->op = intern_op(op);
  live_.insert(b->ptr, b);

  count_alloc(b->size, nbytes, tag);
  if (history_.enabled()) record(Action::alloc, b, nbytes);
  // (Above: an entry's second held block; unless freeing the cache on the way
  // to this block, an OOM retry, gave every held block back.)
  if (adopt >= 0 && static_cast<std::size_t>(adopt) < held_.size() && !held_[static_cast<std::size_t>(adopt)].b) {
    live_.erase(b->ptr);
    b->held = adopt;
    held_[static_cast<std::size_t>(adopt)] = Held{b, true};
    index_held();
  }
  return b->ptr;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  if (!mu_.try_lock()) [[unlikely]]
    return deallocate_slow(p);
  // NOTE [ Planned fast path ]: the arena block the plan expects back next,
  // or a held block (NOTE [ Held blocks ]) going idle.
  if (!history_.enabled()) {
    if (arena_ && arena_->contains(p)) {
      if (const int32_t s = arena_uses_.empty() ? arena_->expected_free(p) : -1; s >= 0) {
        if (peaks_due_) return free_expected_settling(s);
        arena_->release_expected(s);
        mu_.unlock();
        return;
      }
    } else if (!held_table_.empty()) {
      return free_held_locked(p);
    }
  }
  return deallocate_slow_locked(p);
}

// Called with the lock held (released on the way out): arena slot s's block,
// the free the plan expects, with peaks due: they are settled before the
// arena's counts go down (NOTE [ Deferred peaks ]).
void CachingAllocator::free_expected_settling(int32_t s) {
  settle_peaks();
  arena_->release_expected(s);
  mu_.unlock();
}

// Called with the lock held (released on the way out): a block that is not
// the arena's; a held one going idle (NOTE [ Held blocks ]) is taken back
// here, anything else the slow way.
void CachingAllocator::free_held_locked(void* p) {
  if (Held* hd = held_at(p); hd && hd->busy && hd->b->stream_uses.empty()) {
    take_back_held(*hd);
    mu_.unlock();
    return;
  }
  return deallocate_slow_locked(p);
}

void CachingAllocator::deallocate_slow(void* p) {
  mu_.lock();
  return deallocate_slow_locked(p);
}

// Called with the lock held: it is released on the way out.
void CachingAllocator::deallocate_slow_locked(void* p) {
  std::lock_guard<SpinLock> lock(mu_, std::adopt_lock);
  if (arena_ && arena_->contains(p)) {
    settle_peaks();  // before the arena's counts go down (NOTE [ Deferred peaks ])
    std::size_t requested = 0;
    Tag tag = Tag::other;
    const auto bytes = static_cast<int64_t>(arena_->give_back(p, &requested, &tag));
    if (!arena_uses_.empty()) [[unlikely]]
      wait_arena_uses(p);
    if (history_.enabled()) [[unlikely]]
      history_.record(Action::free, trace_now_ns(), reinterpret_cast<std::uintptr_t>(p), static_cast<std::size_t>(bytes),
                      requested, 0, tag, nullptr);
    return;
  }
  if (!held_table_.empty())  // a held block back to its entry, idle (NOTE [ Held blocks ])
    if (Held* hd = held_at(p); hd && hd->busy && hd->b->stream_uses.empty()) {
      take_back_held(*hd);
      if (history_.enabled()) [[unlikely]]
        record(Action::free, hd->b, hd->b->requested);
      return;
    }
  deallocate_locked(p);  // (held blocks reach it only freed twice, or used on another stream)
}

// A planned block's bytes are the next planned block's at once: work on
// another stream that uses it must be done first (a host wait: rare).
void CachingAllocator::wait_arena_uses(void* p) {
  auto it = arena_uses_.find(p);
  if (it == arena_uses_.end()) return;
  for (StreamId st : it->second) {
    const EventHandle e = backend_->record_event(st);
    backend_->synchronize_event(e);
    backend_->destroy_event(e);
  }
  arena_uses_.erase(it);
}

void CachingAllocator::deallocate_locked(void* p) {
  if (arena_ && arena_->state() == PlannedArena::State::recording) arena_->record_free(p);
  Block* b = nullptr;
  if (Held* hd = held_at(p)) {  // a held block (NOTE [ Held blocks ]): not in the live map
    SNUG_CHECK(hd->busy, ValueError, "memory::deallocate: ", p, " is not a live allocation on ", device_,
               " (freed twice, or allocated on another device)");
    // Out and used on another stream (deallocate took the rest): an ordinary
    // block from here, whose free waits for that stream below.
    b = hd->b;
    unhold(*hd);
    live_.erase(p);
  } else {
    Block** found = live_.find(p);
    SNUG_CHECK(found != nullptr, ValueError, "memory::deallocate: ", p, " is not a live allocation on ", device_,
               " (freed twice, or allocated on another device)");
    b = *found;
    live_.erase(p);
  }
  if (arena_) outside_arena_ -= static_cast<int64_t>(b->size);
  count_free(b->size, b->requested, b->tag);
  if (history_.enabled()) record(Action::free, b, b->requested);

  if (!b->stream_uses.empty()) {
    b->state = BlockState::pending_free;
    for (StreamId s : b->stream_uses) {
      pending_.emplace_back(backend_->record_event(s), b);
      ++b->pending_events;
    }
    b->stream_uses.clear();
    ++stats_.num_deferred_frees;
    return;
  }
  free_block(b);
}

// b (allocated or pending) becomes free: merge with free neighbours, pool it.
void CachingAllocator::free_block(Block* b) {
  settle_peaks();  // NOTE [ Deferred peaks ]
  stats_.active_bytes.sub(static_cast<int64_t>(b->size));
  stats_.active.sub(1);
  b->state = BlockState::free;
  b->requested = 0;
  b->tag = Tag::other;
  b->op = nullptr;
  merge_and_pool(b);
}

// b keeps its first `keep` bytes; the rest becomes a free block in the pool.
void CachingAllocator::split_block(Block* b, std::size_t keep) {
  Block* rest = new_block();
  rest->ptr = b->ptr + keep;
  rest->segment = b->segment;
  rest->size = b->size - keep;
  rest->stream = b->stream;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = keep;
  pool_insert(rest);
}

// b (free, in no pool) joins its free neighbours as the policy allows, and the pool.
void CachingAllocator::merge_and_pool(Block* b) {
  // Merges keep the lower block, so a segment's first Block never changes.
  // Again after each merge, as long as the policy allows (buddies cascade).
  for (;;) {
    if (Block* p = b->prev; p && p->state == BlockState::free && policy_->may_merge(*p, *b)) {
      pool_erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete_block(b);
      b = p;
    } else if (Block* n = b->next; n && n->state == BlockState::free && policy_->may_merge(*b, *n)) {
      pool_erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete_block(n);
    } else {
      break;
    }
  }
  pool_insert(b);
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard<SpinLock> lock(mu_);
  if (arena_ && arena_->contains(p)) {  // a planned block: its free waits for the stream (below)
    arena_->size_of(p);                 // ValueError unless live
    if (stream != 0) arena_uses_[p].push_back(stream);
    return;
  }
  Block** found = live_.find(p);
  Held* hd = found ? nullptr : held_at(p);
  SNUG_CHECK(found != nullptr || (hd && hd->busy), ValueError, "memory::record_stream: ", p,
             " is not a live allocation on ", device_);
  Block* b = found ? *found : hd->b;
  if (stream == b->stream) return;  // its own stream orders its reuse already
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void CachingAllocator::process_events(bool wait) {
  std::size_t keep = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    auto [e, b] = pending_[i];
    if (wait) backend_->synchronize_event(e);
    if (wait || backend_->query_event(e)) {
      backend_->destroy_event(e);
      if (--b->pending_events == 0) free_block(b);
    } else {
      pending_[keep++] = pending_[i];
    }
  }
  pending_.resize(keep);
}

// ---- out of memory ---------------------------------------------------------------

std::size_t CachingAllocator::largest_free_block() const {
  std::size_t m = 0;
  for (const FreeSet* pool : {&small_free_, &large_free_})
    for (const Block* b : *pool) m = std::max(m, b->size);
  return m;
}

void CachingAllocator::throw_oom(bool small, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                                 const char* op, bool backend_failed) {
  ++stats_.num_ooms;
  settle_peaks();
  if (history_.enabled()) history_.record(Action::oom, trace_now_ns(), 0, size, nbytes, stream, tag, intern_op(op));
  const std::size_t seg = seg_for(small, size);
  const auto allocated = static_cast<std::size_t>(merged().allocated_bytes.current);
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  const std::size_t cached = reserved - allocated;
  const std::size_t largest = largest_free_block();
  const double frag = cached ? 1.0 - static_cast<double>(largest) / static_cast<double>(cached) : 0.0;
  char frag_text[32];
  std::snprintf(frag_text, sizeof frag_text, "%.1f%%", 100.0 * frag);

  std::string cause;
  bool fragmentation = false;
  if (backend_failed) {
    cause = str("the ", backend_->name(), " backend could not provide a ", format_bytes(seg),
                " segment (the device itself is out of memory)");
  } else if (allocated + size > capacity_ || size > capacity_) {
    cause = str("capacity: live allocations (", format_bytes(allocated), ") plus this request (", format_bytes(size),
                ") exceed the capacity (", format_bytes(capacity_), ")");
  } else {
    fragmentation = true;
    cause = str("fragmentation: ", format_bytes(capacity_ - allocated),
                " of the capacity is not allocated, but no free block or room for a new ", format_bytes(seg),
                " segment is large enough");
  }
  std::string cap = capacity_ == kNoLimit ? std::string("none set") : format_bytes(capacity_);
  std::string msg =
      str(device_, " out of memory: tried to allocate ", format_bytes(nbytes), " (", nbytes, " bytes; ", size,
          " after rounding, from the ", small ? "small" : "large", " pool, stream ", stream, ")\n",
          "  capacity                 ", cap, "\n", "  allocated                ", format_bytes(allocated), "\n",
          "  reserved but unallocated ", format_bytes(cached), " (after freeing the cache and retrying)\n",
          "  largest free block       ", format_bytes(largest), "\n", "  fragmentation            ", frag_text,
          " (1 - largest free block / reserved but unallocated)\n", "  cause: ", cause, "\n",
          "  what would help: activation checkpointing (autograd checkpoint / checkpoint_sequential: recompute "
          "segments in backward instead of keeping their activations), mixed precision (amp autocast to f16/bf16), "
          "gradient accumulation (smaller micro-batches, same effective batch), a smaller batch",
          fragmentation ? "; for fragmentation also SNUG_ALLOC_CONF=max_split_size=... (keeps large cached blocks "
                          "whole) or memory::empty_cache()"
                        : "",
          capacity_ != kNoLimit && !backend_failed ? "; or raise the capacity (memory::set_capacity)" : "");
  // SNUG_ALLOC_CONF=oom_snapshot:PATH: the post-mortem, before anything unwinds.
  if (!settings_.oom_snapshot.empty()) {
    try {
      Snapshot snap;
      snap.devices.push_back(snapshot_locked());
      write_snapshot(snap, settings_.oom_snapshot);
      msg += str("\n  a snapshot with the history leading here: ", settings_.oom_snapshot,
                 " (tools/memory_timeline.py draws it)");
    } catch (const std::exception& e) {
      msg += str("\n  the snapshot for oom_snapshot could not be written: ", e.what());
    }
  }
  throw OutOfMemoryError(msg, nbytes, capacity_);
}

// ---- control -------------------------------------------------------------------

void CachingAllocator::empty_cache() {
  std::lock_guard<SpinLock> lock(mu_);
  process_events(/*wait=*/true);
  release_cached();
}

void CachingAllocator::set_capacity(std::size_t bytes) {
  std::lock_guard<SpinLock> lock(mu_);
  capacity_ = bytes;
  if (static_cast<std::size_t>(stats_.reserved_bytes.current) > bytes) release_cached();
}

void CachingAllocator::set_capacity_fraction(double f) {
  SNUG_CHECK(f > 0.0 && f <= 1.0, ValueError, "memory::set_capacity_fraction(", device_,
             "): fraction must be in (0, 1], got ", f);
  std::size_t total = backend_->total_memory();
  SNUG_CHECK(total > 0, ValueError, "memory::set_capacity_fraction(", device_, "): the ", backend_->name(),
             " backend does not know its total memory; use set_capacity(bytes)");
  set_capacity(static_cast<std::size_t>(std::floor(f * static_cast<double>(total))));
}

std::size_t CachingAllocator::capacity() const {
  std::lock_guard<SpinLock> lock(mu_);
  return capacity_;
}

std::size_t CachingAllocator::available() const {
  std::lock_guard<SpinLock> lock(mu_);
  if (capacity_ != kNoLimit) return capacity_;
  const std::size_t free_b = backend_->free_memory();
  if (free_b == 0) return kNoLimit;
  // The pool's own segments are already gone from the device's free memory.
  return free_b + static_cast<std::size_t>(stats_.reserved_bytes.current);
}

void CachingAllocator::set_settings(const AllocatorSettings& s) {
  s.validate();
  std::lock_guard<SpinLock> lock(mu_);
  // Best fit, first fit and size classes all keep blocks any of them can
  // take over; buddy's layout, the expanses and the arena are their own.
  auto plain = [](AllocPolicy p) {
    return p == AllocPolicy::best_fit || p == AllocPolicy::first_fit || p == AllocPolicy::size_class;
  };
  const bool other_layout = (s.policy != settings_.policy && !(plain(s.policy) && plain(settings_.policy))) ||
                            (s.policy == AllocPolicy::planned && s.planned_base != settings_.planned_base);
  if (other_layout) {
    process_events(/*wait=*/true);
    release_cached();
    SNUG_CHECK(segments_.empty() && !(arena_ && arena_->base()), ValueError, "memory::set_settings(", device_,
               "): the policy cannot change from ", policy_name(settings_.policy), " to ", policy_name(s.policy),
               " while the pool holds memory in use; set it (SNUG_ALLOC_CONF=policy=...) before the first allocation");
    SNUG_CHECK(!make_block_policy(s)->grows() || backend_->can_reserve(), ValueError, "memory::set_settings(",
               device_, "): policy=expandable needs address reservation, which the ", backend_->name(),
               " backend does not offer");
    expanses_.clear();
    if (arena_) {  // its counts (nothing live) stay in the device's totals
      settle_peaks();
      add_counts(stats_, arena_->counts());
    }
    arena_.reset();
    if (s.policy == AllocPolicy::planned) arena_ = std::make_unique<PlannedArena>();
  }
  settings_ = s;
  policy_ = make_block_policy(s);
  own_rounding_ = s.policy == AllocPolicy::size_class || s.policy == AllocPolicy::buddy;
  if (!s.oom_snapshot.empty() && !history_.enabled()) history_.enable(true, kOomHistory);
  // The policy decides the free sets' order: rebuild them.
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    FreeSet rebuilt(BlockLess{policy_->by_address()}, PoolAllocator<Block*>(&set_nodes_));
    for (Block* b : *pool) b->pool_it = rebuilt.insert(b).first;
    pool->swap(rebuilt);
  }
}

AllocatorSettings CachingAllocator::settings() const {
  std::lock_guard<SpinLock> lock(mu_);
  return settings_;
}

DeviceStats CachingAllocator::stats() const {
  std::lock_guard<SpinLock> lock(mu_);
  return merged();
}

void CachingAllocator::reset_peak() {
  std::lock_guard<SpinLock> lock(mu_);
  settle_peaks();
  // Each peak starts over at its current value (the arena's blocks included).
  const DeviceStats now = merged();
  auto restart = [](Stat& x, const Stat& cur) { x.peak = cur.current; };
  restart(stats_.allocated_bytes, now.allocated_bytes);
  restart(stats_.requested_bytes, now.requested_bytes);
  restart(stats_.active_bytes, now.active_bytes);
  restart(stats_.allocation, now.allocation);
  restart(stats_.active, now.active);
  for (Stat* s : {&stats_.inactive_split_bytes, &stats_.reserved_bytes, &stats_.inactive_split, &stats_.segment})
    s->reset_peak();
  need_peak_ = 0;
  if (arena_) note_need();
  for (int t = 0; t < kNumTags; ++t) {
    restart(stats_.tag_bytes[t], now.tag_bytes[t]);
    stats_.tag_at_peak[t] = now.tag_bytes[t].current;
  }
}

void CachingAllocator::record_history(bool enabled, std::size_t max_entries) {
  std::lock_guard<SpinLock> lock(mu_);
  history_.enable(enabled, max_entries);
}

void CachingAllocator::record(Action a, const Block* b, std::size_t requested) {
  if (!history_.enabled()) return;
  history_.record(a, trace_now_ns(), reinterpret_cast<std::uintptr_t>(b->ptr), b->size, requested, b->stream, b->tag,
                  b->op);
}

// ---- steps and the planned arena ----------------------------------------------------

// Gives the arena's memory back to the device (no arena block may be live).
void CachingAllocator::release_arena() {
  if (history_.enabled())
    history_.record(Action::segment_free, trace_now_ns(), reinterpret_cast<std::uintptr_t>(arena_->base()),
                    arena_->bytes(), 0, 0, Tag::other, "planned_arena");
  backend_->free(arena_->base(), arena_->bytes());
  stats_.reserved_bytes.sub(static_cast<int64_t>(arena_->bytes()));
  stats_.segment.sub(1);
  ++stats_.num_raw_frees;
  arena_->detach();
  release_held();
}

void CachingAllocator::mark_step() {
  std::lock_guard<SpinLock> lock(mu_);
  if (history_.enabled()) history_.record(Action::step, trace_now_ns(), 0, 0, 0, 0, Tag::other, nullptr);
  if (!arena_) return;
  arena_->count_step();
  switch (arena_->state()) {
    case PlannedArena::State::waiting: arena_->start_recording(); break;
    case PlannedArena::State::recording: plan_arena(); break;
    case PlannedArena::State::planned:
      // Given back (empty_cache): taken again.
      if (!arena_->base() && arena_->stats().arena_bytes > 0) attach_arena(arena_->stats().arena_bytes);
      if (held_.empty() && arena_->base()) make_held(/*adopt=*/false);
      arena_->next_step();
      if (arena_->other_step()) {  // the plan does not fit this workload: this step is recorded
        release_arena();
        arena_->replan();
      }
      break;
    case PlannedArena::State::gave_up: break;
  }
}

// The end of the recorded step: solve it, take the arena from the device,
// and give back the segments best fit no longer needs (the recorded step's
// blocks are all free now; from here on they live in the arena).
void CachingAllocator::plan_arena() {
  const auto t0 = std::chrono::steady_clock::now();
  release_held();
  const std::size_t bytes = arena_->plan();
  if (bytes > 0) {
    process_events(/*wait=*/true);
    release_cached();
    // Expandable segments: release_cached unmapped their free tails; the
    // recorded step's holes between blocks that stay (gradients, optimizer
    // state) go too, or they would sit mapped beside the arena.
    if (policy_->grows())
      for (auto& [key, e] : expanses_) unmap_free(e, nullptr);
  }
  attach_arena(bytes);
  make_held(/*adopt=*/true);
  arena_->count_plan_time(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

// NOTE [ Held blocks ]: the entries the arena does not place, the probation
// window's (which must not be the arena's: NOTE [ Planned arena ]) and those
// the recorded step did not free (gradients, freed in the next step), are each
// served by one block of the base policy that the plan keeps between uses: a
// planned step hands it out with no search, and its free makes it idle again
// (not pooled, not counted as allocated). A block the entry's recorded
// allocation still holds at the plan is adopted when it is freed, so a
// gradient is not kept twice; the others are taken now, so that the planned
// steps ask the device for nothing. Safety is the block's own: an entry whose
// block is still handed out falls back to the base policy. Idle held blocks
// are cache: empty_cache, a step of another kind and a new plan give them back.
void CachingAllocator::make_held(bool adopt) {
  const auto& plan = arena_->held_plan();
  // Built aside: taking a block may free the cache (release_held) on the way.
  std::vector<Held> made(2 * plan.size());  // an entry's first block at 2h, its second (made later) at 2h + 1
  try {
    for (std::size_t h = 0; h < plan.size(); ++h) {
      const std::size_t size = plan[h].size;
      if (adopt && plan[h].live_at != 0) {
        Block** found = live_.find(reinterpret_cast<void*>(plan[h].live_at));
        if (found && (*found)->held < 0 && (*found)->stream == 0 && (*found)->size >= size) {
          Block* b = *found;
          live_.erase(b->ptr);  // held blocks are found through held_at, not the live map
          b->held = static_cast<int32_t>(2 * h);  // busy until its owner frees it
          made[2 * h] = Held{b, true};
          continue;
        }
      }
      const bool small = size <= settings_.small_threshold;
      Block* b = find_free(small, size, 0);
      if (!b) b = alloc_slow(small, size, size, 0, Tag::other, nullptr);
      while (const std::size_t keep = policy_->split(*b, size)) split_block(b, keep);
      b->state = BlockState::allocated;  // (so no merge takes it; counted nowhere while idle)
      b->held = static_cast<int32_t>(2 * h);
      made[2 * h] = Held{b, false};
      add_outside(b->size);  // part of what the plan needs
      if (policy_->grows() && !map_block(b, false)) break;
    }
  } catch (const OutOfMemoryError&) {
    // No room now: those entries fall back to the base policy.
  }
  held_ = std::move(made);
  index_held();
}

bool CachingAllocator::release_idle_held() {
  bool any = false;
  for (Held& hd : held_)
    if (hd.b && !hd.busy) {
      Block* b = std::exchange(hd.b, nullptr);
      b->held = -1;
      outside_arena_ -= static_cast<int64_t>(b->size);
      b->requested = 0;
      b->tag = Tag::other;
      b->op = nullptr;
      b->state = BlockState::free;
      merge_and_pool(b);
      any = true;
    }
  if (any) index_held();
  return any;
}

// A handed-out held block becomes an ordinary live block.
void CachingAllocator::unhold(Held& hd) {
  Block* b = std::exchange(hd.b, nullptr);
  b->held = -1;
  live_.insert(b->ptr, b);
  index_held();
}

void CachingAllocator::index_held() {
  std::size_t n = 0;
  for (const Held& hd : held_) n += hd.b != nullptr;
  held_bits_ = 4;
  while ((std::size_t{1} << held_bits_) < 4 * n) ++held_bits_;
  held_table_.assign(std::size_t{1} << held_bits_, -1);
  const std::size_t mask = held_table_.size() - 1;
  for (std::size_t i = 0; i < held_.size(); ++i)
    if (held_[i].b) {
      std::size_t at = held_home(held_[i].b->ptr, held_bits_);
      while (held_table_[at] >= 0) at = (at + 1) & mask;
      held_table_[at] = static_cast<int32_t>(i);
    }
}

// Idle held blocks go back to the base policy; handed-out ones become
// ordinary blocks, pooled when freed.
void CachingAllocator::release_held() {
  release_idle_held();
  for (Held& hd : held_)
    if (hd.b) {  // handed out: ordinary from here
      hd.b->held = -1;
      live_.insert(hd.b->ptr, hd.b);
    }
  held_.clear();
  held_table_.clear();
}

Block* CachingAllocator::serve_held(int32_t h, std::size_t size, std::size_t nbytes, StreamId stream, Tag tag,
                                    const char* op) {
  Held* hd = find_idle_held(h, size, stream);
  if (!hd) return nullptr;
  hand_out_held(*hd, nbytes, tag, intern_op(op));
  if (history_.enabled()) record(Action::alloc, hd->b, nbytes);
  return hd->b;
}

// The arena's memory from the device. Without it (nothing to plan, or no
// memory for it) best fit serves every step, and each allocation of a
// planned step counts as a fallback.
void CachingAllocator::attach_arena(std::size_t bytes) {
  char* base = nullptr;
  if (bytes > 0 && fits_capacity(bytes)) base = static_cast<char*>(backend_->alloc(bytes));
  arena_->attach(base, base ? bytes : 0);
  if (!base) return;
  note_need();
  stats_.reserved_bytes.add(static_cast<int64_t>(bytes));
  stats_.segment.add(1);
  ++stats_.num_raw_allocs;
  if (history_.enabled())
    history_.record(Action::segment_alloc, trace_now_ns(), reinterpret_cast<std::uintptr_t>(base), bytes, 0, 0,
                    Tag::other, "planned_arena");
}

PlannedStats CachingAllocator::planned_stats() const {
  std::lock_guard<SpinLock> lock(mu_);
  if (!arena_) return {};
  PlannedStats s = arena_->stats();
  s.held_hits = held_hits_;
  s.planned_peak = static_cast<std::size_t>(need_peak_);
  return s;
}

DeviceSnapshot CachingAllocator::snapshot() const {
  std::lock_guard<SpinLock> lock(mu_);
  return snapshot_locked();
}

DeviceSnapshot CachingAllocator::snapshot_locked() const {
  DeviceSnapshot d;
  d.device = device_.str();
  d.backend = backend_->name();
  d.settings = settings_;
  d.capacity = capacity_;
  d.stats = merged();
  for (const auto& [addr, head] : segments_) {
    SegmentInfo seg;
    seg.address = addr;
    seg.stream = head->stream;
    seg.small_pool = head->small;
    for (const Block* b = head; b; b = b->next) {
      seg.size += b->size;
      if (idle_held(b))  // cache, as far as anyone outside can tell (NOTE [ Held blocks ])
        seg.blocks.push_back(BlockInfo{reinterpret_cast<std::uintptr_t>(b->ptr), b->size, 0, BlockState::free,
                                       Tag::other, ""});
      else
        seg.blocks.push_back(BlockInfo{reinterpret_cast<std::uintptr_t>(b->ptr), b->size, b->requested, b->state,
                                       b->tag, b->op ? b->op : ""});
    }
    d.segments.push_back(std::move(seg));
  }
  // The planned arena: one large segment, its live blocks and the gaps between.
  if (arena_ && arena_->base()) {
    SegmentInfo seg;
    seg.address = reinterpret_cast<std::uintptr_t>(arena_->base());
    seg.size = arena_->bytes();
    std::size_t at = 0;
    auto gap = [&](std::size_t to) {
      if (to > at) seg.blocks.push_back(BlockInfo{seg.address + at, to - at, 0, BlockState::free, Tag::other, ""});
    };
    for (const PlannedArena::Live& l : arena_->live_blocks()) {
      gap(l.offset);
      seg.blocks.push_back(BlockInfo{seg.address + l.offset, l.size, l.requested, BlockState::allocated, l.tag, ""});
      at = l.offset + l.size;
    }
    gap(seg.size);
    d.segments.push_back(std::move(seg));
  }
  d.events = history_.entries();
  return d;
}

bool CachingAllocator::owns(const void* p) const {
  std::lock_guard<SpinLock> lock(mu_);
  if (arena_ && arena_->contains(p)) {
    try {
      arena_->size_of(p);
      return true;
    } catch (const ValueError&) {
      return false;
    }
  }
  if (live_.find(const_cast<void*>(p)) != nullptr) return true;
  const Held* hd = held_at(p);
  return hd && hd->busy;
}

std::size_t CachingAllocator::block_size(void* p) const {
  std::lock_guard<SpinLock> lock(mu_);
  if (arena_ && arena_->contains(p)) return arena_->size_of(p);
  if (const Held* hd = held_at(p); hd && hd->busy) return hd->b->size;
  Block* const* found = live_.find(p);
  SNUG_CHECK(found != nullptr, ValueError, "memory::block_size: ", p, " is not a live allocation on ", device_);
  return (*found)->size;
}

void CachingAllocator::check_invariants() const {
  std::lock_guard<SpinLock> lock(mu_);
  auto fail = [&](const std::string& what) { throw Error(str("CachingAllocator(", device_, ") invariant: ", what)); };
  int64_t reserved = 0, allocated = 0, requested = 0, active = 0, n_alloc = 0, n_active = 0, split_bytes = 0,
          n_split = 0;
  std::size_t n_free = 0, n_live = 0, n_idle_held = 0;
  for (const auto& [addr, head] : segments_) {
    if (head->prev) fail("segment head has a prev block");
    if (reinterpret_cast<std::uintptr_t>(head->ptr) != addr) fail("segment map key differs from its head");
    for (const Block* b = head; b; b = b->next) {
      reserved += static_cast<int64_t>(b->size);
      if (b->size == 0) fail("empty block");
      if (reinterpret_cast<std::uintptr_t>(b->ptr) % 64 != 0) fail("block not 64-byte aligned");
      if (b->next && b->next->prev != b) fail("broken prev/next links");
      if (b->next && b->ptr + b->size != b->next->ptr) fail("blocks do not tile the segment");
      if (b->stream != head->stream || b->small != head->small) fail("block stream/pool differs from its segment");
      if (idle_held(b)) {  // counted nowhere (NOTE [ Held blocks ])
        if (live_.find(b->ptr)) fail("an idle held block is in the live map");
        ++n_idle_held;
      } else if (b->state == BlockState::free) {
        ++n_free;
        if (b->next && b->next->state == BlockState::free && policy_->may_merge(*b, *b->next))
          fail("two adjacent free blocks (missed coalesce)");
        if (!(b->small ? small_free_ : large_free_).count(const_cast<Block*>(b)))
          fail("free block missing from its pool");
        if (b->is_split()) {
          split_bytes += static_cast<int64_t>(b->size);
          ++n_split;
        }
      } else {
        active += static_cast<int64_t>(b->size);
        ++n_active;
        if (b->state == BlockState::allocated) {
          allocated += static_cast<int64_t>(b->size);
          requested += static_cast<int64_t>(b->requested);
          ++n_alloc;
          if (b->held >= 0) {  // a handed-out held block: found through held_at, not the live map
            if (held_at(b->ptr) != &held_[static_cast<std::size_t>(b->held)] || live_.find(b->ptr))
              fail("a held block is not where held_at finds it");
          } else {
            ++n_live;
            Block* const* it = live_.find(b->ptr);
            if (!it || *it != b) fail("allocated block missing from the live map");
          }
        }
      }
    }
  }
  if (arena_ && arena_->base()) {  // the arena: one more segment, its live blocks allocated
    reserved += static_cast<int64_t>(arena_->bytes());
    allocated += static_cast<int64_t>(arena_->live_bytes());
    active += static_cast<int64_t>(arena_->live_bytes());
    n_alloc += arena_->live_count();
    n_active += arena_->live_count();
    for (const PlannedArena::Live& l : arena_->live_blocks()) requested += static_cast<int64_t>(l.requested);
  }
  int64_t expandable_mapped = 0;
  for (const auto& [key, e] : expanses_) {
    std::size_t covered = 0;
    for (const Block* b = e.head; b; b = b->next) covered += b->size;
    if (covered != e.extent) fail("an expandable segment's blocks do not cover its extent");
    expandable_mapped += static_cast<int64_t>(std::count(e.mapped.begin(), e.mapped.end(), uint8_t{1}) *
                                              static_cast<std::ptrdiff_t>(settings_.map_granularity));
    const std::size_t g = settings_.map_granularity;
    for (const Block* b = e.head; b; b = b->next)
      if (b->state != BlockState::free)
        for (std::size_t i = static_cast<std::size_t>(b->ptr - e.base) / g;
             i <= (static_cast<std::size_t>(b->ptr - e.base) + b->size - 1) / g; ++i)
          if (!e.mapped[i]) fail("an allocated block of an expandable segment is not all mapped");
  }
  if (n_free != small_free_.size() + large_free_.size()) fail("pools hold blocks that are not in any segment");
  if (n_live != live_.size()) fail("live map holds blocks that are not in any segment");
  if (!policy_->grows()) {
    std::size_t idle = 0;
    for (const Held& hd : held_)
      if (hd.b && (hd.b->held < 0 || held_[static_cast<std::size_t>(hd.b->held)].b != hd.b))
        fail("a held block does not point back at its entry");
      else if (hd.b && !hd.busy)
        ++idle;
    if (idle != n_idle_held) fail("idle held blocks are not all in segments");
  }
  const DeviceStats s = merged();
  // Expandable: reserved is what is mapped, not the extent the blocks tile.
  if (policy_->grows()) reserved = expandable_mapped;
  if (s.reserved_bytes.current != reserved) fail(str("reserved_bytes ", s.reserved_bytes.current, " != ", reserved));
  if (s.allocated_bytes.current != allocated)
    fail(str("allocated_bytes ", s.allocated_bytes.current, " != ", allocated));
  if (s.requested_bytes.current != requested) fail("requested_bytes differs from the blocks");
  if (s.active_bytes.current != active) fail("active_bytes differs from the blocks");
  if (s.allocation.current != n_alloc || s.active.current != n_active) fail("allocation/active counts differ");
  if (s.inactive_split_bytes.current != split_bytes || s.inactive_split.current != n_split)
    fail("inactive_split differs from the blocks");
  if (s.segment.current != static_cast<int64_t>(segments_.size()) + (arena_ && arena_->base() ? 1 : 0))
    fail("segment count differs");
  int64_t tag_sum = 0;
  for (const Stat& t : s.tag_bytes) tag_sum += t.current;
  if (tag_sum != allocated) fail("per-tag bytes do not add up to allocated_bytes");
  for (const Stat* st : {&s.allocated_bytes, &s.requested_bytes, &s.active_bytes, &s.reserved_bytes})
    if (st->current != st->allocated - st->freed || st->peak < st->current) fail("a Stat's totals disagree");
}

}  // namespace snug::memory
