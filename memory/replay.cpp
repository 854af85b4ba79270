// SPDX-License-Identifier: MIT
#include <snug/memory/replay.h>

#include <chrono>
#include <unordered_map>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>

namespace snug::memory {

ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings, std::size_t capacity,
                    bool snapshot_at_peak) {
  // The simulated device is as large as the capacity asks (or "infinite"), so
  // only the capacity decides whether a replayed allocation fits.
  const std::size_t total = capacity == kNoLimit ? std::size_t{1} << 46 : capacity;
  CachingAllocator a(Device(DeviceType::CUDA, 0), std::make_unique<SimulatedBackend>(total), settings);
  a.set_capacity(capacity);

  // Old address -> new pointer. Reserved up front so the map does not rehash
  // inside the timed loop more than it must.
  std::unordered_map<std::uintptr_t, void*> map;
  map.reserve(events.size() / 2 + 16);
  ReplayResult r;
  int64_t best_peak = -1;
  auto t0 = std::chrono::steady_clock::now();
  for (const TraceEntry& e : events) {
    if (e.action == Action::alloc) {
      void* p = nullptr;
      try {
        p = a.allocate(e.requested, e.stream, e.tag, nullptr);
      } catch (const OutOfMemoryError&) {
        ++r.num_ooms;
        continue;
      }
      ++r.ops;
      if (snapshot_at_peak) {
        DeviceStats st = a.stats();
        if (st.allocated_bytes.current >= best_peak) {
          best_peak = st.allocated_bytes.current;
          r.at_peak = a.snapshot();
        }
      }
      bool fresh = map.emplace(e.address, p).second;
      SNUG_CHECK(fresh, ValueError, "memory::replay: the trace allocates address ", e.address,
                 " twice without freeing it");
    } else if (e.action == Action::free) {
      auto it = map.find(e.address);
      if (it == map.end()) {  // allocated before recording began (or the alloc OOMed)
        ++r.skipped_frees;
        continue;
      }
      a.deallocate(it->second);
      map.erase(it);
      ++r.ops;
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  r.ns_per_op = r.ops ? std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(r.ops) : 0;
  for (auto& [old, p] : map) a.deallocate(p);
  r.stats = a.stats();
  r.peak_allocated_bytes = r.stats.allocated_bytes.peak;
  r.peak_reserved_bytes = r.stats.reserved_bytes.peak;
  r.raw_allocs = r.stats.num_raw_allocs;
  return r;
}

}  // namespace snug::memory
