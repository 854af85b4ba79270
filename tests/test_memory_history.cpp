// SPDX-License-Identifier: MIT
// History and snapshots: the event ring buffer, the JSON snapshot written by
// dump_snapshot and read back by load_snapshot, and replay of a trace.
#include <doctest/doctest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/history.h>
#include <snug/memory/replay.h>

using namespace snug;
using namespace snug::memory;

namespace {

constexpr std::size_t MiB = 1024 * 1024;

std::string temp_path(const char* name) {
  return std::string("/tmp/snug_test_") + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

TEST_CASE("the history records alloc, free, segment and oom events in order") {
  CachingAllocator a(Device("cpu:60"), std::make_unique<SimulatedBackend>(64 * MiB));
  a.record_history(true, 100);
  void* p = a.allocate(1000, 0, Tag::activation, "matmul");
  a.deallocate(p);
  a.empty_cache();
  CHECK_THROWS_AS(a.allocate(100 * MiB, 0, Tag::gradient, "big"), OutOfMemoryError);
  std::vector<TraceEntry> ev = a.snapshot().events;
  REQUIRE(ev.size() == 5);
  CHECK(ev[0].action == Action::segment_alloc);
  CHECK(ev[0].size == 2 * MiB);
  CHECK(ev[1].action == Action::alloc);
  CHECK(ev[1].address == reinterpret_cast<std::uintptr_t>(p));
  CHECK(ev[1].size == 1024);
  CHECK(ev[1].requested == 1000);
  CHECK(ev[1].tag == Tag::activation);
  CHECK(ev[1].op == "matmul");
  CHECK(ev[2].action == Action::free);
  CHECK(ev[2].tag == Tag::activation);
  CHECK(ev[3].action == Action::segment_free);
  CHECK(ev[4].action == Action::oom);
  CHECK(ev[4].requested == 100 * MiB);
  for (std::size_t i = 1; i < ev.size(); ++i) CHECK(ev[i].time_ns >= ev[i - 1].time_ns);
}

TEST_CASE("the ring buffer keeps only the newest max_entries") {
  CachingAllocator a(Device("cpu:61"), std::make_unique<SimulatedBackend>());
  a.record_history(true, 10);
  for (int i = 0; i < 20; ++i) a.deallocate(a.allocate(static_cast<std::size_t>(512 * (i + 1))));
  std::vector<TraceEntry> ev = a.snapshot().events;
  REQUIRE(ev.size() == 10);
  CHECK(ev.back().action == Action::free);
  CHECK(ev.back().requested == 512 * 20);
  CHECK(ev.front().requested == 512 * 16);  // the oldest kept: alloc #16
  a.record_history(true, 4);                // shrinking keeps the newest
  ev = a.snapshot().events;
  REQUIRE(ev.size() == 4);
  CHECK(ev.back().requested == 512 * 20);
  a.record_history(false, 4);
  a.deallocate(a.allocate(1));
  CHECK(a.snapshot().events.size() == 4);  // off: nothing new
}

TEST_CASE("dump_snapshot / load_snapshot round trip") {
  Device d("cpu:62");
  record_history(true, 1000);
  void *w, *x, *y;
  {
    TagScope t(Tag::parameter);
    w = allocate(d, 3 * MiB);
  }
  {
    TagScope t(Tag::activation);
    OpScope op("gelu");
    x = allocate(d, 5000);
    y = allocate(d, 12 * MiB);
  }
  deallocate(d, x);
  record_history(false);
  std::string path = temp_path("snapshot.json");
  dump_snapshot(d, path);

  Snapshot snap = load_snapshot(path);
  REQUIRE(snap.devices.size() == 1);
  const DeviceSnapshot& ds = snap.devices[0];
  DeviceSnapshot live = allocator_for(d).snapshot();
  CHECK(ds.device == "cpu:62");
  CHECK(ds.backend == "host");
  CHECK(ds.settings == live.settings);
  CHECK(ds.capacity == kNoLimit);
  CHECK(ds.stats.allocated_bytes.current == live.stats.allocated_bytes.current);
  CHECK(ds.stats.reserved_bytes.peak == live.stats.reserved_bytes.peak);
  CHECK(ds.stats.tag_bytes[static_cast<int>(Tag::activation)].peak ==
        live.stats.tag_bytes[static_cast<int>(Tag::activation)].peak);
  CHECK(ds.stats.num_raw_allocs == live.stats.num_raw_allocs);
  REQUIRE(ds.segments.size() == live.segments.size());
  for (std::size_t i = 0; i < ds.segments.size(); ++i) {
    const SegmentInfo &a = ds.segments[i], &b = live.segments[i];
    CHECK(a.address == b.address);
    CHECK(a.size == b.size);
    CHECK(a.small_pool == b.small_pool);
    REQUIRE(a.blocks.size() == b.blocks.size());
    for (std::size_t j = 0; j < a.blocks.size(); ++j) {
      CHECK(a.blocks[j].address == b.blocks[j].address);
      CHECK(a.blocks[j].size == b.blocks[j].size);
      CHECK(a.blocks[j].state == b.blocks[j].state);
      CHECK(a.blocks[j].tag == b.blocks[j].tag);
      CHECK(a.blocks[j].op == b.blocks[j].op);
    }
  }
  REQUIRE(ds.events.size() == live.events.size());
  for (std::size_t i = 0; i < ds.events.size(); ++i) {
    CHECK(ds.events[i].action == live.events[i].action);
    CHECK(ds.events[i].address == live.events[i].address);
    CHECK(ds.events[i].size == live.events[i].size);
    CHECK(ds.events[i].requested == live.events[i].requested);
    CHECK(ds.events[i].time_ns == live.events[i].time_ns);
    CHECK(ds.events[i].tag == live.events[i].tag);
    CHECK(ds.events[i].op == live.events[i].op);
  }
  // y's block is in the snapshot with its tag and op.
  bool found = false;
  for (const SegmentInfo& s : ds.segments)
    for (const BlockInfo& b : s.blocks)
      if (b.address == reinterpret_cast<std::uintptr_t>(y)) {
        found = true;
        CHECK(b.state == BlockState::allocated);
        CHECK(b.tag == Tag::activation);
        CHECK(b.op == "gelu");
        CHECK(b.requested == 12 * MiB);
      }
  CHECK(found);

  // The all-devices form holds this device too.
  std::string all = temp_path("all.json");
  dump_snapshot(all);
  bool has = false;
  for (const DeviceSnapshot& s : load_snapshot(all).devices) has = has || s.device == "cpu:62";
  CHECK(has);
  deallocate(d, w);
  deallocate(d, y);
  std::remove(path.c_str());
  std::remove(all.c_str());
}

TEST_CASE("bad snapshot files throw IOError naming the file") {
  CHECK_THROWS_AS(load_snapshot("/nonexistent/dir/x.json"), IOError);
  std::string path = temp_path("bad.json");
  std::ofstream(path) << "{ not json";
  try {
    load_snapshot(path);
    FAIL("expected IOError");
  } catch (const IOError& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
  std::ofstream(path) << R"({"format": "something-else"})";
  CHECK_THROWS_AS(load_snapshot(path), IOError);
  std::ofstream(path) << R"({"format": "snug-memory-snapshot", "version": 1, "devices": [
      {"device": "cuda:0", "events": [{"action": "explode", "size": 1}]}]})";
  try {
    load_snapshot(path);
    FAIL("expected IOError");
  } catch (const IOError& e) {
    CHECK(std::string(e.what()).find("unknown action \"explode\"") != std::string::npos);
  }
  // A pickle (PyTorch's own snapshot format): the error says how to convert it.
  std::ofstream(path, std::ios::binary) << std::string("\x80\x04\x95\x10\x00", 5) << "}q\x00.";
  try {
    load_snapshot(path);
    FAIL("expected IOError");
  } catch (const IOError& e) {
    CHECK(std::string(e.what()).find("a pickle") != std::string::npos);
    CHECK(std::string(e.what()).find("tools/torch_snapshot.py import") != std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("replaying a recorded trace with the same settings gives the same peaks") {
  CachingAllocator a(Device("cpu:63"), std::make_unique<SimulatedBackend>());
  a.record_history(true, 100000);
  std::vector<void*> acts;
  void* params = a.allocate(30 * MiB, 0, Tag::parameter);
  for (int step = 0; step < 3; ++step) {
    for (int l = 0; l < 8; ++l) acts.push_back(a.allocate((l + 1) * 700 * 1024 + 100, 0, Tag::activation));
    while (!acts.empty()) {
      void* g = a.allocate(3 * MiB, 0, Tag::gradient);
      a.deallocate(acts.back());
      acts.pop_back();
      a.deallocate(g);
    }
  }
  a.deallocate(params);
  DeviceSnapshot snap = a.snapshot();
  ReplayResult r = replay(snap.events, snap.settings);
  CHECK(r.peak_allocated_bytes == snap.stats.allocated_bytes.peak);
  CHECK(r.peak_reserved_bytes == snap.stats.reserved_bytes.peak);
  CHECK(r.raw_allocs == snap.stats.num_raw_allocs);
  CHECK(r.ops == 2 * snap.stats.allocation.allocated);
  CHECK(r.skipped_frees == 0);
  CHECK(r.ns_per_op > 0);

  // Other settings change the outcome; a capacity below the peak makes OOMs.
  ReplayResult coarse = replay(snap.events, parse_settings("large_growth=0,large_segment=64M,large_threshold=32M"));
  // (peak allocated may differ too: which blocks get split depends on the segments)
  CHECK(coarse.peak_reserved_bytes != r.peak_reserved_bytes);
  ReplayResult tight = replay(snap.events, snap.settings, 32 * MiB);
  CHECK(tight.num_ooms > 0);
  CHECK(tight.peak_reserved_bytes <= 32 * static_cast<int64_t>(MiB));
}

TEST_CASE("the synthetic trace in bench/traces loads and replays") {
  const char* src = std::getenv("SNUG_SOURCE_DIR");
  std::string path = std::string(src ? src : ".") + "/bench/traces/synthetic_gpt_step.json";
  Snapshot snap = load_snapshot(path);
  REQUIRE(snap.devices.size() == 1);
  const auto& ev = snap.devices[0].events;
  REQUIRE(ev.size() > 1000);
  ReplayResult best = replay(ev, AllocatorSettings{});
  CHECK(best.ops == static_cast<int64_t>(ev.size()));
  CHECK(best.skipped_frees == 0);
  CHECK(best.stats.allocated_bytes.current == 0);
  CHECK(best.peak_reserved_bytes >= best.peak_allocated_bytes);
  AllocatorSettings first;
  first.policy = AllocPolicy::first_fit;
  CHECK(replay(ev, first).ops == best.ops);
}
