// SPDX-License-Identifier: MIT
// memory/pinned.h: the pinned host pool exists only once a backend is
// registered (the CUDA plugin registers cudaHostAlloc's when it finds a GPU),
// is a caching pool (a freed block comes back), and records streams. A host
// backend stands in for the page-locked one, so this runs without a GPU.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>

#include <snug/memory/pinned.h>
#include <snug/memory/raw_backend.h>

using namespace snug;
using namespace snug::memory;

namespace {

std::atomic<int> g_made{0};

// Host memory that counts how often the pool asked for a backend.
std::unique_ptr<RawBackend> make_counted() {
  ++g_made;
  return std::make_unique<HostBackend>();
}

}  // namespace

TEST_CASE("pinned memory: none until a backend is registered, then a caching pool over it") {
  // This process asks for no GPU, so nothing has registered a backend yet.
  REQUIRE_FALSE(pinned_available());
  CHECK_THROWS_AS(pinned_allocate(64), DeviceError);
  pinned_free(nullptr);  // a no-op either way

  register_pinned_backend(&make_counted);
  CHECK(pinned_available());
  CHECK(g_made == 0);  // the pool is made on first use
  void* p = pinned_allocate(4096);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 4096);  // host-accessible
  CHECK(g_made == 1);
  pinned_free(p);
  void* q = pinned_allocate(4096);
  CHECK(q == p);  // the freed block came back: a caching pool
  pinned_record_stream(q, 0);
  pinned_free(q);
  register_pinned_backend([] { return std::unique_ptr<RawBackend>(); });  // a second one is ignored
  void* r = pinned_allocate(64);
  CHECK(r != nullptr);
  pinned_free(r);
  CHECK(g_made == 1);
}
