// SPDX-License-Identifier: MIT
// DevicePrefetcher (data/device_prefetch.h): the loader's batches, in order,
// on the device; on a GPU the copies go on a non-blocking copy stream, the
// compute stream waits for it on the device, and the batch's blocks are
// recorded on the compute stream (NOTE [ Prefetch to a device ]). The GPU's
// side is a fake memory backend here, so the ordering is tested on any machine.
#include <doctest/doctest.h>

#include <set>
#include <utility>
#include <vector>

#include <snug/core/raw_ops.h>
#include <snug/core/storage.h>
#include <snug/data/dataloader.h>
#include <snug/data/dataset.h>
#include <snug/data/device_prefetch.h>
#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/stream.h>
#include "fake_memory.h"

using namespace snug;
using namespace snug::data;

namespace {


// A GPU's memory without a GPU: addresses never touched, streams as numbers,
// events complete when the test says, and a log of the stream calls.
struct Log {
  std::vector<std::pair<memory::StreamId, memory::StreamId>> waits;  // (waiter, waited for)
  int copy_streams = 0, streams_destroyed = 0;
  std::set<memory::EventHandle> done;
  std::multiset<memory::StreamId> events_on;  // the stream of each event recorded
};
Log g_log;

class FakeGpuMemory final : public testing::AddressOnlyBackend {
 public:
  FakeGpuMemory() : AddressOnlyBackend(std::uintptr_t{1} << 41) {}
  const char* name() const override { return "fake_gpu"; }
  memory::EventHandle record_event(memory::StreamId s) override {
    g_log.events_on.insert(s);
    return next_event++;
  }
  bool query_event(memory::EventHandle e) override { return g_log.done.count(e) != 0; }
  void synchronize_event(memory::EventHandle e) override { g_log.done.insert(e); }
  memory::StreamId create_copy_stream() override {
    ++g_log.copy_streams;
    return 0xc0;
  }
  void destroy_stream(memory::StreamId) override { ++g_log.streams_destroyed; }
  void wait_stream(memory::StreamId waiter, memory::StreamId s) override { g_log.waits.emplace_back(waiter, s); }

  memory::EventHandle next_event = 1;
};

// A dataset of n samples {x (2) f32 = (i, -i), y () i64 = i}.
class Numbers : public Dataset {
 public:
  explicit Numbers(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    return {from_vector<float>({float(i), -float(i)}), scalar_tensor(double(i), DType::i64)};
  }

 private:
  int64_t n_;
};

}  // namespace

TEST_CASE("prefetch on a CPU device: the loader's batches, in order, on that device") {
  DataLoader loader(std::make_shared<Numbers>(10), {.batch_size = 3, .num_workers = 2});
  const Device d("cpu:1");
  DevicePrefetcher pf(d);
  CHECK(pf.copy_stream() == 0);  // a CPU device has no copy stream: each push is done at once
  std::vector<int64_t> seen;
  auto it = loader.begin();
  pf.push(*it);
  while (!pf.empty()) {
    Batch b = pf.pop();
    if (++it != loader.end()) pf.push(*it);
    CHECK(pf.size() <= 1);  // one batch ahead
    CHECK(b[0].device() == d);
    CHECK(b[1].device() == d);
    for (int64_t v : b[1].to_vector<int64_t>()) seen.push_back(v);
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK_THROWS_WITH_AS(pf.pop(), doctest::Contains("no batch"), ValueError);
}

TEST_CASE("prefetch on a GPU: copies on the copy stream, the compute stream waits, blocks recorded on it") {
  memory::register_backend_factory(DeviceType::CUDA, [](Device) { return std::make_unique<FakeGpuMemory>(); });
  const Device gpu("cuda:5");
  std::vector<memory::StreamId> copied_on;
  // The copy: a destination from the current stream's pool (never written: fake memory).
  auto copy = [&](const Tensor& t, Device d) {
    copied_on.push_back(memory::current_stream(d));
    auto impl = std::make_shared<TensorImpl>();  // as empty() makes it, without asking for a CUDA backend
    impl->storage = std::make_shared<Storage>(d, static_cast<std::size_t>(t.nbytes()));
    impl->shape = t.shape();
    impl->strides = t.strides();
    impl->dtype = t.dtype();
    return Tensor(std::move(impl));
  };
  Batch host;
  host.fields = {zeros({4, 64 * 1024}), zeros({4}, TensorOptions(DType::i64))};
  {
    DevicePrefetcher pf(gpu, copy);
    CHECK(g_log.copy_streams == 1);
    const memory::StreamId cs = pf.copy_stream();
    CHECK(cs == 0xc0);
    pf.push(host);
    pf.push(host);
    CHECK(copied_on == std::vector<memory::StreamId>(4, cs));  // every tensor, on the copy stream
    CHECK(memory::current_stream(gpu) == 0);                  // and the current stream is restored
    CHECK(g_log.waits.empty());                               // nothing waits until a batch is taken
    {
      Batch b = pf.pop();
      REQUIRE(g_log.waits.size() == 1);
      CHECK(g_log.waits[0] == std::pair<memory::StreamId, memory::StreamId>{0, cs});  // compute waits for copy
      CHECK(b[0].device() == gpu);
      CHECK(g_log.events_on.empty());
    }
    // The step is over and frees the batch: each block recorded on the compute
    // stream gets an event there, and goes back to the copy stream's pool only
    // once the compute stream has passed it (NOTE [ Stream-aware reuse ]).
    CHECK(g_log.events_on.size() == 2);
    CHECK(g_log.events_on.count(0) == 2);
    (void)pf.pop();
    CHECK(g_log.waits.size() == 2);
  }
  CHECK(g_log.streams_destroyed == 1);  // the copy stream is released with the prefetcher
  memory::allocator_for(gpu).check_invariants();
}
