// SPDX-License-Identifier: MIT
// PlannedArena's solver (memory/planned_arena.h, NOTE [ Planned arena ]) on
// its own: random tapes recorded through its interface, planned, and replayed
// step by step; the offsets the replay hands out against a plain statement of
// the greedy rule (largest first, each at the lowest offset clear of every
// placed block whose lifetime overlaps its own), and no two blocks live at
// once sharing a byte.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <snug/memory/planned_arena.h>

using namespace snug::memory;

namespace {

struct Event {
  bool alloc;
  std::size_t block;  // index into the tape's blocks
};

struct Tape {
  std::vector<std::size_t> size;  // per block, multiples of 512
  std::vector<Event> events;      // every block allocated, most freed within the step
};

// n blocks with random sizes (a few repeated sizes, as a tape has), each
// freed after a random number of later events; a few never freed (kept).
Tape random_tape(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Tape t;
  std::vector<std::size_t> live;
  for (std::size_t b = 0; b < n; ++b) {
    const std::size_t kinds[] = {512, 1024, 4096, 65536, 1 << 20};
    t.size.push_back(rng() % 3 == 0 ? kinds[rng() % 5] : 512 * (1 + rng() % 300));
    t.events.push_back({true, b});
    live.push_back(b);
    while (!live.empty() && rng() % 100 < 45) {  // free a random live block
      const std::size_t i = rng() % live.size();
      if (rng() % 50 == 0) {  // kept past the step: never freed
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      t.events.push_back({false, live[i]});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (std::size_t b : live) t.events.push_back({false, b});
  return t;
}

// The greedy rule stated plainly, over the blocks `in` (alloc and free times
// from the event order): for each block by size, largest first (ties: earlier
// first), collect the placed blocks live at the same time, sort them by
// offset, take the lowest gap that fits.
std::vector<std::size_t> reference_offsets(const Tape& t, const std::vector<bool>& in, std::size_t* arena) {
  const std::size_t n = t.size.size();
  std::vector<int64_t> t0(n, -1), t1(n, -1);
  for (std::size_t e = 0; e < t.events.size(); ++e)
    (t.events[e].alloc ? t0 : t1)[t.events[e].block] = static_cast<int64_t>(e);
  std::vector<std::size_t> order;
  for (std::size_t b = 0; b < n; ++b)
    if (in[b]) order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t.size[a] > t.size[b]; });
  std::vector<std::size_t> off(n, 0), placed;
  *arena = 0;
  for (std::size_t s : order) {
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (std::size_t q : placed)
      if (t0[q] < t1[s] && t0[s] < t1[q]) busy.emplace_back(off[q], off[q] + t.size[q]);
    std::sort(busy.begin(), busy.end());
    std::size_t o = 0;
    for (auto [lo, hi] : busy) {
      if (lo >= o + t.size[s]) break;
      o = std::max(o, hi);
    }
    off[s] = o;
    *arena = std::max(*arena, o + t.size[s]);
    placed.push_back(s);
  }
  return off;
}

}  // namespace

TEST_CASE("planned arena: the solver places each block where the plain greedy rule does, never overlapping") {
  for (uint32_t seed : {1u, 2u, 3u, 4u})
    for (std::size_t n : {std::size_t{1}, std::size_t{9}, std::size_t{40}, std::size_t{700}}) {
      CAPTURE(seed);
      CAPTURE(n);
      const Tape t = random_tape(n, seed);
      // Fake addresses for the recorded step: distinct, 512-aligned.
      auto addr = [](std::size_t b) { return reinterpret_cast<const void*>(std::uintptr_t{1} << 40 | (b + 1) << 20); };
      PlannedArena a;
      a.start_recording();
      for (const Event& e : t.events) {
        if (e.alloc)
          a.record_alloc(addr(e.block), t.size[e.block]);
        else
          a.record_free(addr(e.block));
      }
      const std::size_t bytes = a.plan();
      std::vector<char> memory(bytes + 1);
      a.attach(memory.data(), bytes);
      a.next_step();

      // The same step again: the blocks the arena serves (all but the
      // probation window and the kept ones) come back at their offsets.
      std::vector<bool> in(t.size.size(), false), freed(t.size.size(), false);
      for (const Event& e : t.events)
        if (!e.alloc) freed[e.block] = true;
      std::vector<char*> got(t.size.size(), nullptr);
      for (const Event& e : t.events) {
        if (e.alloc) {
          got[e.block] = a.take(t.size[e.block], t.size[e.block], Tag::activation);
          (void)a.take_held_request();
          in[e.block] = got[e.block] != nullptr;
          if (!got[e.block]) continue;
          REQUIRE(freed[e.block]);  // kept blocks are never given a slot
          // No live arena block shares a byte with it.
          for (std::size_t q = 0; q < got.size(); ++q)
            if (q != e.block && got[q])
              REQUIRE((got[q] + t.size[q] <= got[e.block] || got[e.block] + t.size[e.block] <= got[q]));
        } else if (got[e.block]) {
          std::size_t requested = 0;
          Tag tag = Tag::other;
          REQUIRE(a.give_back(got[e.block], &requested, &tag) == t.size[e.block]);
          got[e.block] = nullptr;
        }
      }
      CHECK(a.stats().fallbacks == 0);
      std::size_t arena = 0;
      const std::vector<std::size_t> want = reference_offsets(t, in, &arena);
      CHECK(bytes == arena);
      // Every served block at the reference's offset (recorded again: the
      // replay above freed them, so take them once more in a fresh step).
      a.next_step();
      std::size_t served = 0;
      for (const Event& e : t.events) {
        if (e.alloc) {
          char* p = a.take(t.size[e.block], t.size[e.block], Tag::activation);
          (void)a.take_held_request();
          got[e.block] = p;
          if (!p) continue;
          ++served;
          REQUIRE(in[e.block]);
          CHECK(static_cast<std::size_t>(p - memory.data()) == want[e.block]);
        } else if (got[e.block]) {
          std::size_t requested = 0;
          Tag tag = Tag::other;
          a.give_back(got[e.block], &requested, &tag);
          got[e.block] = nullptr;
        }
      }
      CHECK(served == static_cast<std::size_t>(std::count(in.begin(), in.end(), true)));
      if (n >= 40) CHECK(served > 0);
    }
}
