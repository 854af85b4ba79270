// SPDX-License-Identifier: MIT
// PtrMap: pointer -> value, open addressing with linear probing. The live
// blocks of a CachingAllocator are looked up by address on every free, and
// std::unordered_map's modulo-prime buckets and per-node heap traffic cost
// more than the rest of the cached path. Not thread-safe (the allocator's
// lock guards it). Keys are never nullptr (nullptr marks an empty slot).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace snug::memory {

template <class V>
class PtrMap {
 public:
  PtrMap() { slots_.resize(64); }

  std::size_t size() const { return size_; }

  // Inserts (key must not be present).
  void insert(const void* key, V value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    std::size_t i = home(key);
    while (slots_[i].key) i = (i + 1) & mask();
    slots_[i] = Slot{key, value};
    ++size_;
  }

  // The value's address, or nullptr.
  V* find(const void* key) {
    for (std::size_t i = home(key);; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  const V* find(const void* key) const { return const_cast<PtrMap*>(this)->find(key); }

  // Removes key if present; returns whether it was.
  bool erase(const void* key) {
    std::size_t i = home(key);
    while (slots_[i].key != key) {
      if (!slots_[i].key) return false;
      i = (i + 1) & mask();
    }
    // Backward-shift deletion: pull later entries of the probe run into the
    // hole so lookups never need tombstones.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (!slots_[j].key) break;
      std::size_t h = home(slots_[j].key);
      // Move j into i unless j's home lies cyclically in (i, j].
      bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return true;
  }

  template <class F>
  void for_each(F f) const {
    for (const Slot& s : slots_)
      if (s.key) f(s.key, s.value);
  }

 private:
  struct Slot {
    const void* key = nullptr;
    V value{};
  };
  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t home(const void* key) const {
    // Blocks are >= 512-byte aligned: drop the zero bits, then mix (Fibonacci hashing).
    auto k = reinterpret_cast<std::uintptr_t>(key) >> 9;
    return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(old.size() * 2);
    size_ = 0;
    for (const Slot& s : old)
      if (s.key) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace snug::memory
