// SPDX-License-Identifier: MIT
// AllocatorSettings: validation names the bad setting; the settings string
// (SNUG_ALLOC_CONF) parses, round-trips and rejects nonsense clearly.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/settings.h>

using namespace snug;
using namespace snug::memory;

namespace {

// The message of the ValueError that f throws ("" if none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("defaults are PyTorch's and valid") {
  AllocatorSettings s;
  CHECK_NOTHROW(s.validate());
  CHECK(s.round == 512);
  CHECK(s.small_threshold == 1u << 20);
  CHECK(s.small_segment == 2u << 20);
  CHECK(s.large_segment == 20u << 20);
  CHECK(s.large_threshold == 10u << 20);
  CHECK(s.large_round == 2u << 20);
  CHECK(s.large_growth == 16);  // snug's own (0 is PyTorch's fixed kLargeBuffer)
  CHECK(s.max_split_size == kNoLimit);
  CHECK(s.policy == AllocPolicy::best_fit);
}

TEST_CASE("parse_settings reads every key, with size suffixes") {
  AllocatorSettings s = parse_settings(
      "round=1024, small_threshold=512K,small_segment=4MiB,large_segment=64M,large_threshold=16777216,"
      "large_round=4M,max_split_size=1G,max_split_tolerance=8MiB,fit=first,");
  CHECK(s.round == 1024);
  CHECK(s.small_threshold == 512 * 1024);
  CHECK(s.small_segment == 4u << 20);
  CHECK(s.large_segment == 64u << 20);
  CHECK(s.large_threshold == 16u << 20);
  CHECK(s.large_round == 4u << 20);
  CHECK(s.max_split_size == std::size_t{1} << 30);
  CHECK(s.max_split_tolerance == 8u << 20);
  CHECK(s.policy == AllocPolicy::first_fit);
  CHECK(parse_settings(s.to_string()) == s);  // round trip
  CHECK(parse_settings("max_split_size=none").max_split_size == kNoLimit);
  CHECK(parse_settings("") == AllocatorSettings{});
  // Found by fuzzing (tests/fuzz/corpus/fuzz_alloc_settings/regress_*): a count that
  // prints with 20 digits must read back.
  AllocatorSettings big = parse_settings("max_split_size=9992522222222M");
  CHECK(big.max_split_size == 9992522222222ull << 20);
  CHECK(parse_settings(big.to_string()) == big);
  CHECK(parse_settings("max_split_size=18446744073709551614").max_split_size == 18446744073709551614ull);
}

TEST_CASE("bad strings are rejected and the message names the setting") {
  CHECK(contains(error_of([] { parse_settings("colour=blue"); }), "unknown setting \"colour\""));
  CHECK(contains(error_of([] { parse_settings("round"); }), "expected key=value"));
  CHECK(contains(error_of([] { parse_settings("round=abc"); }), "round: expected a byte count"));
  CHECK(contains(error_of([] { parse_settings("round=512X"); }), "unknown size suffix \"X\""));
  CHECK(contains(error_of([] { parse_settings("fit=worst"); }), "fit: expected best or first"));
  CHECK(contains(error_of([] { parse_settings("round=100"); }), "round: must be a power of two >= 64"));
  CHECK(contains(error_of([] { parse_settings("round=32"); }), "round: must be a power of two"));
  CHECK(contains(error_of([] { parse_settings("small_threshold=1000"); }), "small_threshold"));
  CHECK(contains(error_of([] { parse_settings("small_segment=512K"); }), "small_segment"));
  CHECK(contains(error_of([] { parse_settings("large_segment=1M"); }), "large_segment"));
  CHECK(contains(error_of([] { parse_settings("large_threshold=30M"); }), "large_threshold"));
  CHECK(contains(error_of([] { parse_settings("large_round=0"); }), "large_round"));
  CHECK(contains(error_of([] { parse_settings("large_growth=2000"); }), "large_growth"));
  CHECK(contains(error_of([] { parse_settings("large_growth=x"); }), "large_growth"));
  CHECK(parse_settings("large_growth=0").large_growth == 0);
  CHECK(parse_settings("large_growth=4").large_growth == 4);
  CHECK(contains(error_of([] { parse_settings("max_split_size=8M"); }), "max_split_size: must be > large_segment"));
  CHECK(contains(error_of([] { parse_settings("max_split_size=99999999999999999999999"); }), "max_split_size"));
  CHECK(contains(error_of([] { parse_settings("large_round=20000000000000G"); }), "too large"));
}

TEST_CASE("validate() is applied by the allocator too") {
  AllocatorSettings bad;
  bad.large_threshold = 100;
  CHECK(contains(error_of([&] { CachingAllocator a(Device("cpu:40"), std::make_unique<SimulatedBackend>(), bad); }),
                 "large_threshold"));
  CachingAllocator a(Device("cpu:40"), std::make_unique<SimulatedBackend>());
  CHECK(contains(error_of([&] { a.set_settings(bad); }), "large_threshold"));
  CHECK(a.settings() == AllocatorSettings{});
}

TEST_CASE("SNUG_ALLOC_CONF is read, and a bad one names the variable") {
  ::setenv("SNUG_ALLOC_CONF", "fit=first,max_split_size=200MiB", 1);
  AllocatorSettings s = settings_from_env();
  CHECK(s.policy == AllocPolicy::first_fit);
  CHECK(s.max_split_size == 200u << 20);
  ::setenv("SNUG_ALLOC_CONF", "round=3", 1);
  std::string msg = error_of([] { settings_from_env(); });
  CHECK(contains(msg, "SNUG_ALLOC_CONF=\"round=3\""));
  CHECK(contains(msg, "round: must be a power of two"));
  ::unsetenv("SNUG_ALLOC_CONF");
  CHECK(settings_from_env() == AllocatorSettings{});
}

TEST_CASE("settings change behaviour: a coarser round and smaller small pool") {
  CachingAllocator a(Device("cpu:41"), std::make_unique<SimulatedBackend>(),
                     parse_settings("round=4K,small_threshold=64K,small_segment=256K"));
  void* p = a.allocate(100);
  CHECK(a.block_size(p) == 4096);
  CHECK(a.stats().reserved_bytes.current == 256 * 1024);
  void* q = a.allocate(65 * 1024);  // over the small threshold: large pool, first segment
  // The empty large pool's first segment is the request rounded up to
  // large_round (NOTE [ Segment growth ]); large_growth=0 gives large_segment.
  CHECK(a.stats().reserved_bytes.current == 256 * 1024 + (2u << 20));
  CachingAllocator fixed(Device("cpu:42"), std::make_unique<SimulatedBackend>(), parse_settings("large_growth=0"));
  void* r = fixed.allocate(2u << 20);
  CHECK(fixed.stats().reserved_bytes.current == (20u << 20));
  fixed.deallocate(r);
  a.deallocate(p);
  a.deallocate(q);
  a.check_invariants();
}
