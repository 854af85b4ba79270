// snug-bench alloc: the caching allocator's cached path against glibc
// malloc/free, for the sizes tensors have (1 MiB to 64 MiB), and the cost of
// recording history. Each figure is the median over repeats of the mean time
// of one allocate+free pair.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench.h"
#include "memory/allocator.h"
#include "memory/caching_allocator.h"

namespace {

using namespace snug;

const std::vector<std::size_t> kSizes = {1u << 20, 3u << 20, 4u << 20, 7u << 20, 12u << 20, 16u << 20, 33u << 20,
                                         64u << 20};

double time_cached(Device d, int pairs) {
  double t0 = bench::now_seconds();
  for (int i = 0; i < pairs; ++i) {
    void* p = memory::allocate(d, kSizes[static_cast<std::size_t>(i) % kSizes.size()]);
    memory::deallocate(d, p);
  }
  return (bench::now_seconds() - t0) * 1e9 / pairs;
}

double time_malloc(int pairs) {
  double t0 = bench::now_seconds();
  for (int i = 0; i < pairs; ++i) {
    auto* p = static_cast<volatile char*>(std::malloc(kSizes[static_cast<std::size_t>(i) % kSizes.size()]));
    p[0] = 1;  // touch it, as a tensor would
    std::free(const_cast<char*>(p));
  }
  return (bench::now_seconds() - t0) * 1e9 / pairs;
}

}  // namespace

SNUG_BENCH(alloc, "caching allocator: cached allocate+free vs malloc+free (1-64 MiB), history overhead") {
  const int repeats = static_cast<int>(args.get_int("repeats", 9));
  const int pairs = static_cast<int>(args.get_int("pairs", 200000));
  const int malloc_pairs = static_cast<int>(args.get_int("malloc-pairs", 2000));
  const Device d(DeviceType::CPU, 100);  // a virtual device of its own: nothing else in its pool

  // Warm the cache: every size once, so the timed loop never reaches the backend.
  for (std::size_t n : kSizes) memory::deallocate(d, memory::allocate(d, n));
  time_cached(d, pairs / 10);
  std::vector<double> cached, hist, mall;
  for (int r = 0; r < repeats; ++r) cached.push_back(time_cached(d, pairs));
  memory::allocator_for(d).record_history(true, 100000);
  time_cached(d, pairs / 10);  // fill the ring once so its strings have storage
  for (int r = 0; r < repeats; ++r) hist.push_back(time_cached(d, pairs));
  memory::allocator_for(d).record_history(false, 100000);
  time_malloc(malloc_pairs / 10);
  for (int r = 0; r < repeats; ++r) mall.push_back(time_malloc(malloc_pairs));
  const int64_t raw = memory::stats(d).num_raw_allocs;

  double c = bench::median(cached), h = bench::median(hist), m = bench::median(mall);
  if (args.json()) {
    std::printf(
        "{\"bench\":\"alloc\",\"cached_alloc_free_ns\":%.1f,\"malloc_free_ns\":%.1f,\"speedup\":%.1f,"
        "\"cached_alloc_free_history_ns\":%.1f,\"history_overhead_ns_per_op\":%.1f,\"raw_allocs\":%lld,"
        "\"repeats\":%d,\"pairs\":%d}\n",
        c, m, m / c, h, (h - c) / 2, static_cast<long long>(raw), repeats, pairs);
  } else {
    std::printf("cached allocate+free      %8.1f ns   (median of %d x %d pairs, sizes 1-64 MiB)\n", c, repeats,
                pairs);
    std::printf("  with history recording  %8.1f ns   (+%.1f ns per alloc or free)\n", h, (h - c) / 2);
    std::printf("glibc malloc+free+touch   %8.1f ns   (median of %d x %d pairs)\n", m, repeats, malloc_pairs);
    std::printf("speedup                   %8.1fx\n", m / c);
  }
  return 0;
}
