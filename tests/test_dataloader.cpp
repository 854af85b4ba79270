// SPDX-License-Identifier: MIT
// DataLoader: every sample exactly once per epoch and the same order for 0, 1
// and 4 workers; bounded prefetch; worker exceptions reach the caller with the
// sample index; no thread outlives an epoch, an abandoned loop or the loader.
// Run under the tsan preset too (scripts: build just this test there).
#include <doctest/doctest.h>

#include <snug/cuda/cuda_api.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <thread>

#include <snug/data/dataloader.h>

using namespace snug;
using namespace snug::data;

namespace {

// Threads of this process, from /proc/self/task.
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Sample i is {i as an i64 scalar, a (3) f32 row of i, i+0.5, i+0.25, a
// random (2) f32 draw from sample_rng()}; get() can be told to fail at one
// index, to sleep, and counts the calls in flight.
class Numbers : public Dataset {
 public:
  explicit Numbers(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    const int now = ++in_flight;
    int seen = max_in_flight.load();
    while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
    }
    calls++;
    if (sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    --in_flight;
    if (i == fail_at) throw std::runtime_error("bad record here");
    Tensor noise = rand({2}, DType::f32, &sample_rng());
    return {scalar_tensor(double(i), DType::i64), from_vector<float>({float(i), float(i) + 0.5f, float(i) + 0.25f}),
            noise};
  }
  int64_t fail_at = -1;
  int sleep_us = 0;
  mutable std::atomic<int> in_flight{0}, max_in_flight{0};
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
};

struct EpochOut {
  std::vector<int64_t> order;  // sample ids in batch order (from field 0)
  std::vector<float> noise;    // the random field, flattened
  std::vector<int64_t> batch_sizes;
};

EpochOut run_epoch(DataLoader& loader) {
  EpochOut out;
  for (Batch& b : loader) {
    REQUIRE(b.fields.size() == 3);
    const int64_t B = b.size();
    CHECK(b[0].shape() == Shape{B});
    CHECK(b[1].shape() == Shape{B, 3});
    CHECK(b[2].shape() == Shape{B, 2});
    std::vector<int64_t> ids = b[0].to_vector<int64_t>();
    CHECK(ids == b.indices);  // the loader records which samples it used
    std::vector<float> rows = b[1].to_vector<float>();
    for (int64_t k = 0; k < B; ++k) CHECK(rows[size_t(3 * k + 1)] == float(ids[size_t(k)]) + 0.5f);
    out.order.insert(out.order.end(), ids.begin(), ids.end());
    std::vector<float> nz = b[2].to_vector<float>();
    out.noise.insert(out.noise.end(), nz.begin(), nz.end());
    out.batch_sizes.push_back(B);
  }
  return out;
}

}  // namespace

TEST_CASE("every sample exactly once per epoch, the same order for 0, 1 and 4 workers") {
  const int64_t N = 103;
  auto ds = std::make_shared<Numbers>(N);
  std::vector<EpochOut> ref;  // epochs 0 and 1 with 0 workers
  for (int workers : {0, 1, 4}) {
    CAPTURE(workers);
    DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 42, .num_workers = workers});
    CHECK(loader.size() == 13);
    for (int epoch = 0; epoch < 2; ++epoch) {
      EpochOut e = run_epoch(loader);
      std::set<int64_t> seen(e.order.begin(), e.order.end());
      CHECK(e.order.size() == size_t(N));
      CHECK(seen.size() == size_t(N));
      CHECK(*seen.begin() == 0);
      CHECK(*seen.rbegin() == N - 1);
      CHECK(e.batch_sizes.back() == N % 8);
      if (workers == 0) {
        ref.push_back(e);
      } else {
        CHECK(e.order == ref[size_t(epoch)].order);
        CHECK(e.noise == ref[size_t(epoch)].noise);  // per-sample randomness does not depend on workers
      }
    }
  }
  // Shuffled, and a new order each epoch.
  std::vector<int64_t> iota(N);
  for (int64_t i = 0; i < N; ++i) iota[size_t(i)] = i;
  CHECK(ref[0].order != iota);
  CHECK(ref[0].order != ref[1].order);
  // A different seed gives a different order; shuffle off gives 0..N-1; drop_last drops the 7.
  DataLoader other(ds, {.batch_size = 8, .shuffle = true, .seed = 43});
  CHECK(run_epoch(other).order != ref[0].order);
  DataLoader seq(ds, {.batch_size = 8, .num_workers = 2, .drop_last = true});
  EpochOut s = run_epoch(seq);
  CHECK(s.order == std::vector<int64_t>(iota.begin(), iota.begin() + 96));
  CHECK(seq.size() == 12);
  // set_epoch replays an epoch.
  DataLoader again(ds, {.batch_size = 8, .shuffle = true, .seed = 42, .num_workers = 2});
  again.set_epoch(1);
  CHECK(run_epoch(again).order == ref[1].order);
}

TEST_CASE("an exception in a worker reaches the caller with the sample index") {
  auto ds = std::make_shared<Numbers>(64);
  ds->fail_at = 37;
  for (int workers : {0, 1, 4}) {
    CAPTURE(workers);
    const int before = thread_count();
    {
      DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
      int64_t batches = 0;
      bool caught = false;
      try {
        for (Batch& b : loader) {
          (void)b;
          ++batches;
        }
      } catch (const DataLoaderError& e) {
        caught = true;
        CHECK(e.sample_index() == 37);
        CHECK(e.batch_index() == 9);
        const std::string msg = e.what();
        CHECK(msg.find("sample 37") != std::string::npos);
        CHECK(msg.find("bad record here") != std::string::npos);
        CHECK_THROWS_WITH_AS(std::rethrow_exception(e.original()), "bad record here", std::runtime_error);
      }
      CHECK(caught);
      CHECK(batches == 9);  // batches 0..8 came through first, in order
      // The loader is usable again: the next epoch fails at the same place.
      CHECK_THROWS_AS(run_epoch(loader), DataLoaderError);
      CHECK(loader.live_workers() == 0);
    }
    CHECK(thread_count() == before);
  }
  // Collate failures name the batch.
  auto ok = std::make_shared<Numbers>(8);
  DataLoader bad(ok, {.batch_size = 4, .num_workers = 2, .collate = [](std::vector<Sample>) -> Batch {
                        throw ValueError("collate says no");
                      }});
  CHECK_THROWS_WITH_AS(run_epoch(bad), doctest::Contains("collate failed on batch 0"), DataLoaderError);
}

TEST_CASE("no thread left behind: end of epoch, abandoned loop, persistent workers, destructor") {
  auto ds = std::make_shared<Numbers>(200);
  ds->sleep_us = 200;
  const int before = thread_count();
  {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = 3});
    run_epoch(loader);
    CHECK(loader.live_workers() == 0);
    CHECK(thread_count() == before);
    // Abandon a loop halfway: the iterator's destruction ends the epoch.
    int n = 0;
    for (Batch& b : loader) {
      (void)b;
      if (++n == 3) break;
    }
    CHECK(loader.live_workers() == 0);
    CHECK(thread_count() == before);
    // The next epoch after an abandoned one is complete.
    CHECK(run_epoch(loader).order.size() == 200);
    // A second begin() supersedes the first iterator's epoch.
    auto it1 = loader.begin();
    auto it2 = loader.begin();
    CHECK_THROWS_AS(++it1, ValueError);
    int64_t count = 0;
    for (; it2 != loader.end(); ++it2) count += (*it2).size();
    CHECK(count == 200);
  }
  CHECK(thread_count() == before);
  {
    DataLoader persistent(ds, {.batch_size = 4, .num_workers = 2, .persistent_workers = true});
    run_epoch(persistent);
    CHECK(persistent.live_workers() == 2);
    CHECK(thread_count() == before + 2);
    int n = 0;
    for (Batch& b : persistent) {
      (void)b;
      if (++n == 2) break;
    }
    CHECK(persistent.live_workers() == 2);
    CHECK(run_epoch(persistent).order.size() == 200);
    // Destroyed with an epoch running and workers busy.
    auto it = persistent.begin();
    CHECK(it != persistent.end());
  }
  CHECK(thread_count() == before);
}

TEST_CASE("prefetch is bounded by prefetch_factor * num_workers") {
  auto ds = std::make_shared<Numbers>(400);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 3});
  auto it = loader.begin();
  // Hold the first batch and let the workers run as far as they may.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int64_t calls = ds->calls.load();
  // The batch held (2 samples) + at most 3 * 2 batches ahead (12 samples).
  CHECK(calls <= 2 + 12);
  CHECK(calls >= 2 + 2);  // and they did run ahead
}

TEST_CASE("pin_memory is accepted everywhere and stages batches in pinned memory when a GPU is present") {
  auto ds = std::make_shared<Numbers>(10);
  DataLoader loader(ds, {.batch_size = 5, .num_workers = 1, .pin_memory = true});
  CHECK(loader.pin_memory_active() == cuda::is_available());
  if (!cuda::is_available()) MESSAGE("pinned staging skipped: no CUDA GPU (pin_memory is a no-op)");
  EpochOut e = run_epoch(loader);
  CHECK(e.order.size() == 10);
}

TEST_CASE("bad options throw ValueError") {
  auto ds = std::make_shared<Numbers>(10);
  CHECK_THROWS_AS(DataLoader(ds, {.batch_size = 0}), ValueError);
  CHECK_THROWS_AS(DataLoader(ds, {.num_workers = -1}), ValueError);
  CHECK_THROWS_AS(DataLoader(ds, {.prefetch_factor = 0}), ValueError);
  CHECK_THROWS_AS(DataLoader(nullptr, {}), ValueError);
}

TEST_CASE("an epoch of a batch sampler: token budget batches through the loader") {
  auto ds = std::make_shared<Numbers>(30);
  std::vector<int64_t> lengths(30);
  for (int64_t i = 0; i < 30; ++i) lengths[size_t(i)] = 1 + i % 7;
  auto bs = std::make_shared<TokenBudgetBatchSampler>(lengths, TokenBudgetOptions{.max_tokens = 12, .seed = 3});
  DataLoader a(ds, {.num_workers = 0, .batch_sampler = bs});
  DataLoader b(ds, {.num_workers = 3, .batch_sampler = bs});
  EpochOut ea = run_epoch(a), eb = run_epoch(b);
  CHECK(ea.order == eb.order);
  CHECK(std::set<int64_t>(ea.order.begin(), ea.order.end()).size() == 30);
}
