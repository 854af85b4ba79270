// SPDX-License-Identifier: MIT
// Randomized property test: >= 1,000,000 allocate/free operations against a
// simple reference model (a map of live ranges). After every operation: no
// two live blocks overlap, every pointer is aligned, and the statistics
// agree with the model; every few thousand operations the allocator's full
// invariant walk runs. At the end everything is returned.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>

using namespace snug;
using namespace snug::memory;

namespace {

constexpr std::size_t MiB = 1024 * 1024;

struct Live {
  std::size_t size;       // rounded block size
  std::size_t requested;  // what was asked
  Tag tag;
};

std::size_t random_size(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 99);
  int k = kind(rng);
  if (k < 2) return 0;
  if (k < 60) return std::uniform_int_distribution<std::size_t>(1, 64 * 1024)(rng);           // small tensors
  if (k < 80) return std::uniform_int_distribution<std::size_t>(64 * 1024, MiB + 4096)(rng);  // around the threshold
  if (k < 95) return std::uniform_int_distribution<std::size_t>(MiB, 12 * MiB)(rng);  // large pool, shared segments
  return std::uniform_int_distribution<std::size_t>(10 * MiB, 80 * MiB)(rng);         // own segments
}

// Runs `ops` random operations; returns the number of OOMs seen.
int run(const AllocatorSettings& settings, std::size_t capacity, int ops, uint64_t seed) {
  CachingAllocator a(Device("cpu:50"), std::make_unique<SimulatedBackend>(std::size_t{1} << 40), settings);
  a.set_capacity(capacity);
  std::mt19937_64 rng(seed);
  std::map<std::uintptr_t, Live> live;  // by address
  std::vector<void*> order;             // for picking a random live block
  int64_t model_allocated = 0, model_requested = 0;
  int ooms = 0;

  auto free_at = [&](std::size_t i) {
    void* p = order[i];
    auto it = live.find(reinterpret_cast<std::uintptr_t>(p));
    REQUIRE(it != live.end());
    model_allocated -= static_cast<int64_t>(it->second.size);
    model_requested -= static_cast<int64_t>(it->second.requested);
    live.erase(it);
    order[i] = order.back();
    order.pop_back();
    a.deallocate(p);
  };

  for (int op = 0; op < ops; ++op) {
    // Drift between growing and shrinking phases so the pools see both.
    bool grow_phase = (op / 20000) % 2 == 0;
    int alloc_pct = grow_phase ? 60 : 40;
    bool do_alloc = order.empty() || std::uniform_int_distribution<int>(0, 99)(rng) < alloc_pct;
    if (do_alloc) {
      std::size_t n = random_size(rng);
      StreamId stream = std::uniform_int_distribution<int>(0, 9)(rng) == 0 ? 1 : 0;
      Tag tag = static_cast<Tag>(std::uniform_int_distribution<int>(0, kNumTags - 1)(rng));
      void* p = nullptr;
      try {
        p = a.allocate(n, stream, tag, "prop");
      } catch (const OutOfMemoryError&) {
        ++ooms;
        continue;
      }
      auto addr = reinterpret_cast<std::uintptr_t>(p);
      std::size_t size = a.block_size(p);
      REQUIRE(addr % 512 == 0);
      REQUIRE(size >= n);
      REQUIRE(size % settings.round == 0);
      // No overlap with the live neighbours on either side.
      auto next = live.lower_bound(addr);
      if (next != live.end()) REQUIRE(addr + size <= next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second.size <= addr);
      }
      live.emplace(addr, Live{size, n, tag});
      order.push_back(p);
      model_allocated += static_cast<int64_t>(size);
      model_requested += static_cast<int64_t>(n);
      if (std::uniform_int_distribution<int>(0, 49)(rng) == 0) a.record_stream(p, 3);
    } else {
      free_at(std::uniform_int_distribution<std::size_t>(0, order.size() - 1)(rng));
    }
    DeviceStats s = a.stats();
    REQUIRE(s.allocated_bytes.current == model_allocated);
    REQUIRE(s.requested_bytes.current == model_requested);
    REQUIRE(s.allocation.current == static_cast<int64_t>(live.size()));
    REQUIRE(s.allocated_bytes.current <= s.active_bytes.current);
    REQUIRE(s.active_bytes.current + s.inactive_split_bytes.current <= s.reserved_bytes.current);
    REQUIRE(static_cast<std::size_t>(s.reserved_bytes.current) <= capacity);
    if (op % 5000 == 0) a.check_invariants();
  }
  a.check_invariants();
  while (!order.empty()) free_at(order.size() - 1);
  a.empty_cache();
  a.check_invariants();
  DeviceStats s = a.stats();
  CHECK(s.allocated_bytes.current == 0);
  CHECK(s.active_bytes.current == 0);
  CHECK(s.reserved_bytes.current == 0);
  CHECK(s.num_raw_allocs == s.num_raw_frees);
  CHECK(s.allocated_bytes.allocated == s.allocated_bytes.freed);
  CHECK(static_cast<SimulatedBackend&>(a.backend()).in_use() == 0);
  return ooms;
}

}  // namespace

// Sanitizer builds (tsan, asan) run a tenth of the operations: they are ~50x
// slower, and the concurrency they look for is in test_allocator_threads.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 10;
#else
constexpr int kScale = 1;
#endif

TEST_CASE("property: 1,000,000 random operations keep every invariant") {
  AllocatorSettings best;
  AllocatorSettings first;
  first.fit = FitPolicy::first;
  AllocatorSettings split;
  split.max_split_size = 32 * MiB;
  AllocatorSettings coarse = parse_settings("round=4096,small_threshold=256K,small_segment=4M,large_segment=32M");

  // Unlimited: the pool grows as it likes.
  CHECK(run(best, kNoLimit, 300000 / kScale, 1) == 0);
  CHECK(run(first, kNoLimit, 200000 / kScale, 2) == 0);
  CHECK(run(coarse, kNoLimit, 150000 / kScale, 3) == 0);
  // Tight capacity: the OOM path (free the cache, retry, throw) runs often and
  // must leave everything consistent.
  int ooms = run(split, 1024 * MiB, 200000 / kScale, 4);
  ooms += run(best, 600 * MiB, 150000 / kScale, 5);
  MESSAGE("OOMs under capacity: ", ooms);
  CHECK(ooms > 0);
}
