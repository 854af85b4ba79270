// SPDX-License-Identifier: MIT
#include <snug/memory/caching_allocator.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <snug/base/error.h>

namespace snug::memory {

struct CachingAllocator::Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;
  StreamId stream = 0;
  bool small = false;
  BlockState state = BlockState::free;
  Tag tag = Tag::other;
  const char* op = nullptr;
  int pending_events = 0;
  Block* prev = nullptr;  // neighbours in the same segment, by address
  Block* next = nullptr;
  std::vector<StreamId> stream_uses;  // other streams that use this block
  FreeSet::iterator pool_it;          // where it is in its pool, while free (erase without a search)

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (!by_address && a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<RawBackend> backend, AllocatorSettings settings)
    : device_(device),
      backend_(std::move(backend)),
      settings_(settings),
      small_free_(BlockLess{settings.fit == FitPolicy::first}, PoolAllocator<Block*>(&set_nodes_)),
      large_free_(BlockLess{settings.fit == FitPolicy::first}, PoolAllocator<Block*>(&set_nodes_)) {
  SNUG_CHECK(backend_ != nullptr, ValueError, "CachingAllocator(", device, "): backend is null");
  settings_.validate();
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block;
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  // Reset field by field: keeps stream_uses' (empty) storage, no temporaries.
  b->requested = 0;
  b->state = BlockState::free;
  b->tag = Tag::other;
  b->op = nullptr;
  b->pending_events = 0;
  b->prev = b->next = nullptr;
  return b;
}

void CachingAllocator::delete_block(Block* b) { spare_blocks_.push_back(b); }

const char* CachingAllocator::intern_op(const char* op) {
  if (!op) return nullptr;
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
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [e, b] : pending_) backend_->destroy_event(e);
  for (auto& [addr, head] : segments_) {
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

std::size_t CachingAllocator::round_size(std::size_t nbytes) const {
  std::size_t r = settings_.round;
  if (nbytes < r) return r;
  SNUG_CHECK(nbytes <= SIZE_MAX - r, ValueError, "memory::allocate: ", nbytes, " bytes is not a valid size");
  return (nbytes + r - 1) & ~(r - 1);
}

// NOTE [ Segment growth ]
// A fixed large_segment (20 MiB, PyTorch's kLargeBuffer) amortises backend
// calls, but its unused tail is up to 20 MiB whatever the model's size: 20%
// of a 100 MB working set. With large_growth = g > 0, a request below
// large_threshold gets a segment of (large-pool reserved bytes) / g, at least
// the request and at most large_segment, rounded up to large_round. The last
// segment's unused tail is then at most about 1/g of the pool; a big model
// reaches large_segment after 20 MiB * g of large-pool memory and behaves as
// before; the number of segments grows only logarithmically while small.
std::size_t CachingAllocator::segment_size(std::size_t size) const {
  const auto& s = settings_;
  auto up = [&](std::size_t v) { return (v + s.large_round - 1) / s.large_round * s.large_round; };
  if (size <= s.small_threshold) return s.small_segment;
  if (size >= s.large_threshold) return up(size);
  if (s.large_growth == 0) return s.large_segment;
  return std::min(s.large_segment, up(std::max(size, large_reserved_ / s.large_growth)));
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

// Takes a fitting free block of `stream` out of the pool, or returns nullptr.
CachingAllocator::Block* CachingAllocator::find_free(bool small, std::size_t size, StreamId stream) {
  FreeSet& pool = pool_of(small);
  const std::size_t max_split = settings_.max_split_size;
  // Oversize rules (as PyTorch's max_split_size): a normal request must not
  // take (and waste) an unsplittable oversize block, and an oversize request
  // takes only a block not much bigger than itself.
  auto acceptable = [&](const Block* b) {
    if (size < max_split && b->size >= max_split) return false;
    if (size >= max_split && b->size - size >= settings_.max_split_tolerance) return false;
    return true;
  };
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  Block* found = nullptr;
  if (settings_.fit == FitPolicy::best) {
    if (it != pool.end() && (*it)->stream == stream && acceptable(*it)) found = *it;
  } else {
    // Ordered by (stream, address): key.ptr is null, so `it` is this stream's lowest block.
    for (; it != pool.end() && (*it)->stream == stream; ++it)
      if ((*it)->size >= size && acceptable(*it)) {
        found = *it;
        break;
      }
  }
  if (found) pool_erase(found);
  return found;
}

bool CachingAllocator::should_split(const Block* b, std::size_t size) const {
  std::size_t remaining = b->size - size;
  if (b->small) return remaining >= settings_.round;
  return size < settings_.max_split_size && remaining > settings_.small_threshold;
}

// ---- segments -------------------------------------------------------------------

CachingAllocator::Block* CachingAllocator::new_segment(bool small, std::size_t seg, StreamId stream) {
  std::size_t reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  if (capacity_ != kNoLimit && (seg > capacity_ || reserved > capacity_ - seg)) return nullptr;
  void* p = backend_->alloc(seg);
  if (!p) return nullptr;
  Block* b = new_block();
  b->ptr = static_cast<char*>(p);
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

// Returns every segment that is one free block to the backend.
void CachingAllocator::release_cached() {
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

// The out-of-memory path: a new segment; then wait for blocks held back by
// other streams and look again; then free the cache and retry; then throw.
CachingAllocator::Block* CachingAllocator::alloc_slow(bool small, std::size_t size, std::size_t nbytes, StreamId stream,
                                                      Tag tag, const char* op) {
  const std::size_t seg = segment_size(size);
  if (Block* b = new_segment(small, seg, stream)) {
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
  if (Block* b = new_segment(small, seg, stream)) {
    ++stats_.num_cache_misses;
    return b;
  }
  // Tell a capacity refusal from the backend's own failure.
  std::size_t reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  bool over_capacity = capacity_ != kNoLimit && (seg > capacity_ || reserved > capacity_ - seg);
  throw_oom(small, size, nbytes, stream, tag, op, !over_capacity);
}

// ---- allocate / free --------------------------------------------------------------

void* CachingAllocator::allocate(std::size_t nbytes, StreamId stream, Tag tag, const char* op) {
  const std::size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) process_events(/*wait=*/false);
  const bool small = size <= settings_.small_threshold;
  Block* b = find_free(small, size, stream);
  if (b)
    ++stats_.num_cache_hits;
  else
    b = alloc_slow(small, size, nbytes, stream, tag, op);

  if (should_split(b, size)) {
    Block* rest = new_block();
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_insert(rest);
  }
  b->state = BlockState::allocated;
  b->requested = nbytes;
  b->tag = tag;
  b->op = intern_op(op);
  live_.insert(b->ptr, b);

  const auto bytes = static_cast<int64_t>(b->size);
  stats_.allocated_bytes.add(bytes);
  stats_.allocation.add(1);
  stats_.requested_bytes.add(static_cast<int64_t>(nbytes));
  stats_.active_bytes.add(bytes);
  stats_.active.add(1);
  stats_.tag_bytes[static_cast<int>(tag)].add(bytes);
  if (stats_.allocated_bytes.current == stats_.allocated_bytes.peak)
    for (int t = 0; t < kNumTags; ++t) stats_.tag_at_peak[t] = stats_.tag_bytes[t].current;
  if (history_.enabled()) record(Action::alloc, b, nbytes);
  return b->ptr;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  Block** found = live_.find(p);
  SNUG_CHECK(found != nullptr, ValueError, "memory::deallocate: ", p, " is not a live allocation on ", device_,
             " (freed twice, or allocated on another device)");
  Block* b = *found;
  live_.erase(p);
  const auto bytes = static_cast<int64_t>(b->size);
  stats_.allocated_bytes.sub(bytes);
  stats_.allocation.sub(1);
  stats_.requested_bytes.sub(static_cast<int64_t>(b->requested));
  stats_.tag_bytes[static_cast<int>(b->tag)].sub(bytes);
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
  stats_.active_bytes.sub(static_cast<int64_t>(b->size));
  stats_.active.sub(1);
  b->state = BlockState::free;
  b->requested = 0;
  b->tag = Tag::other;
  b->op = nullptr;
  // Merges keep the lower block, so a segment's first Block never changes.
  if (Block* p = b->prev; p && p->state == BlockState::free) {
    pool_erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete_block(b);
    b = p;
  }
  if (Block* n = b->next; n && n->state == BlockState::free) {
    pool_erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete_block(n);
  }
  pool_insert(b);
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Block** found = live_.find(p);
  SNUG_CHECK(found != nullptr, ValueError, "memory::record_stream: ", p, " is not a live allocation on ", device_);
  Block* b = *found;
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
  if (history_.enabled()) history_.record(Action::oom, trace_now_ns(), 0, size, nbytes, stream, tag, intern_op(op));
  const std::size_t seg = segment_size(size);
  const auto allocated = static_cast<std::size_t>(stats_.allocated_bytes.current);
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
  throw OutOfMemoryError(msg, nbytes, capacity_);
}

// ---- control -------------------------------------------------------------------

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_events(/*wait=*/true);
  release_cached();
}

void CachingAllocator::set_capacity(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

std::size_t CachingAllocator::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ != kNoLimit) return capacity_;
  const std::size_t free_b = backend_->free_memory();
  if (free_b == 0) return kNoLimit;
  // The pool's own segments are already gone from the device's free memory.
  return free_b + static_cast<std::size_t>(stats_.reserved_bytes.current);
}

void CachingAllocator::set_settings(const AllocatorSettings& s) {
  s.validate();
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = s;
  // The fit policy decides the free sets' order: rebuild them.
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    FreeSet rebuilt(BlockLess{s.fit == FitPolicy::first}, PoolAllocator<Block*>(&set_nodes_));
    for (Block* b : *pool) b->pool_it = rebuilt.insert(b).first;
    pool->swap(rebuilt);
  }
}

AllocatorSettings CachingAllocator::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

DeviceStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceStats s = stats_;
  s.capacity = capacity_;
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.active_bytes, &stats_.inactive_split_bytes,
                  &stats_.reserved_bytes, &stats_.allocation, &stats_.active, &stats_.inactive_split, &stats_.segment})
    s->reset_peak();
  for (int t = 0; t < kNumTags; ++t) {
    stats_.tag_bytes[t].reset_peak();
    stats_.tag_at_peak[t] = stats_.tag_bytes[t].current;
  }
}

void CachingAllocator::record_history(bool enabled, std::size_t max_entries) {
  std::lock_guard<std::mutex> lock(mu_);
  history_.enable(enabled, max_entries);
}

void CachingAllocator::record(Action a, const Block* b, std::size_t requested) {
  if (!history_.enabled()) return;
  history_.record(a, trace_now_ns(), reinterpret_cast<std::uintptr_t>(b->ptr), b->size, requested, b->stream, b->tag,
                  b->op);
}

DeviceSnapshot CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceSnapshot d;
  d.device = device_.str();
  d.backend = backend_->name();
  d.settings = settings_;
  d.capacity = capacity_;
  d.stats = stats_;
  d.stats.capacity = capacity_;
  for (const auto& [addr, head] : segments_) {
    SegmentInfo seg;
    seg.address = addr;
    seg.stream = head->stream;
    seg.small_pool = head->small;
    for (const Block* b = head; b; b = b->next) {
      seg.size += b->size;
      seg.blocks.push_back(BlockInfo{reinterpret_cast<std::uintptr_t>(b->ptr), b->size, b->requested, b->state, b->tag,
                                     b->op ? b->op : ""});
    }
    d.segments.push_back(std::move(seg));
  }
  d.events = history_.entries();
  return d;
}

bool CachingAllocator::owns(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.find(const_cast<void*>(p)) != nullptr;
}

std::size_t CachingAllocator::block_size(void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  Block* const* found = live_.find(p);
  SNUG_CHECK(found != nullptr, ValueError, "memory::block_size: ", p, " is not a live allocation on ", device_);
  return (*found)->size;
}

void CachingAllocator::check_invariants() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto fail = [&](const std::string& what) { throw Error(str("CachingAllocator(", device_, ") invariant: ", what)); };
  int64_t reserved = 0, allocated = 0, requested = 0, active = 0, n_alloc = 0, n_active = 0, split_bytes = 0,
          n_split = 0;
  std::size_t n_free = 0, n_live = 0;
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
      if (b->state == BlockState::free) {
        ++n_free;
        if (b->next && b->next->state == BlockState::free) fail("two adjacent free blocks (missed coalesce)");
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
          ++n_live;
          allocated += static_cast<int64_t>(b->size);
          requested += static_cast<int64_t>(b->requested);
          ++n_alloc;
          Block* const* it = live_.find(b->ptr);
          if (!it || *it != b) fail("allocated block missing from the live map");
        }
      }
    }
  }
  if (n_free != small_free_.size() + large_free_.size()) fail("pools hold blocks that are not in any segment");
  if (n_live != live_.size()) fail("live map holds blocks that are not in any segment");
  const DeviceStats& s = stats_;
  if (s.reserved_bytes.current != reserved) fail(str("reserved_bytes ", s.reserved_bytes.current, " != ", reserved));
  if (s.allocated_bytes.current != allocated)
    fail(str("allocated_bytes ", s.allocated_bytes.current, " != ", allocated));
  if (s.requested_bytes.current != requested) fail("requested_bytes differs from the blocks");
  if (s.active_bytes.current != active) fail("active_bytes differs from the blocks");
  if (s.allocation.current != n_alloc || s.active.current != n_active) fail("allocation/active counts differ");
  if (s.inactive_split_bytes.current != split_bytes || s.inactive_split.current != n_split)
    fail("inactive_split differs from the blocks");
  if (s.segment.current != static_cast<int64_t>(segments_.size())) fail("segment count differs");
  int64_t tag_sum = 0;
  for (const Stat& t : s.tag_bytes) tag_sum += t.current;
  if (tag_sum != allocated) fail("per-tag bytes do not add up to allocated_bytes");
  for (const Stat* st : {&s.allocated_bytes, &s.requested_bytes, &s.active_bytes, &s.reserved_bytes})
    if (st->current != st->allocated - st->freed || st->peak < st->current) fail("a Stat's totals disagree");
}

}  // namespace snug::memory
