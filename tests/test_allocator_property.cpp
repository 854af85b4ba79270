// SPDX-License-Identifier: MIT
// Randomized property test: >= 1,000,000 allocate/free operations against a
// simple reference model (a map of live ranges), for every allocation policy
// (memory/alloc_policy.h). After every operation: no two live blocks
// overlap, every pointer is aligned, and the statistics agree with the
// model; every few thousand operations the allocator's full invariant walk
// runs. At the end everything is returned. The planned arena also runs
// repeated "training steps" with random deviations, so that its plan is
// followed, skipped, outlived and broken.
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <random>
#include <vector>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/planned_arena.h>

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

// Runs `ops` random operations; returns the number of OOMs seen. With
// step_every > 0 a step begins every that many operations (the planned
// policy plans from the first).
int run(const AllocatorSettings& settings, std::size_t capacity, int ops, uint64_t seed, int step_every = 0) {
  CachingAllocator a(Device("cpu:50"), std::make_unique<SimulatedBackend>(std::size_t{1} << 40), settings);
  a.set_capacity(capacity);
  std::mt19937_64 rng(seed);
  std::map<std::uintptr_t, Live> live;  // by address
  std::vector<void*> order;             // for picking a random live block
  int64_t model_allocated = 0, model_requested = 0;
  // Peaks as an update on every allocation gives them (the allocator defers
  // them: NOTE [ Deferred peaks ]), and the tag breakdown at the peak.
  int64_t peak_allocated = 0, peak_requested = 0, peak_count = 0;
  std::array<int64_t, kNumTags> model_tag{}, model_tag_at_peak{};
  int ooms = 0;

  auto free_at = [&](std::size_t i) {
    void* p = order[i];
    auto it = live.find(reinterpret_cast<std::uintptr_t>(p));
    REQUIRE(it != live.end());
    model_allocated -= static_cast<int64_t>(it->second.size);
    model_requested -= static_cast<int64_t>(it->second.requested);
    model_tag[static_cast<int>(it->second.tag)] -= static_cast<int64_t>(it->second.size);
    live.erase(it);
    order[i] = order.back();
    order.pop_back();
    a.deallocate(p);
  };

  const bool expandable = settings.policy == AllocPolicy::expandable;
  for (int op = 0; op < ops; ++op) {
    if (step_every > 0 && op % step_every == 0) a.mark_step();
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
      model_tag[static_cast<int>(tag)] += static_cast<int64_t>(size);
      if (model_allocated >= peak_allocated) model_tag_at_peak = model_tag;
      peak_allocated = std::max(peak_allocated, model_allocated);
      peak_requested = std::max(peak_requested, model_requested);
      peak_count = std::max(peak_count, static_cast<int64_t>(live.size()));
      if (std::uniform_int_distribution<int>(0, 49)(rng) == 0) a.record_stream(p, 3);
    } else {
      free_at(std::uniform_int_distribution<std::size_t>(0, order.size() - 1)(rng));
    }
    DeviceStats s = a.stats();
    REQUIRE(s.allocated_bytes.current == model_allocated);
    REQUIRE(s.requested_bytes.current == model_requested);
    REQUIRE(s.allocation.current == static_cast<int64_t>(live.size()));
    REQUIRE(s.allocated_bytes.peak == peak_allocated);
    REQUIRE(s.requested_bytes.peak == peak_requested);
    REQUIRE(s.allocation.peak == peak_count);
    REQUIRE(s.tag_at_peak == model_tag_at_peak);
    REQUIRE(s.allocated_bytes.current <= s.active_bytes.current);
    // (Expandable: free blocks may lie on unmapped granules, so only the active ones count.)
    REQUIRE(s.active_bytes.current + (expandable ? 0 : s.inactive_split_bytes.current) <= s.reserved_bytes.current);
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
  if (!expandable) CHECK(s.num_raw_allocs == s.num_raw_frees);  // expandable maps and unmaps in other runs
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
  first.policy = AllocPolicy::first_fit;
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

TEST_CASE("property: 1,000,000 random operations for each of the other policies") {
  AllocatorSettings size_class = parse_settings("policy=size_class");
  AllocatorSettings buddy = parse_settings("policy=buddy");
  AllocatorSettings expandable = parse_settings("policy=expandable");
  AllocatorSettings planned = parse_settings("policy=planned");
  for (const AllocatorSettings& s : {size_class, buddy, expandable, planned}) {
    const std::string name = policy_name(s.policy);
    CAPTURE(name);
    // Random steps: under planned the first is recorded and the rest mostly
    // fall back (their sizes differ), with some hits by chance.
    CHECK(run(s, kNoLimit, 700000 / kScale, 11, s.policy == AllocPolicy::planned ? 5000 : 0) == 0);
    const int ooms = run(s, 900 * MiB, 300000 / kScale, 12, s.policy == AllocPolicy::planned ? 3000 : 0);
    MESSAGE(name, ": OOMs under capacity: ", ooms);
  }
}

namespace {

// One recorded "training step" replayed again and again, with deviations a
// real loop has: an extra allocation, a skipped one, a free that comes late
// (or only in the next step), a step of another size. The arena must never
// hand out bytes that are live, whatever happens.
struct StepOp {
  bool alloc;
  int id;  // which block
  std::size_t size;
};

std::vector<StepOp> make_step(std::mt19937_64& rng, int blocks) {
  std::vector<StepOp> ops;
  std::vector<int> live;
  for (int id = 0; id < blocks; ++id) {
    ops.push_back({true, id, random_size(rng) % (24 * MiB)});
    live.push_back(id);
    while (!live.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
      std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      ops.push_back({false, live[i], 0});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (int id : live) ops.push_back({false, id, 0});
  return ops;
}

}  // namespace

TEST_CASE("property: the planned arena over 1,000,000 operations of deviating steps") {
  CachingAllocator a(Device("cpu:51"), std::make_unique<SimulatedBackend>(std::size_t{1} << 40),
                     parse_settings("policy=planned"));
  std::mt19937_64 rng(21);
  const std::vector<StepOp> base = make_step(rng, 400);
  std::map<std::uintptr_t, std::size_t> live;  // address -> size, every live block
  int64_t live_bytes = 0, peak_bytes = 0;       // the peak an update on every allocation gives
  auto add = [&](void* p) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    const std::size_t size = a.block_size(p);
    auto next = live.lower_bound(addr);
    if (next != live.end()) REQUIRE(addr + size <= next->first);
    if (next != live.begin()) REQUIRE(std::prev(next)->first + std::prev(next)->second <= addr);
    live.emplace(addr, size);
    live_bytes += static_cast<int64_t>(size);
    peak_bytes = std::max(peak_bytes, live_bytes);
  };
  auto drop = [&](void* p) {
    live_bytes -= static_cast<int64_t>(live.at(reinterpret_cast<std::uintptr_t>(p)));
    live.erase(reinterpret_cast<std::uintptr_t>(p));
    a.deallocate(p);
  };
  std::vector<void*> late;  // frees put off to the next step
  int64_t ops = 0;
  for (int step = 0; ops < 1000000 / kScale; ++step) {
    a.mark_step();
    for (void* p : late) drop(p);
    late.clear();
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);  // 0-5 as recorded, 6-9 deviating
    const std::size_t scale = kind == 9 ? 2 : 1;
    std::vector<void*> ptr(base.size(), nullptr);
    for (const StepOp& op : base) {
      ++ops;
      if (op.alloc) {
        if (kind == 6 && std::uniform_int_distribution<int>(0, 30)(rng) == 0) continue;  // skipped
        if (kind == 7 && std::uniform_int_distribution<int>(0, 30)(rng) == 0) {      // an extra one
          void* extra = a.allocate(random_size(rng) % (8 * MiB));
          add(extra);
          late.push_back(extra);
        }
        ptr[static_cast<std::size_t>(op.id)] = a.allocate(op.size * scale);
        add(ptr[static_cast<std::size_t>(op.id)]);
      } else if (void* p = ptr[static_cast<std::size_t>(op.id)]) {
        if (kind == 8 && std::uniform_int_distribution<int>(0, 20)(rng) == 0)
          late.push_back(p);  // outlives its step
        else
          drop(p);
      }
    }
    if (step % 50 == 0) a.check_invariants();
    const DeviceStats st = a.stats();
    REQUIRE(st.allocated_bytes.current == live_bytes);
    REQUIRE(st.allocated_bytes.peak == peak_bytes);
    if (step % 97 == 0) {  // a new peak from here: arena blocks included in the current value
      a.reset_peak();
      peak_bytes = live_bytes;
      REQUIRE(a.stats().allocated_bytes.peak == live_bytes);
    }
  }
  for (void* p : late) drop(p);
  a.check_invariants();
  const PlannedStats s = a.planned_stats();
  MESSAGE("planned: ", s.hits, " hits, ", s.held_hits, " held hits, ", s.fallbacks, " fallbacks, ", s.suspended_steps,
          " suspended steps");
  CHECK(s.hits > 0);
  CHECK(s.held_hits > 0);
  CHECK(s.fallbacks > 0);
  CHECK(s.suspended_steps > 0);
  CHECK(a.stats().allocated_bytes.current == 0);
}
