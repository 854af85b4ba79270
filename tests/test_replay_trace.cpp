// SPDX-License-Identifier: MIT
// The memory issue's target on the real recording: replaying
// bench/traces/wgpt_step.json (two W-GPT training steps, recorded with
// `snug-bench trace_gpt --steps 2`) with default settings must reserve at most
// 1.10x the peak of allocated bytes. See docs/memory.md, "Replay".
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include <snug/memory/history.h>
#include <snug/memory/replay.h>
#include <snug/memory/settings.h>

using namespace snug::memory;

namespace {

std::vector<TraceEntry> wgpt_events() {
  const char* src = std::getenv("SNUG_SOURCE_DIR");
  std::string path = std::string(src ? src : ".") + "/bench/traces/wgpt_step.json";
  Snapshot snap = load_snapshot(path);
  REQUIRE(snap.devices.size() == 1);
  REQUIRE(snap.devices[0].events.size() > 1000);
  return snap.devices[0].events;
}

double ratio(const ReplayResult& r) {
  return static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_allocated_bytes);
}

}  // namespace

TEST_CASE("wgpt_step.json replays within 1.10x of peak allocated with default settings") {
  auto ev = wgpt_events();
  ReplayResult r = replay(ev, AllocatorSettings{});
  CHECK(r.num_ooms == 0);
  CHECK(r.skipped_frees == 0);
  CHECK(r.stats.allocated_bytes.current == 0);
  REQUIRE(r.peak_allocated_bytes > 0);
  INFO("peak allocated ", r.peak_allocated_bytes, ", peak reserved ", r.peak_reserved_bytes, ", ratio ", ratio(r));
  CHECK(ratio(r) <= 1.10);
  CHECK(r.peak_reserved_bytes >= r.peak_allocated_bytes);
}

TEST_CASE("wgpt_step.json: fixed 20 MiB segments (PyTorch's rule) reserve more") {
  auto ev = wgpt_events();
  ReplayResult grow = replay(ev, AllocatorSettings{});
  ReplayResult fixed = replay(ev, parse_settings("large_growth=0"));
  CHECK(fixed.peak_reserved_bytes > grow.peak_reserved_bytes);
  // Growth leaves some 3 MiB requests in 4 MiB blocks (a 1 MiB remainder is
  // not split), which raises peak allocated a little; the target holds even
  // against the fixed-segment replay's (smaller) peak allocated.
  CHECK(grow.peak_allocated_bytes >= fixed.peak_allocated_bytes);
  CHECK(static_cast<double>(grow.peak_reserved_bytes) / static_cast<double>(fixed.peak_allocated_bytes) <= 1.10);
}

TEST_CASE("snapshot_at_peak captures the layout at the peak of allocated bytes") {
  auto ev = wgpt_events();
  ReplayResult r = replay(ev, AllocatorSettings{}, kNoLimit, /*snapshot_at_peak=*/true);
  REQUIRE(!r.at_peak.segments.empty());
  std::size_t allocated = 0, reserved = 0;
  for (const SegmentInfo& s : r.at_peak.segments) {
    reserved += s.size;
    for (const BlockInfo& b : s.blocks)
      if (b.state == BlockState::allocated) allocated += b.size;
  }
  CHECK(static_cast<int64_t>(allocated) == r.peak_allocated_bytes);
  CHECK(static_cast<int64_t>(reserved) <= r.peak_reserved_bytes);
  CHECK(r.at_peak.stats.allocated_bytes.current == r.peak_allocated_bytes);
}

TEST_CASE("a replay that runs out of memory counts each refused allocation once and skips its free") {
  // Three 4 MiB blocks live together on an 8 MiB device: the third is
  // refused. Each pass then frees the two that exist; the refused one's free
  // is no call. Over three passes: 3 refusals, 2 x (2 allocations + 2 frees) a pass.
  constexpr std::size_t MiB = std::size_t{1} << 20;
  std::vector<TraceEntry> ev;
  for (std::uintptr_t a : {0x1000u, 0x2000u, 0x3000u})
    ev.push_back(TraceEntry{Action::alloc, 0, a, 4 * MiB, 4 * MiB, 0, Tag::activation, ""});
  for (std::uintptr_t a : {0x1000u, 0x2000u, 0x3000u})
    ev.push_back(TraceEntry{Action::free, 0, a, 4 * MiB, 4 * MiB, 0, Tag::activation, ""});
  ReplayResult r = replay(ev, AllocatorSettings{}, 8 * MiB, false, 3);
  CHECK(r.num_ooms == 3);
  CHECK(r.stats.num_ooms == 3);  // the allocator was asked once for each
  CHECK(r.ops == 3 * 4);
  CHECK(r.stats.allocated_bytes.current == 0);
  CHECK(r.peak_allocated_bytes == 8 * MiB);
}
