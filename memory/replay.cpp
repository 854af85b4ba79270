// SPDX-License-Identifier: MIT
#include <snug/memory/replay.h>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>

namespace snug::memory {
namespace {

// The trace compiled for a tight timed loop: each block of the trace gets a
// slot number, so a replayed free finds its pointer by index, not by hashing
// the recorded address (which would cost more than the allocators we time).
struct Op {
  Action action;  // alloc, free or step
  StreamId stream;
  Tag tag;
  uint32_t slot;
  std::size_t requested;
};

// The middle value (the mean of the two middle ones for an even count; 0 for none).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h), v.end());
  if (v.size() % 2) return v[h];
  const double hi = v[h];
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h)) + hi) / 2;
}

struct Compiled {
  std::vector<Op> ops;
  std::size_t slots = 0;
  int64_t skipped_frees = 0;  // frees of blocks allocated before the trace began
  int64_t leftovers = 0;      // blocks still live at the end
  bool stepped = false;       // the trace has step events
};

Compiled compile(const std::vector<TraceEntry>& events, const char* what) {
  Compiled c;
  c.ops.reserve(events.size());
  std::unordered_map<std::uintptr_t, uint32_t> live;
  live.reserve(events.size() / 2 + 16);
  for (const TraceEntry& e : events) {
    if (e.action == Action::alloc) {
      const auto slot = static_cast<uint32_t>(c.slots++);
      SNUG_CHECK(live.emplace(e.address, slot).second, ValueError, what, ": the trace allocates address ", e.address,
                 " twice without freeing it");
      c.ops.push_back(Op{Action::alloc, e.stream, e.tag, slot, e.requested});
    } else if (e.action == Action::free) {
      auto it = live.find(e.address);
      if (it == live.end()) {
        ++c.skipped_frees;
        continue;
      }
      c.ops.push_back(Op{Action::free, e.stream, e.tag, it->second, 0});
      live.erase(it);
    } else if (e.action == Action::step) {
      c.ops.push_back(Op{Action::step, 0, Tag::other, 0, 0});
      c.stepped = true;
    }
  }
  c.leftovers = static_cast<int64_t>(live.size());
  return c;
}

}  // namespace

ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings, std::size_t capacity,
                    bool snapshot_at_peak, int repeats) {
  return replay(events, settings, ReplayOptions{capacity, snapshot_at_peak, repeats, false});
}

ReplayResult replay(const std::vector<TraceEntry>& events, const AllocatorSettings& settings,
                    const ReplayOptions& options) {
  const std::size_t capacity = options.capacity;
  const bool snapshot_at_peak = options.snapshot_at_peak;
  const int repeats = options.repeats;
  SNUG_CHECK(repeats >= 1, ValueError, "memory::replay: repeats must be >= 1, got ", repeats);
  const Compiled c = compile(events, "memory::replay");
  // The simulated device is as large as the capacity asks (or "infinite"), so
  // only the capacity decides whether a replayed allocation fits.
  const std::size_t total = capacity == kNoLimit ? std::size_t{1} << 46 : capacity;
  CachingAllocator a(Device(DeviceType::CUDA, 0), std::make_unique<SimulatedBackend>(total), settings);
  a.set_capacity(capacity);
  if (options.record_history) a.record_history(true, 2 * events.size() * static_cast<std::size_t>(repeats) + 1024);

  std::vector<void*> ptr(c.slots, nullptr);  // slot -> the replayed block (nullptr: not live)
  ReplayResult r;
  r.skipped_frees = c.skipped_frees;
  int64_t best_peak = -1, allocs = 0;
  // Planned without steps in the trace: at least two passes, each one step.
  const int passes = std::max(repeats, settings.policy == AllocPolicy::planned && !c.stepped ? 2 : 1);
  const bool pass_steps = passes > 1 && !c.stepped;
  int64_t steady_allocs = 0;
  std::chrono::steady_clock::time_point t_steady;
  // Each steady step's start (time, allocations so far): the figure is the
  // median step's ns per allocation, which a preempted step (this is often
  // a shared machine) does not move, as it moves the mean.
  std::vector<std::pair<std::chrono::steady_clock::time_point, int64_t>> step_marks;
  int64_t peak_before_steady = 0, peak_requested_before = 0, peak_allocated_before = 0;
  bool steady = false;
  auto begin_step = [&] {
    a.mark_step();
    if (++r.steps == 2) {  // the second step begins (after its mark): its figures start now
      const DeviceStats st = a.stats();
      peak_before_steady = st.reserved_bytes.peak;
      peak_requested_before = st.requested_bytes.peak;
      peak_allocated_before = st.allocated_bytes.peak;
      a.reset_peak();
      r.steady_raw_allocs = -st.num_raw_allocs;
      steady_allocs = allocs;
      steady = true;
      t_steady = std::chrono::steady_clock::now();
    }
    if (steady) step_marks.emplace_back(std::chrono::steady_clock::now(), allocs);
  };
  // A later pass of a trace with steps replays its steps from the second on
  // (the first one set the pool up: parameters, optimizer state), so every
  // pass is steady steps; a trace without steps replays whole, one step a pass.
  std::size_t again = 0;  // where later passes start in c.ops
  uint32_t again_slot = 0;  // the first slot they allocate
  if (c.stepped) {
    int seen = 0;
    for (std::size_t i = 0; i < c.ops.size(); ++i) {
      if (c.ops[i].action == Action::step && ++seen == 2) {
        again = i;
        break;
      }
      if (c.ops[i].action == Action::alloc) again_slot = c.ops[i].slot + 1;
    }
    if (seen < 2) again = c.ops.size();  // one step only: later passes have nothing to replay
  }
  // The wrap between passes, as a training loop runs it: the frees that the
  // replayed steps make of blocks from before them (step 2's zero_grad frees
  // step 1's gradients) free, in later passes, the blocks of the same sizes
  // that the last step left live, in order; the other leftovers go at the
  // pass's end. (All leftovers freed at the end, the last step's gradients
  // would be freed before the next step's mark, as no training loop does,
  // and the planned arena, if it records that step, would take them for the
  // step's own blocks.)
  constexpr uint32_t kNone = ~uint32_t{0};
  std::vector<uint32_t> wrap(c.slots, kNone);  // a slot from before the replayed steps -> the leftover its free frees
  std::vector<bool> wrapped(c.slots, false);    // leftovers freed that way
  std::vector<bool> freed(c.slots, false);      // slots the trace frees
  for (const Op& op : c.ops)
    if (op.action == Action::free) freed[op.slot] = true;
  if (c.stepped && passes > 1) {
    std::vector<std::size_t> size(c.slots, 0);
    for (const Op& op : c.ops)
      if (op.action == Action::alloc) size[op.slot] = op.requested;
    std::vector<uint32_t> left;  // leftovers of the replayed steps, in allocation order
    for (uint32_t k = again_slot; k < c.slots; ++k)
      if (!freed[k]) left.push_back(k);
    std::vector<bool> taken(left.size(), false);
    for (std::size_t i = again; i < c.ops.size(); ++i) {
      const Op& op = c.ops[i];
      if (op.action != Action::free || op.slot >= again_slot) continue;
      for (std::size_t j = 0; j < left.size(); ++j)
        if (!taken[j] && size[left[j]] == size[op.slot]) {
          taken[j] = true;
          wrap[op.slot] = left[j];
          wrapped[left[j]] = true;
          break;
        }
    }
  }
  // What a pass's end frees (below), listed now: a walk over every slot at
  // each pass's end would be timed with the allocator.
  std::vector<uint32_t> pass_leftovers;
  for (uint32_t k = c.stepped ? again_slot : 0; k < c.slots; ++k)
    if (!freed[k] && !wrapped[k]) pass_leftovers.push_back(k);
  // The loop's unusual cases, out of its way: a step's mark, a snapshot at
  // the peak, an allocation that runs out of memory, a wrapped leftover.
  // (Out of line: the loop keeps its counts and pointers in registers.)
  int64_t calls = 0;  // allocate and deallocate calls made (r.ops)
  void** live = ptr.data();
  auto odd = [&](const Op& op, int pass) __attribute__((noinline)) {
    if (op.action == Action::alloc) {
      if (live[op.slot]) {  // a wrapped leftover not freed before its slot came again
        a.deallocate(std::exchange(live[op.slot], nullptr));
        ++calls;
      }
      try {
        live[op.slot] = a.allocate(op.requested, op.stream, op.tag, nullptr);
      } catch (const OutOfMemoryError&) {
        ++r.num_ooms;
        return;
      }
      ++calls;
      ++allocs;
      if (snapshot_at_peak) {
        DeviceStats st = a.stats();
        if (st.allocated_bytes.current >= best_peak) {
          best_peak = st.allocated_bytes.current;
          r.at_peak = a.snapshot();
        }
      }
    } else if (op.action == Action::free) {
      // Its alloc ran out of memory, or came before this pass: the wrap's free.
      if (pass > 0 && wrap[op.slot] != kNone && live[wrap[op.slot]]) {
        a.deallocate(std::exchange(live[wrap[op.slot]], nullptr));
        ++calls;
      }
    } else {
      begin_step();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();  // the replay's own setup (above) is not timed
  // The common cases: an allocation into an empty slot, a free of a live
  // one. The counts live in locals, written back around odd(), so that
  // little but the allocator's calls is timed.
  const Op* const first = c.ops.data();
  const Op* const end = first + c.ops.size();
  for (int pass = 0; pass < passes; ++pass) {
    if (pass_steps) begin_step();
    int64_t n_calls = calls, n_allocs = allocs;
    for (const Op* op = pass > 0 ? first + again : first; op != end; ++op) {
      if (op->action == Action::alloc && !snapshot_at_peak) {
        void*& slot = live[op->slot];
        if (!slot) [[likely]] {
          try {
            slot = a.allocate(op->requested, op->stream, op->tag, nullptr);
            ++n_calls;
            ++n_allocs;
            continue;
          } catch (const OutOfMemoryError&) {
            ++r.num_ooms;
            continue;
          }
        }
      } else if (op->action == Action::free) {
        if (void* p = live[op->slot]) [[likely]] {
          live[op->slot] = nullptr;
          a.deallocate(p);
          ++n_calls;
          continue;
        }
      }
      calls = n_calls;
      allocs = n_allocs;
      odd(*op, pass);
      n_calls = calls;
      n_allocs = allocs;
    }
    calls = n_calls;
    allocs = n_allocs;
    // The pass's leftovers go at its end: all of them for a trace without
    // steps; for one with steps, those its later passes allocate again.
    if (passes > 1 && pass + 1 < passes)
      for (uint32_t k : pass_leftovers)
        if (live[k]) a.deallocate(std::exchange(live[k], nullptr));
  }
  auto t1 = std::chrono::steady_clock::now();
  r.ops += calls;
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  r.ns_per_op = r.ops ? ns / static_cast<double>(r.ops) : 0;
  r.ns_per_alloc_free = allocs ? ns / static_cast<double>(allocs) : 0;
  r.steady_ns_per_alloc_free = r.ns_per_alloc_free;
  r.steady_ns_per_alloc_free_mean = r.ns_per_alloc_free;
  if (steady && allocs > steady_allocs) {
    r.steady_ns_per_alloc_free_mean = std::chrono::duration<double, std::nano>(t1 - t_steady).count() /
                                      static_cast<double>(allocs - steady_allocs);
    step_marks.emplace_back(t1, allocs);
    std::vector<double> per_step;  // ns per allocation of each steady step that allocated
    for (std::size_t i = 0; i + 1 < step_marks.size(); ++i)
      if (const int64_t n = step_marks[i + 1].second - step_marks[i].second; n > 0)
        per_step.push_back(std::chrono::duration<double, std::nano>(step_marks[i + 1].first - step_marks[i].first).count() /
                           static_cast<double>(n));
    r.steady_steps_timed = static_cast<int64_t>(per_step.size());
    r.steady_ns_per_alloc_free = median(per_step);
  }
  for (void* p : ptr)
    if (p) a.deallocate(p);
  if (options.record_history) r.history = a.snapshot();
  r.stats = a.stats();
  r.steady_peak_reserved_bytes = r.stats.reserved_bytes.peak;
  r.steady_raw_allocs = steady ? r.steady_raw_allocs + r.stats.num_raw_allocs : r.stats.num_raw_allocs;
  // The whole replay's peaks: the steady part's, or the first step's if higher.
  r.peak_reserved_bytes = std::max(r.stats.reserved_bytes.peak, peak_before_steady);
  r.peak_allocated_bytes = std::max(r.stats.allocated_bytes.peak, peak_allocated_before);
  r.peak_requested_bytes = std::max(r.stats.requested_bytes.peak, peak_requested_before);
  r.raw_allocs = r.stats.num_raw_allocs;
  r.planned = a.planned_stats();
  return r;
}

ReplayResult replay_malloc(const std::vector<TraceEntry>& events) {
  const Compiled c = compile(events, "memory::replay_malloc");
  ReplayResult r;
  r.skipped_frees = c.skipped_frees;
  std::vector<void*> ptr(c.slots, nullptr);
  auto get = [](std::size_t n) {
    void* p = std::malloc(std::max<std::size_t>(n, 1));
    if (!p) throw OutOfMemoryError(str("memory::replay_malloc: malloc(", n, ") failed"), n, 0);
    return p;
  };
  // Pass 1, timed: malloc and free only.
  int64_t allocs = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const Op& op : c.ops) {
    if (op.action == Action::alloc) {
      ptr[op.slot] = get(op.requested);
      ++allocs;
      ++r.ops;
    } else if (op.action == Action::free) {
      std::free(std::exchange(ptr[op.slot], nullptr));
      ++r.ops;
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  r.ns_per_op = r.ops ? ns / static_cast<double>(r.ops) : 0;
  r.ns_per_alloc_free = allocs ? ns / static_cast<double>(allocs) : 0;
  r.steady_ns_per_alloc_free = r.steady_ns_per_alloc_free_mean = r.ns_per_alloc_free;
  for (void*& p : ptr) std::free(std::exchange(p, nullptr));
  malloc_trim(0);

  // Pass 2, untimed: the heap after every allocation. Reserved is the heap
  // (main arena + mmapped chunks) less what the process used before the
  // replay: free space the heap already had counts as the trace's, since
  // the trace may use it.
  auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return std::pair<int64_t, int64_t>(static_cast<int64_t>(m.arena + m.hblkhd), static_cast<int64_t>(m.hblks));
  };
  const struct mallinfo2 m0 = mallinfo2();
  const auto used_before = static_cast<int64_t>(m0.uordblks + m0.hblkhd);
  auto [last, last_blocks] = heap();
  std::vector<int64_t> usable(c.slots, 0);
  int64_t live = 0, live_usable = 0;
  std::vector<std::size_t> requested(c.slots, 0);
  for (const Op& op : c.ops) {
    if (op.action == Action::alloc) {
      ptr[op.slot] = get(op.requested);
      requested[op.slot] = op.requested;
      usable[op.slot] = static_cast<int64_t>(malloc_usable_size(ptr[op.slot]));
      live += static_cast<int64_t>(op.requested);
      live_usable += usable[op.slot];
      r.peak_requested_bytes = std::max(r.peak_requested_bytes, live);
      r.peak_allocated_bytes = std::max(r.peak_allocated_bytes, live_usable);
      const auto [now, blocks] = heap();
      if (now > last || blocks > last_blocks) ++r.raw_allocs;  // the heap grew, or a chunk was mmapped
      last = now;
      last_blocks = blocks;
      r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, now - used_before);
    } else if (op.action == Action::free) {
      live -= static_cast<int64_t>(requested[op.slot]);
      live_usable -= usable[op.slot];
      std::free(std::exchange(ptr[op.slot], nullptr));
      std::tie(last, last_blocks) = heap();
    }
  }
  for (void*& p : ptr) std::free(std::exchange(p, nullptr));
  malloc_trim(0);
  r.steady_peak_reserved_bytes = r.peak_reserved_bytes;
  r.steady_raw_allocs = r.raw_allocs;
  return r;
}

}  // namespace snug::memory
