// SPDX-License-Identifier: MIT
#include <snug/memory/pinned.h>

#include <atomic>
#include <mutex>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>

namespace snug::memory {

namespace {
std::mutex g_mu;
std::function<std::unique_ptr<RawBackend>()> g_make;  // guarded by g_mu
// Created on first use and never destroyed (NOTE [ Allocator registry
// lifetime ] in memory/allocator.cpp): frees after main returns still work.
std::atomic<CachingAllocator*> g_pool{nullptr};

CachingAllocator& pool(const char* what) {
  if (CachingAllocator* a = g_pool.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(g_mu);
  if (CachingAllocator* a = g_pool.load(std::memory_order_relaxed)) return *a;
  SNUG_CHECK(g_make != nullptr, DeviceError, "memory::", what,
             ": no pinned host memory: the CUDA plugin provides it once it has found a GPU");
  auto* a = new CachingAllocator(Device(DeviceType::CPU, 0), g_make());
  g_pool.store(a, std::memory_order_release);
  return *a;
}
}  // namespace

void register_pinned_backend(std::function<std::unique_ptr<RawBackend>()> make) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_make) g_make = std::move(make);
}

bool pinned_available() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_make != nullptr;
}

void* pinned_allocate(std::size_t nbytes) { return pool("pinned_allocate").allocate(nbytes, 0, Tag::data, "pinned"); }
void pinned_free(void* p) {
  if (p) pool("pinned_free").deallocate(p);
}
void pinned_record_stream(void* p, StreamId stream) { pool("pinned_record_stream").record_stream(p, stream); }
bool is_pinned(const void* p) {
  const CachingAllocator* a = g_pool.load(std::memory_order_acquire);
  return a != nullptr && p != nullptr && a->owns(p);
}

}  // namespace snug::memory
