// SPDX-License-Identifier: MIT
// snug-bench alloc: the caching allocator's cached path against glibc
// malloc/free, for the sizes tensors have (1 MiB to 64 MiB), and the cost of
// recording history. Each figure is the median over repeats of the mean time
// of one allocate+free pair, in wall-clock time and (the *_cpu_ns keys) in
// this thread's CPU time, which a busy shared machine disturbs far less.
//
// Like is compared with like: the plain pairs touch no memory on either side
// (cached_alloc_free_ns against malloc_free_ns), and the *_touch_ns pairs
// write the first byte of each block on both sides, as a tensor would (for
// malloc that is a fresh page from the kernel: the cost a caching allocator
// exists to avoid). planned_step_alloc_free_ns and best_fit_step_alloc_free_ns
// time a training step's pattern under the planned arena and best fit.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/settings.h>
#include "bench/bench.h"

namespace {

using namespace snug;

const std::vector<std::size_t> kSizes = {1u << 20,  3u << 20,  4u << 20,  7u << 20,
                                         12u << 20, 16u << 20, 33u << 20, 64u << 20};

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall_ns, cpu_ns;  // per pair
};

template <class F>
Timing time_pairs(int pairs, F pair) {
  double w0 = bench::now_seconds(), c0 = thread_cpu_seconds();
  for (int i = 0; i < pairs; ++i) pair(kSizes[static_cast<std::size_t>(i) % kSizes.size()]);
  return {(bench::now_seconds() - w0) * 1e9 / pairs, (thread_cpu_seconds() - c0) * 1e9 / pairs};
}

Timing time_cached(Device d, int pairs, bool touch = false) {
  return time_pairs(pairs, [d, touch](std::size_t n) {
    auto* p = static_cast<volatile char*>(memory::allocate(d, n));
    if (touch) p[0] = 1;
    memory::deallocate(d, const_cast<char*>(p));
  });
}

// Where malloc's pointers go, so the compiler cannot drop an unused malloc+free pair.
void* volatile g_sink = nullptr;

Timing time_malloc(int pairs, bool touch = false) {
  return time_pairs(pairs, [touch](std::size_t n) {
    auto* p = static_cast<volatile char*>(std::malloc(n));
    g_sink = const_cast<char*>(p);
    if (touch) p[0] = 1;
    std::free(const_cast<char*>(p));
  });
}

// A training step's pattern on a private allocator (a simulated device, so
// nothing is touched): 200 allocations of 4 to 28 KiB, then all freed in
// reverse, the step marked first. Under policy=planned every step after the
// first two is served by the arena; under best_fit by the cached pools.
// Returns ns per allocate+free over `steps` steps.
double time_steps(memory::AllocPolicy policy, int steps) {
  memory::AllocatorSettings s;
  s.policy = policy;
  memory::CachingAllocator a(Device(DeviceType::CUDA, 0), std::make_unique<memory::SimulatedBackend>(), s);
  std::vector<void*> p(200);
  auto step = [&] {
    a.mark_step();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = a.allocate(4096 * (1 + i % 7));
    for (std::size_t i = p.size(); i-- > 0;) a.deallocate(p[i]);
  };
  for (int i = 0; i < 3; ++i) step();  // recorded, planned, warm
  const double t0 = bench::now_seconds();
  for (int i = 0; i < steps; ++i) step();
  return (bench::now_seconds() - t0) * 1e9 / (static_cast<double>(steps) * static_cast<double>(p.size()));
}

struct Medians {
  double wall, cpu;
};
Medians medians(const std::vector<Timing>& ts) {
  std::vector<double> w, c;
  for (const Timing& t : ts) {
    w.push_back(t.wall_ns);
    c.push_back(t.cpu_ns);
  }
  return {bench::median(w), bench::median(c)};
}

}  // namespace

SNUG_BENCH(alloc, "caching allocator: cached allocate+free vs malloc+free (1-64 MiB), history overhead",
           bench::int_flag("repeats", 9, "timed repeats (the median is reported)"),
           bench::int_flag("pairs", 200000, "allocate+free pairs per repeat on the caching allocator", 10),
           bench::int_flag("malloc-pairs", 2000, "malloc+free pairs per repeat", 10)) {
  const int repeats = static_cast<int>(args.get_int("repeats"));
  const int pairs = static_cast<int>(args.get_int("pairs"));
  const int malloc_pairs = static_cast<int>(args.get_int("malloc-pairs"));
  const Device d(DeviceType::CPU, 100);  // a virtual device of its own: nothing else in its pool

  // Warm the cache: every size once, so the timed loop never reaches the backend.
  for (std::size_t n : kSizes) memory::deallocate(d, memory::allocate(d, n));
  time_cached(d, pairs / 10);
  std::vector<Timing> cached, hist, mall, cached_touch, mall_touch;
  for (int r = 0; r < repeats; ++r) {  // interleaved, so both see the same machine
    cached.push_back(time_cached(d, pairs));
    cached_touch.push_back(time_cached(d, pairs, true));
  }
  memory::allocator_for(d).record_history(true, 100000);
  time_cached(d, pairs / 10);  // fill the ring once so its strings have storage
  for (int r = 0; r < repeats; ++r) hist.push_back(time_cached(d, pairs));
  memory::allocator_for(d).record_history(false, 100000);
  time_malloc(malloc_pairs / 10);
  for (int r = 0; r < repeats; ++r) {
    mall.push_back(time_malloc(malloc_pairs));
    mall_touch.push_back(time_malloc(malloc_pairs, true));
  }
  const int64_t raw = memory::stats(d).num_raw_allocs;
  std::vector<double> planned_ns, best_ns;
  for (int r = 0; r < repeats; ++r) {  // interleaved
    planned_ns.push_back(time_steps(memory::AllocPolicy::planned, pairs / 200));
    best_ns.push_back(time_steps(memory::AllocPolicy::best_fit, pairs / 200));
  }
  const double pl = bench::median(planned_ns), bf = bench::median(best_ns);

  Medians cm = medians(cached), hm = medians(hist), mm = medians(mall), ct = medians(cached_touch),
          mt = medians(mall_touch);
  double c = cm.wall, h = hm.wall, m = mm.wall;
  if (args.json()) {
    std::printf(
        "{\"bench\":\"alloc\",\"cached_alloc_free_ns\":%.1f,\"malloc_free_ns\":%.1f,\"speedup\":%.1f,"
        "\"cached_alloc_free_history_ns\":%.1f,\"history_overhead_ns_per_op\":%.1f,"
        "\"cached_alloc_free_cpu_ns\":%.1f,\"malloc_free_cpu_ns\":%.1f,\"speedup_cpu\":%.1f,"
        "\"cached_alloc_free_history_cpu_ns\":%.1f,\"history_overhead_cpu_ns_per_op\":%.1f,"
        "\"cached_alloc_free_touch_ns\":%.1f,\"malloc_free_touch_ns\":%.1f,\"speedup_touch\":%.1f,"
        "\"planned_step_alloc_free_ns\":%.1f,\"best_fit_step_alloc_free_ns\":%.1f,"
        "\"raw_allocs\":%lld,\"repeats\":%d,\"pairs\":%d}\n",
        c, m, m / c, h, (h - c) / 2, cm.cpu, mm.cpu, mm.cpu / cm.cpu, hm.cpu, (hm.cpu - cm.cpu) / 2, ct.wall, mt.wall,
        mt.wall / ct.wall, pl, bf, static_cast<long long>(raw), repeats, pairs);
  } else {
    std::printf("(wall-clock medians; this thread's CPU time: cached %.1f ns, history %.1f ns, malloc %.1f ns)\n",
                cm.cpu, hm.cpu, mm.cpu);
    std::printf("cached allocate+free      %8.1f ns   (median of %d x %d pairs, sizes 1-64 MiB)\n", c, repeats, pairs);
    std::printf("  with history recording  %8.1f ns   (+%.1f ns per alloc or free)\n", h, (h - c) / 2);
    std::printf("glibc malloc+free         %8.1f ns   (median of %d x %d pairs)\n", m, repeats, malloc_pairs);
    std::printf("speedup                   %8.1fx  (neither side touches the memory)\n", m / c);
    std::printf("cached, first byte written %7.1f ns; malloc, first byte written %.1f ns: %.1fx\n", ct.wall, mt.wall,
                mt.wall / ct.wall);
    std::printf("a step of 200 blocks: planned arena %.1f ns, best fit %.1f ns per allocate+free\n", pl, bf);
  }
  return 0;
}
