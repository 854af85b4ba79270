// SPDX-License-Identifier: MIT
// CachingAllocator: rounding, pools, split and coalesce, capacity and the
// out-of-memory path, tags, stream-deferred reuse, and the global API.
#include <doctest/doctest.h>

#include <cstring>
#include <set>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>

using namespace snug;
using namespace snug::memory;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// Address ranges like SimulatedBackend, plus events the test completes by hand.
class FakeBackend : public RawBackend {
 public:
  const char* name() const override { return "fake"; }
  void* alloc(std::size_t n) override {
    if (fail_next) {
      fail_next = false;
      return nullptr;
    }
    ++allocs;
    void* p = reinterpret_cast<void*>(next);
    next += (n + (2 * MiB - 1)) / (2 * MiB) * (2 * MiB);
    return p;
  }
  void free(void*, std::size_t) override { ++frees; }
  std::size_t total_memory() const override { return 1024 * MiB; }
  std::size_t free_memory() const override { return free_now; }
  EventHandle record_event(StreamId s) override {
    ++events_recorded;
    return next_event++;
  }
  bool query_event(EventHandle e) override { return done.count(e) != 0; }
  void synchronize_event(EventHandle e) override { done.insert(e); }

  std::uintptr_t next = std::uintptr_t{1} << 40;
  EventHandle next_event = 1;
  std::set<EventHandle> done;
  bool fail_next = false;
  std::size_t free_now = 0;  // what free_memory() reports (0: unknown, as on the host)
  int allocs = 0, frees = 0, events_recorded = 0;
};

// The layout tests below are written against PyTorch's fixed 20 MiB large
// segments, so the fixture pins large_growth=0; NOTE [ Segment growth ] (the
// default) has its own test, which uses GrowthFixture.
struct Fixture {
  FakeBackend* fake = new FakeBackend;
  CachingAllocator a{Device("cpu:9"), std::unique_ptr<RawBackend>(fake), parse_settings("large_growth=0")};
};

struct GrowthFixture {
  FakeBackend* fake = new FakeBackend;
  CachingAllocator a{Device("cpu:9"), std::unique_ptr<RawBackend>(fake)};
};

std::uintptr_t addr(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

TEST_CASE("available(): the capacity when set, else the pool's reservation plus the device's free memory") {
  Fixture f;
  CHECK(f.a.available() == kNoLimit);  // nothing known, no capacity: the host's case
  f.fake->free_now = 300 * MiB;        // a GPU with 300 MiB free (cudaMemGetInfo)
  CHECK(f.a.available() == 300 * MiB);
  void* p = f.a.allocate(5 * MiB);  // a 20 MiB segment is reserved...
  f.fake->free_now = 280 * MiB;     // ...and leaves the device's free memory
  CHECK(f.a.available() == 300 * MiB);  // the pool's own memory still counts
  f.a.set_capacity(100 * MiB);          // a user's capacity wins
  CHECK(f.a.available() == 100 * MiB);
  f.a.set_capacity(kNoLimit);
  f.fake->free_now = 0;
  CHECK(f.a.available() == kNoLimit);
  f.a.deallocate(p);
}

TEST_CASE("requests are rounded to 512 bytes and small ones share a 2 MiB segment") {
  Fixture f;
  CHECK(f.a.round_size(0) == 512);
  CHECK(f.a.round_size(1) == 512);
  CHECK(f.a.round_size(512) == 512);
  CHECK(f.a.round_size(513) == 1024);
  void* p = f.a.allocate(1);
  void* q = f.a.allocate(1000);
  CHECK(f.a.block_size(p) == 512);
  CHECK(f.a.block_size(q) == 1024);
  CHECK(addr(q) == addr(p) + 512);  // carved from the same segment, in order
  DeviceStats s = f.a.stats();
  CHECK(s.reserved_bytes.current == 2 * MiB);
  CHECK(s.allocated_bytes.current == 1536);
  CHECK(s.requested_bytes.current == 1001);
  CHECK(s.segment.current == 1);
  CHECK(s.num_raw_allocs == 1);
  f.a.deallocate(p);
  f.a.deallocate(q);
  f.a.check_invariants();
}

TEST_CASE("large pool: 20 MiB segments below 10 MiB, 2 MiB multiples above") {
  Fixture f;
  void* a = f.a.allocate(1 * MiB + 1);  // just over the small threshold
  CHECK(f.a.stats().reserved_bytes.current == 20 * MiB);
  void* b = f.a.allocate(3 * MiB);  // same 20 MiB segment
  CHECK(addr(b) == addr(a) + f.a.block_size(a));
  CHECK(f.a.stats().segment.current == 1);
  void* c = f.a.allocate(15 * MiB);  // fits the segment's 15.5 MiB tail
  CHECK(f.a.stats().segment.current == 1);
  void* d = f.a.allocate(15 * MiB + 1);  // its own segment, rounded to 16 MiB
  CHECK(f.a.stats().reserved_bytes.current == 36 * MiB);
  CHECK(f.a.block_size(d) == 16 * MiB);
  f.a.deallocate(d);
  f.a.check_invariants();
  f.a.deallocate(a);
  f.a.deallocate(b);
  f.a.deallocate(c);
  f.a.check_invariants();
}

TEST_CASE("large pool: segments grow with the pool (large_growth), capped at large_segment") {
  GrowthFixture f;                  // defaults: large_growth 16, large_round 2 MiB, large_segment 20 MiB
  void* a = f.a.allocate(3 * MiB);  // empty pool: a segment of the request, rounded up
  CHECK(f.a.stats().reserved_bytes.current == 4 * MiB);
  void* b = f.a.allocate(3 * MiB);  // a 1 MiB remainder is not split (PyTorch's rule): new segment
  CHECK(f.a.stats().reserved_bytes.current == 8 * MiB);
  std::vector<void*> held{a, b};
  // Fill the large pool to 160 MiB; segments then are 160/16 = 10 MiB, and
  // 20 MiB once the pool holds 320 MiB.
  while (f.a.stats().reserved_bytes.current < static_cast<int64_t>(160 * MiB)) held.push_back(f.a.allocate(4 * MiB));
  int64_t before = f.a.stats().reserved_bytes.current;
  // Use up every free block first so the next request needs a new segment.
  while (f.a.stats().reserved_bytes.current == before) held.push_back(f.a.allocate(2 * MiB));
  int64_t grown = f.a.stats().reserved_bytes.current - before;
  CHECK(grown == static_cast<int64_t>(((before / 16 + 2 * MiB - 1) / (2 * MiB)) * (2 * MiB)));
  while (f.a.stats().reserved_bytes.current < static_cast<int64_t>(400 * MiB)) held.push_back(f.a.allocate(4 * MiB));
  before = f.a.stats().reserved_bytes.current;
  while (f.a.stats().reserved_bytes.current == before) held.push_back(f.a.allocate(2 * MiB));
  CHECK(f.a.stats().reserved_bytes.current - before == static_cast<int64_t>(20 * MiB));
  f.a.check_invariants();
  for (void* p : held) f.a.deallocate(p);
  f.a.check_invariants();
}

TEST_CASE("split and coalesce") {
  Fixture f;
  void* a = f.a.allocate(4 * MiB);
  void* b = f.a.allocate(4 * MiB);
  void* c = f.a.allocate(4 * MiB);
  REQUIRE(addr(b) == addr(a) + 4 * MiB);
  REQUIRE(addr(c) == addr(b) + 4 * MiB);
  DeviceStats s = f.a.stats();
  CHECK(s.inactive_split_bytes.current == 8 * MiB);  // the 20 MiB segment's tail
  CHECK(s.inactive_split.current == 1);

  f.a.deallocate(b);  // a hole between a and c: not merged with anything
  s = f.a.stats();
  CHECK(s.inactive_split.current == 2);
  CHECK(s.inactive_split_bytes.current == 12 * MiB);
  f.a.check_invariants();

  void* b2 = f.a.allocate(4 * MiB);  // best fit takes the exact hole
  CHECK(b2 == b);
  f.a.deallocate(b2);

  f.a.deallocate(c);  // merges with the hole before it and the tail after it
  s = f.a.stats();
  CHECK(s.inactive_split.current == 1);
  CHECK(s.inactive_split_bytes.current == 16 * MiB);
  f.a.check_invariants();

  f.a.deallocate(a);  // the whole segment is one free block again
  s = f.a.stats();
  CHECK(s.inactive_split.current == 0);
  CHECK(s.inactive_split_bytes.current == 0);
  CHECK(s.reserved_bytes.current == 20 * MiB);
  void* big = f.a.allocate(20 * MiB);  // needs the whole segment: reuses it
  CHECK(big == a);
  CHECK(f.a.stats().num_raw_allocs == 1);
  f.a.deallocate(big);
  f.a.empty_cache();
  CHECK(f.a.stats().reserved_bytes.current == 0);
  CHECK(f.fake->frees == 1);
  f.a.check_invariants();
}

TEST_CASE("large blocks are not split when the rest would be small; max_split_size") {
  Fixture f;
  void* a = f.a.allocate(19 * MiB + 512 * KiB);  // 512 KiB left over: not worth a block
  CHECK(f.a.block_size(a) == 20 * MiB);
  f.a.deallocate(a);

  AllocatorSettings s;
  s.max_split_size = 40 * MiB;
  f.a.set_settings(s);
  void* big = f.a.allocate(60 * MiB);  // own 60 MiB segment, oversize
  f.a.deallocate(big);
  // A normal request must not take (and split) the cached oversize block.
  void* small = f.a.allocate(12 * MiB);
  CHECK(small != big);
  // An oversize request may take it only if it is less than 20 MiB too big.
  void* o1 = f.a.allocate(50 * MiB);
  CHECK(o1 == big);
  CHECK(f.a.block_size(o1) == 60 * MiB);  // not split
  f.a.deallocate(o1);
  void* o2 = f.a.allocate(41 * MiB);  // 60 - 42 = 18 < 20: still may take it
  CHECK(o2 == big);
  f.a.deallocate(o2);
  f.a.deallocate(small);
  f.a.check_invariants();
}

TEST_CASE("first fit takes the lowest address, best fit the smallest block") {
  for (AllocPolicy fit : {AllocPolicy::best_fit, AllocPolicy::first_fit}) {
    Fixture f;
    AllocatorSettings s;
    s.policy = fit;
    s.large_growth = 0;
    f.a.set_settings(s);
    // One 20 MiB segment cut into: [2 hole][2 keep][1.5 hole][rest]
    void* h1 = f.a.allocate(2 * MiB);
    void* k1 = f.a.allocate(2 * MiB);
    void* h2 = f.a.allocate(1536 * KiB);
    void* k2 = f.a.allocate(2 * MiB);
    f.a.deallocate(h1);
    f.a.deallocate(h2);
    void* p = f.a.allocate(1536 * KiB);
    CHECK(p == (fit == AllocPolicy::best_fit ? h2 : h1));
    for (void* q : {k1, k2, p}) f.a.deallocate(q);
    f.a.check_invariants();
  }
}

TEST_CASE("capacity: OOM message, cache freed and retried, process stays usable") {
  Fixture f;
  f.a.set_capacity(40 * MiB);
  void* a = f.a.allocate(12 * MiB);  // its own 12 MiB segment
  void* b = f.a.allocate(20 * MiB);  // its own 20 MiB segment
  f.a.deallocate(b);                 // cached: a whole free segment
  // 22 MiB fits no cached block; a 22 MiB segment is over capacity (54 > 40)
  // until the cached 20 MiB segment is freed and the allocation retried.
  void* d = f.a.allocate(22 * MiB);
  DeviceStats s = f.a.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_raw_frees == 1);
  CHECK(s.reserved_bytes.current == 34 * MiB);
  void* c = f.a.allocate(512 * KiB);  // a 2 MiB small segment, 1.5 MiB stays cached
  f.a.check_invariants();

  std::string msg;
  try {
    f.a.allocate(30 * MiB);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
    CHECK(e.requested() == 30 * MiB);
    CHECK(e.capacity() == 40 * MiB);
  }
  MESSAGE("OOM report (capacity):\n", msg);
  CHECK(msg.find("cpu:9 out of memory: tried to allocate 30.00 MiB") != std::string::npos);
  CHECK(msg.find("capacity                 40.00 MiB") != std::string::npos);
  CHECK(msg.find("allocated                34.50 MiB") != std::string::npos);
  CHECK(msg.find("reserved but unallocated 1.50 MiB") != std::string::npos);
  CHECK(msg.find("largest free block       1.50 MiB") != std::string::npos);
  CHECK(msg.find("fragmentation            0.0%") != std::string::npos);
  CHECK(msg.find("cause: capacity") != std::string::npos);
  CHECK(msg.find("checkpointing") != std::string::npos);
  CHECK(msg.find("mixed precision") != std::string::npos);
  CHECK(msg.find("gradient accumulation") != std::string::npos);
  CHECK(msg.find("smaller batch") != std::string::npos);
  s = f.a.stats();
  CHECK(s.num_ooms == 1);
  CHECK(s.num_alloc_retries == 2);

  // Still usable: a fitting request succeeds from the cache.
  void* e = f.a.allocate(1 * MiB);
  CHECK(f.a.stats().num_raw_allocs == 4);
  for (void* p : {a, c, d, e}) f.a.deallocate(p);
  f.a.check_invariants();
}

TEST_CASE("fragmentation is told apart from capacity") {
  Fixture f;
  f.a.set_capacity(20 * MiB);
  // Fill one 20 MiB segment with 2 MiB blocks, free every other one.
  std::vector<void*> ps;
  for (int i = 0; i < 10; ++i) ps.push_back(f.a.allocate(2 * MiB));
  for (int i = 0; i < 10; i += 2) f.a.deallocate(ps[i]);
  std::string msg;
  try {
    f.a.allocate(4 * MiB);  // 10 MiB free, none of it contiguous
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  MESSAGE("OOM report (fragmentation):\n", msg);
  CHECK(msg.find("cause: fragmentation") != std::string::npos);
  CHECK(msg.find("largest free block       2.00 MiB") != std::string::npos);
  CHECK(msg.find("fragmentation            80.0%") != std::string::npos);
  CHECK(msg.find("max_split_size") != std::string::npos);
  for (int i = 1; i < 10; i += 2) f.a.deallocate(ps[i]);
  f.a.check_invariants();
}

TEST_CASE("the backend's own failure is an OOM too, after freeing the cache") {
  Fixture f;
  void* a = f.a.allocate(12 * MiB);
  f.a.deallocate(a);
  f.fake->fail_next = true;  // the first try fails, the retry after freeing the cache works
  void* b = f.a.allocate(14 * MiB);
  CHECK(f.a.stats().num_alloc_retries == 1);
  CHECK(f.a.stats().reserved_bytes.current == 14 * MiB);
  f.a.deallocate(b);

  // The real host backend: an impossible request.
  CachingAllocator host(Device("cpu:8"), std::make_unique<HostBackend>());
  try {
    host.allocate(std::size_t{1} << 60);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    std::string msg = e.what();
    CHECK(msg.find("the host backend could not provide") != std::string::npos);
    CHECK(msg.find("capacity                 none set") != std::string::npos);
  }
  void* p = host.allocate(100);
  CHECK(addr(p) % 64 == 0);
  std::memset(p, 1, 100);
  host.deallocate(p);
}

TEST_CASE("host backend: 64-byte alignment and writable memory in every pool") {
  CachingAllocator host(Device("cpu:8"), std::make_unique<HostBackend>());
  std::vector<void*> ps;
  for (std::size_t n : {std::size_t{1}, std::size_t{100}, 4096 * std::size_t{3}, 3 * MiB, 25 * MiB}) {
    void* p = host.allocate(n);
    CHECK(addr(p) % 64 == 0);
    std::memset(p, 0xab, n);
    ps.push_back(p);
  }
  for (void* p : ps) host.deallocate(p);
  host.check_invariants();
  host.empty_cache();
  CHECK(host.stats().reserved_bytes.current == 0);
}

TEST_CASE("tags: per-tag current, peak, and breakdown at the overall peak") {
  Fixture f;
  void* w = f.a.allocate(4 * MiB, 0, Tag::parameter);
  void* act1 = f.a.allocate(2 * MiB, 0, Tag::activation, "matmul");
  void* act2 = f.a.allocate(2 * MiB, 0, Tag::activation, "relu");
  f.a.deallocate(act1);
  f.a.deallocate(act2);
  void* g = f.a.allocate(1 * MiB + 512, 0, Tag::gradient);
  DeviceStats s = f.a.stats();
  auto T = [](Tag t) { return static_cast<int>(t); };
  CHECK(s.tag_bytes[T(Tag::parameter)].current == 4 * MiB);
  CHECK(s.tag_bytes[T(Tag::activation)].current == 0);
  CHECK(s.tag_bytes[T(Tag::activation)].peak == 4 * MiB);
  CHECK(s.tag_at_peak[T(Tag::activation)] == 4 * MiB);  // the peak (8 MiB) was half activations
  CHECK(s.tag_at_peak[T(Tag::parameter)] == 4 * MiB);
  CHECK(s.tag_at_peak[T(Tag::gradient)] == 0);
  CHECK(s.allocated_bytes.peak == 8 * MiB);
  f.a.reset_peak();
  s = f.a.stats();
  CHECK(s.allocated_bytes.peak == s.allocated_bytes.current);
  CHECK(s.tag_bytes[T(Tag::activation)].peak == 0);
  f.a.deallocate(w);
  f.a.deallocate(g);
  f.a.check_invariants();
}

TEST_CASE("stream-aware reuse: a block freed while another stream uses it waits for the event") {
  Fixture f;
  const StreamId s0 = 0, s1 = 7;
  void* p = f.a.allocate(3 * MiB, s0);
  f.a.record_stream(p, s1);
  f.a.record_stream(p, s1);  // recorded once
  f.a.record_stream(p, s0);  // its own stream: nothing to do
  f.a.deallocate(p);
  CHECK(f.fake->events_recorded == 1);
  DeviceStats s = f.a.stats();
  CHECK(s.allocated_bytes.current == 0);
  CHECK(s.active_bytes.current == 3 * MiB);  // still active until the event completes
  CHECK(s.num_deferred_frees == 1);
  f.a.check_invariants();

  void* q = f.a.allocate(3 * MiB, s0);  // the event is not done: p is not reused
  CHECK(q != p);
  f.a.deallocate(q);

  f.fake->done.insert(1);  // stream s1 finishes
  void* r = f.a.allocate(3 * MiB, s0);
  CHECK(r == p);  // p came back to the pool at the start of this allocate, lowest address
  CHECK(f.a.stats().active_bytes.current == 3 * MiB);
  f.a.deallocate(r);

  // Blocks are per stream: a block of s0 is not handed to s1.
  void* t = f.a.allocate(3 * MiB, s1);
  CHECK(f.a.stats().segment.current == 2);
  f.a.deallocate(t);
  f.a.check_invariants();

  // empty_cache waits for pending events before it frees segments.
  void* u = f.a.allocate(3 * MiB, s0);
  f.a.record_stream(u, s1);
  f.a.deallocate(u);
  f.a.empty_cache();
  s = f.a.stats();
  CHECK(s.active_bytes.current == 0);
  CHECK(s.reserved_bytes.current == 0);
  f.a.check_invariants();
}

TEST_CASE("global API: virtual cpu devices have their own pools and capacities") {
  Device d1("cpu:1"), d2("cpu:2");
  set_capacity(d1, 4 * MiB);
  CHECK(capacity(d1) == 4 * MiB);
  CHECK(capacity(d2) == kNoLimit);
  void* p = allocate(d1, 1000);
  // 6 MiB: a whole 2 MiB multiple, so its first (request-sized, NOTE [ Segment
  // growth ]) segment has no unsplittable remainder and allocated is exact.
  void* q = allocate(d2, 6 * MiB);
  CHECK(allocated(d1) == 1024);
  CHECK(allocated(d2) == 6 * MiB);
  CHECK(reserved(d1) == 2 * MiB);
  CHECK_THROWS_AS(allocate(d1, 5 * MiB), OutOfMemoryError);
  CHECK_THROWS_AS(deallocate(d2, p), ValueError);  // wrong device
  deallocate(d1, p);
  deallocate(d2, q);
  deallocate(d1, nullptr);
  CHECK(peak_allocated(d2) == 6 * MiB);
  reset_peak(d2);
  CHECK(peak_allocated(d2) == 0);
  empty_cache(d1);
  empty_cache(d2);
  CHECK(reserved(d1) == 0);
  CHECK(reserved(d2) == 0);
  CHECK_THROWS_AS(set_capacity_fraction(d1, 1.5), ValueError);
  set_capacity_fraction(d1, 0.5);
  CHECK(capacity(d1) > 0);
  set_capacity(d1, kNoLimit);
  CHECK_THROWS_AS(allocate(Device("cpu:300"), 1), DeviceError);
  CHECK_THROWS_AS(allocate(Device("cuda:0"), 1), DeviceError);  // no backend registered here
}

TEST_CASE("register_backend_factory plugs in a backend for a device type") {
  register_backend_factory(DeviceType::CUDA, [](Device) { return std::make_unique<SimulatedBackend>(); });
  void* p = allocate(Device("cuda:3"), 64 * MiB);
  CHECK(std::string(allocator_for(Device("cuda:3")).backend().name()) == "simulated");
  CHECK(reserved(Device("cuda:3")) == 64 * MiB);
  deallocate(Device("cuda:3"), p);
}

TEST_CASE("summary names every statistic and the tags in use") {
  Device d("cpu:5");
  void* p;
  {
    TagScope ts(Tag::activation);
    OpScope os("conv2d");
    CHECK(current_tag() == Tag::activation);
    CHECK(std::string(current_op()) == "conv2d");
    p = allocate(d, 3 * MiB);
  }
  CHECK(current_tag() == Tag::other);
  std::string s = summary(d);
  MESSAGE("\n", s);
  for (const char* want :
       {"Allocated memory", "Requested memory", "Active memory", "Reserved memory", "Non-releasable", "Allocations",
        "Segments", "activation", "3.00 MiB", "Cache hits", "Alloc retries", "OOMs", "round=512"})
    CHECK_MESSAGE(s.find(want) != std::string::npos, want);
  deallocate(d, p);
}

TEST_CASE("a block keeps its op name after the OpScope's string is gone") {
  Fixture f;
  f.a.record_history(true, 100);
  void* p;
  {
    std::string name = "temporary_op_name";
    p = f.a.allocate(1000, 0, Tag::temporary, name.c_str());
    name.assign("overwritten_text!");  // the caller's buffer changes after the scope
  }
  DeviceSnapshot s = f.a.snapshot();
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].blocks[0].op == "temporary_op_name");
  CHECK(s.events.back().op == "temporary_op_name");
  f.a.deallocate(p);
  // A capacity failure records an oom event with the caller's tag and op.
  f.a.set_capacity(4 * MiB);
  CHECK_THROWS_AS(f.a.allocate(8 * MiB, 0, Tag::workspace, "huge"), OutOfMemoryError);
  s = f.a.snapshot();
  CHECK(s.events.back().action == Action::oom);
  CHECK(s.events.back().tag == Tag::workspace);
  CHECK(s.events.back().op == "huge");
}

TEST_CASE("host segments: the bytes after a segment's end can be read (NOTE [ A readable page after each segment ])") {
  // A vector load at a segment's last float reads past its end (qemu's scalar FMAs do);
  // the page after every host segment is mapped read-only, so that cannot fault.
  memory::HostBackend host;
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{2} << 20, std::size_t{5000}}) {
    CAPTURE(bytes);
    void* raw = host.alloc(bytes);
    REQUIRE(raw != nullptr);
    auto* p = static_cast<volatile unsigned char*>(raw);
    p[bytes - 1] = 7;
    unsigned sum = 0;
    for (std::size_t i = 0; i < 64; ++i) sum += p[bytes + i];  // faulted before the tail page
    CHECK(sum == 0);
    CHECK(int(p[bytes - 1]) == 7);
    host.free(raw, bytes);
  }
}
