// SPDX-License-Identifier: MIT
// NodePool / PoolAllocator: keeps the nodes of a node-based std container
// (std::set, std::unordered_map) on a free list instead of returning them to
// malloc, so the allocator's cached path (split a block, pool the rest, merge
// it back) allocates nothing. A container and its pool are guarded by the
// same lock (the CachingAllocator's mutex).
#pragma once
#include <cstddef>
#include <new>

namespace snug::memory {

class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    while (head_) {
      Free* n = head_->next;
      ::operator delete(head_);
      head_ = n;
    }
  }
  void* get(std::size_t bytes) {
    if (bytes == node_size_ && head_) {
      Free* f = head_;
      head_ = f->next;
      return f;
    }
    return ::operator new(bytes);
  }
  void put(void* p, std::size_t bytes) {
    // The first single-node size seen is the one kept; any other size (bucket
    // arrays) goes straight back to the heap.
    if (node_size_ == 0 && bytes >= sizeof(Free)) node_size_ = bytes;
    if (bytes == node_size_) {
      head_ = new (p) Free{head_};
      return;
    }
    ::operator delete(p);
  }

 private:
  struct Free {
    Free* next;
  };
  Free* head_ = nullptr;
  std::size_t node_size_ = 0;
};

template <class T>
struct PoolAllocator {
  using value_type = T;
  NodePool* pool;

  explicit PoolAllocator(NodePool* p) : pool(p) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& o) : pool(o.pool) {}  // NOLINT: rebinding

  T* allocate(std::size_t n) { return static_cast<T*>(n == 1 ? pool->get(sizeof(T)) : ::operator new(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) {
    if (n == 1)
      pool->put(p, sizeof(T));
    else
      ::operator delete(p);
  }
  template <class U>
  bool operator==(const PoolAllocator<U>& o) const {
    return pool == o.pool;
  }
};

}  // namespace snug::memory
