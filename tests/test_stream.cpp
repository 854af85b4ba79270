// SPDX-License-Identifier: MIT
// memory/stream.h: the current stream per thread and CUDA device, its guard,
// that new storage on a device takes its block from the pool of that
// device's current stream, and streams of one's own made by the device's raw
// backend. The CUDA side is played by a fake raw backend
// with events registered for DeviceType::CUDA, so all of this runs without a
// GPU (this test process touches no real GPU memory).
#include <doctest/doctest.h>

#include <set>
#include <thread>

#include <snug/core/storage.h>
#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/stream.h>
#include "fake_memory.h"

using namespace snug;
using namespace snug::memory;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Addresses that are never dereferenced; events complete when the test says.
class EventBackend final : public testing::AddressOnlyBackend {
 public:
  const char* name() const override { return "fake_events"; }
  EventHandle record_event(StreamId s) override {
    recorded_on.insert(s);
    return next_event++;
  }
  bool query_event(EventHandle e) override { return done->count(e) != 0; }
  void synchronize_event(EventHandle e) override { done->insert(e); }
  StreamId create_stream() override {
    live_streams.insert(next_stream);
    return next_stream++;
  }
  void destroy_stream(StreamId s) override { live_streams.erase(s); }
  void make_current() override { ++made_current; }

  std::set<StreamId> live_streams;
  StreamId next_stream = 0x100;
  int made_current = 0;
  EventHandle next_event = 1;
  std::set<StreamId> recorded_on;
  std::set<EventHandle>* done = nullptr;
};

std::set<EventHandle> g_done;  // shared with the backend the registry creates

}  // namespace

TEST_CASE("the current stream is 0 by default, per device, per thread; the guard nests and restores") {
  const Device c0("cuda:0"), c1("cuda:1");
  CHECK(current_stream(c0) == 0);
  CHECK(current_stream(kCPU) == 0);
  {
    StreamGuard g(c0, 11);
    CHECK(current_stream(c0) == 11);
    CHECK(current_stream(c1) == 0);  // other devices keep theirs
    {
      StreamGuard inner(c0, 22);
      CHECK(current_stream(c0) == 22);
      StreamGuard other(c1, 33);
      CHECK(current_stream(c1) == 33);
    }
    CHECK(current_stream(c0) == 11);
    CHECK(current_stream(c1) == 0);
    StreamId seen = 99;
    std::thread([&] { seen = current_stream(c0); }).join();
    CHECK(seen == 0);  // another thread has its own current streams
  }
  CHECK(current_stream(c0) == 0);
  set_current_stream(c0, 5);
  CHECK(current_stream(c0) == 5);
  set_current_stream(c0, 0);
  CHECK(current_stream(c0) == 0);
}

TEST_CASE("streams are refused on CPU devices and beyond the device limit") {
  CHECK_THROWS_AS(set_current_stream(kCPU, 1), DeviceError);
  CHECK_THROWS_AS(StreamGuard(kCPU, 1), DeviceError);
  CHECK_THROWS_AS(StreamGuard(Device(DeviceType::CUDA, kMaxStreamDevices), 1), DeviceError);
  CHECK(current_stream(Device(DeviceType::CUDA, kMaxStreamDevices)) == 0);  // asking is fine
}

TEST_CASE("storage takes its block from the pool of the current stream; record_stream defers the reuse") {
  register_backend_factory(DeviceType::CUDA, [](Device) {
    auto b = std::make_unique<EventBackend>();
    b->done = &g_done;
    return b;
  });
  const Device d("cuda:6");
  const StreamId side = 0x5eed;
  void* on_side = nullptr;
  {
    StreamGuard g(d, side);
    Storage s(d, 1 * MiB);
    on_side = s.data();
  }  // freed into side's pool
  {
    Storage s(d, 1 * MiB);  // the default stream: side's block is not handed over
    CHECK(s.data() != on_side);
  }
  {
    StreamGuard g(d, side);
    Storage s(d, 1 * MiB);
    CHECK(s.data() == on_side);  // side's next allocation reuses it, no wait needed
  }
  // A default-stream block also used on `side` waits for side's event.
  void* used_on_side = nullptr;
  {
    Storage s(d, 1 * MiB);
    used_on_side = s.data();
    record_stream(d, s.data(), side);
  }
  auto& backend = static_cast<EventBackend&>(allocator_for(d).backend());
  CHECK(backend.recorded_on.count(side) == 1);
  {
    Storage s(d, 1 * MiB);
    CHECK(s.data() != used_on_side);  // the event is pending
  }
  g_done.insert(backend.next_event - 1);  // side reaches the event
  {
    Storage s(d, 1 * MiB);
    CHECK(s.data() == used_on_side);
  }
  allocator_for(d).check_invariants();
}

TEST_CASE("streams of one's own come from the device's raw backend; CPU devices have none") {
  register_backend_factory(DeviceType::CUDA, [](Device) {
    auto b = std::make_unique<EventBackend>();
    b->done = &g_done;
    return b;
  });
  // CPU devices have one stream: nothing to make, nothing to release, no device to bind,
  // no copy stream, nothing to wait for and no timed events.
  CHECK(create_stream(kCPU) == 0);
  CHECK(create_copy_stream(Device("cpu:2")) == 0);
  wait_stream(kCPU, 0, 0);
  CHECK(record_timed_event(kCPU, 0) == 0);
  destroy_event(kCPU, 0);
  CHECK(create_stream(Device("cpu:3")) == 0);
  destroy_stream(kCPU, 0);
  set_current_device(kCPU);
  const Device d("cuda:7");
  auto& backend = static_cast<EventBackend&>(allocator_for(d).backend());
  const StreamId a = create_stream(d), b = create_stream(d);
  CHECK(a != 0);
  CHECK(b != a);
  CHECK(backend.live_streams == std::set<StreamId>{a, b});
  destroy_stream(d, a);
  destroy_stream(d, 0);  // a no-op
  CHECK(backend.live_streams == std::set<StreamId>{b});
  set_current_device(d);
  CHECK(backend.made_current == 1);
  destroy_stream(d, b);
  CHECK(backend.live_streams.empty());
}
