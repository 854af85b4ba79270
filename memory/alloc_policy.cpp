// SPDX-License-Identifier: MIT
#include <snug/memory/alloc_policy.h>

#include <algorithm>
#include <bit>

#include <snug/base/error.h>

namespace snug::memory {

// ---- best fit: the defaults ------------------------------------------------------

// Oversize rules (as PyTorch's max_split_size): a normal request must not take
// (and waste) an unsplittable oversize block, and an oversize request takes
// only a block not much bigger than itself.
bool BlockPolicy::acceptable(const Block& b, std::size_t size) const {
  if (size < s_.max_split_size && b.size >= s_.max_split_size) return false;
  if (size >= s_.max_split_size && b.size - size >= s_.max_split_tolerance) return false;
  return true;
}

Block* BlockPolicy::find(const FreeSet& pool, std::size_t size, StreamId stream) const {
  Block key;
  key.stream = stream;
  key.size = size;
  // Ordered by (stream, size, address): the first block not below the key is
  // the smallest that fits.
  auto it = pool.lower_bound(&key);
  if (it != pool.end() && (*it)->stream == stream && acceptable(**it, size)) return *it;
  return nullptr;
}

std::size_t BlockPolicy::split(const Block& b, std::size_t size) const {
  const std::size_t rest = b.size - size;
  if (b.small) return rest >= s_.round ? size : 0;
  return size < s_.max_split_size && rest > s_.small_threshold ? size : 0;
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
std::size_t BlockPolicy::segment_size(std::size_t size, bool small, std::size_t large_reserved) const {
  auto up = [&](std::size_t v) { return (v + s_.large_round - 1) / s_.large_round * s_.large_round; };
  if (small) return s_.small_segment;
  if (size >= s_.large_threshold) return up(size);
  if (s_.large_growth == 0) return s_.large_segment;
  return std::min(s_.large_segment, up(std::max(size, large_reserved / s_.large_growth)));
}

namespace {

class BestFit final : public BlockPolicy {
 public:
  using BlockPolicy::BlockPolicy;
  const char* name() const override { return "best_fit"; }
};

// ---- first fit -------------------------------------------------------------------

class FirstFit final : public BlockPolicy {
 public:
  using BlockPolicy::BlockPolicy;
  const char* name() const override { return "first_fit"; }
  bool by_address() const override { return true; }
  Block* find(const FreeSet& pool, std::size_t size, StreamId stream) const override {
    Block key;
    key.stream = stream;
    // Ordered by (stream, address): key.ptr is null, so this is the stream's lowest block.
    for (auto it = pool.lower_bound(&key); it != pool.end() && (*it)->stream == stream; ++it)
      if ((*it)->size >= size && acceptable(**it, size)) return *it;
    return nullptr;
  }
};

// ---- size classes ----------------------------------------------------------------

class SizeClass final : public BlockPolicy {
 public:
  using BlockPolicy::BlockPolicy;
  const char* name() const override { return "size_class"; }
  // 2^k < n <= 2^(k+1) rounds up to a multiple of 2^k / size_classes (never
  // finer than round): with 4 classes, 1.25, 1.5, 1.75 and 2 x 2^k. At most
  // 1/size_classes of a block is rounding.
  std::size_t block_size(std::size_t n) const override {
    if (n <= s_.round) return s_.round;
    const std::size_t low = std::bit_floor(n - 1);  // 2^k < n
    const std::size_t step = std::max(s_.round, low / s_.size_classes);
    return (n + step - 1) / step * step;
  }
};

// ---- buddy -----------------------------------------------------------------------

class Buddy final : public BlockPolicy {
 public:
  using BlockPolicy::BlockPolicy;
  const char* name() const override { return "buddy"; }
  std::size_t block_size(std::size_t n) const override { return std::bit_ceil(std::max(n, s_.round)); }
  // Any free block at least as big: all are powers of two, so best fit finds
  // the smallest, and halving it reaches the request exactly.
  Block* find(const FreeSet& pool, std::size_t size, StreamId stream) const override {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    return it != pool.end() && (*it)->stream == stream ? *it : nullptr;
  }
  std::size_t split(const Block& b, std::size_t size) const override { return b.size / 2 >= size ? b.size / 2 : 0; }
  // Buddies: the same size, and the lower one at an even multiple of it.
  bool may_merge(const Block& lo, const Block& hi) const override {
    return lo.size == hi.size && static_cast<std::size_t>(lo.ptr - lo.segment) % (2 * lo.size) == 0;
  }
  std::size_t segment_size(std::size_t size, bool small, std::size_t) const override {
    if (small) return std::bit_ceil(s_.small_segment);
    return std::max(size, std::bit_ceil(s_.large_segment));
  }
};

// ---- expandable ------------------------------------------------------------------

class Expandable final : public BlockPolicy {
 public:
  using BlockPolicy::BlockPolicy;
  const char* name() const override { return "expandable"; }
  bool grows() const override { return true; }
  // Inside one segment any remainder is worth keeping: there is no other
  // segment for the next request to go to.
  std::size_t split(const Block& b, std::size_t size) const override {
    return b.size - size >= s_.round ? size : 0;
  }
  // The front end grows by whole granules; no other segment size applies.
  std::size_t segment_size(std::size_t size, bool, std::size_t) const override {
    const std::size_t g = s_.map_granularity;
    return (size + g - 1) / g * g;
  }
};

}  // namespace

std::unique_ptr<BlockPolicy> make_block_policy(const AllocatorSettings& s) {
  switch (s.policy) {
    case AllocPolicy::first_fit: return std::make_unique<FirstFit>(s);
    case AllocPolicy::size_class: return std::make_unique<SizeClass>(s);
    case AllocPolicy::buddy: return std::make_unique<Buddy>(s);
    case AllocPolicy::expandable: return std::make_unique<Expandable>(s);
    case AllocPolicy::planned:
      return s.planned_base == AllocPolicy::expandable ? std::unique_ptr<BlockPolicy>(std::make_unique<Expandable>(s))
                                                       : std::make_unique<BestFit>(s);
    case AllocPolicy::best_fit: return std::make_unique<BestFit>(s);
  }
  throw ValueError("make_block_policy: unknown policy");
}

}  // namespace snug::memory
