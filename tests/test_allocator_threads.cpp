// SPDX-License-Identifier: MIT
// Concurrency: data-loader workers allocate and free at once. Each thread
// writes its own pattern into its blocks and checks it before freeing, so two
// threads handed overlapping memory would be caught. Meant to run clean under
// the tsan preset as well.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/stats.h>

using namespace snug;
using namespace snug::memory;

namespace {

void worker(Device d, int id, int iters, std::atomic<int>& errors) {
  std::mt19937 rng(static_cast<unsigned>(id * 7919 + 1));
  std::vector<std::pair<unsigned char*, std::size_t>> mine;
  TagScope tag(id % 2 ? Tag::data : Tag::activation);
  for (int i = 0; i < iters; ++i) {
    if (mine.size() < 16 && (mine.empty() || rng() % 3 != 0)) {
      std::size_t n = rng() % 4 == 0 ? (rng() % (3u << 20)) + 1 : (rng() % 65536) + 1;
      auto* p = static_cast<unsigned char*>(allocate(d, n));
      // Touch only the ends: enough to catch overlap, cheap under tsan.
      p[0] = static_cast<unsigned char>(id);
      p[n - 1] = static_cast<unsigned char>(id);
      mine.emplace_back(p, n);
    } else {
      std::size_t k = rng() % mine.size();
      auto [p, n] = mine[k];
      if (p[0] != static_cast<unsigned char>(id) || p[n - 1] != static_cast<unsigned char>(id)) ++errors;
      deallocate(d, p);
      mine[k] = mine.back();
      mine.pop_back();
    }
  }
  for (auto [p, n] : mine) deallocate(d, p);
}

}  // namespace

TEST_CASE("threads: concurrent allocate/free on one device and on several") {
  const int kThreads = 6;
#if defined(__SANITIZE_THREAD__)
  const int kIters = 4000;
#else
  const int kIters = 40000;
#endif
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  // Readers of stats, summary and snapshots run alongside the writers.
  std::thread reader([&] {
    while (!stop.load()) {
      DeviceStats s = stats(Device("cpu:20"));
      if (s.allocated_bytes.current > s.reserved_bytes.current) ++errors;
      (void)summary(Device("cpu:21"));
      (void)allocator_for(Device("cpu:20")).snapshot();
    }
  });
  record_history(true, 1000);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    // Half the threads share cpu:20; the others each get a fresh virtual
    // device, so allocator creation races too.
    Device d = t % 2 == 0 ? Device("cpu:20") : Device(DeviceType::CPU, 21 + t);
    ts.emplace_back(worker, d, t, kIters, std::ref(errors));
  }
  for (auto& t : ts) t.join();
  stop = true;
  reader.join();
  record_history(false, 1000);
  CHECK(errors.load() == 0);
  for (int i : {20, 22, 24, 26}) {
    Device d(DeviceType::CPU, i);
    allocator_for(d).check_invariants();
    CHECK(allocated(d) == 0);
    DeviceStats s = stats(d);
    CHECK(s.allocation.allocated == s.allocation.freed);
    empty_cache(d);
    CHECK(reserved(d) == 0);
  }
}

TEST_CASE("threads: tag and op scopes are per thread") {
  TagScope outer(Tag::parameter);
  std::thread t([] {
    CHECK(current_tag() == Tag::other);
    TagScope inner(Tag::gradient);
    OpScope op("worker_op");
    CHECK(current_tag() == Tag::gradient);
  });
  t.join();
  CHECK(current_tag() == Tag::parameter);
  CHECK(current_op() == nullptr);
}
