// SPDX-License-Identifier: MIT
// snug-bench replay TRACE [--round N --small-threshold N --small-segment N
//   --large-segment N --large-threshold N --large-round N --max-split N
//   --fit best|first --conf "k=v,..." --capacity N --device cuda:0] [--layout] [--json]
//
// Replays the alloc/free events of a memory snapshot (memory::dump_snapshot)
// on a simulated device with the trace's own settings, changed by the flags,
// and reports what the allocator would have reserved. --layout also prints the
// segments at the peak of allocated bytes and where the reserved-but-unallocated
// bytes are (free tails, free holes, unsplit remainders, request rounding).
#include <cstdio>
#include <string>

#include <snug/base/error.h>
#include <snug/memory/history.h>
#include <snug/memory/replay.h>
#include <snug/memory/settings.h>
#include <snug/memory/stats.h>
#include "bench/bench.h"

using namespace snug;
using namespace snug::memory;

namespace {

// Prints the segments of `d` (one line each) and a slack summary, to stderr so
// --json output stays one JSON line on stdout.
void print_layout(const DeviceSnapshot& d, const AllocatorSettings& s) {
  auto mib = [](std::size_t v) { return static_cast<double>(v) / 1048576.0; };
  std::size_t reserved = 0, allocated = 0, requested = 0, rounding = 0, unsplit = 0, tails = 0, holes = 0, whole = 0,
              small_res = 0, small_alloc = 0, large_res = 0, large_alloc = 0;
  std::fprintf(stderr, "layout at peak allocated (%zu segments):\n", d.segments.size());
  for (const SegmentInfo& seg : d.segments) {
    std::size_t alloc = 0;
    std::string blocks;
    for (std::size_t i = 0; i < seg.blocks.size(); ++i) {
      const BlockInfo& b = seg.blocks[i];
      char buf[64];
      if (b.state == BlockState::free) {
        std::snprintf(buf, sizeof buf, " [free %.2f]", mib(b.size));
        if (seg.blocks.size() == 1)
          whole += b.size;
        else if (i + 1 == seg.blocks.size())
          tails += b.size;
        else
          holes += b.size;
      } else {
        std::snprintf(buf, sizeof buf, " %.2f", mib(b.size));
        alloc += b.size;
        requested += b.requested;
        const std::size_t r = b.requested < s.round ? s.round : (b.requested + s.round - 1) / s.round * s.round;
        rounding += r - b.requested;
        unsplit += b.size - r;
      }
      if (blocks.size() < 400) blocks += buf;
    }
    reserved += seg.size;
    allocated += alloc;
    (seg.small_pool ? small_res : large_res) += seg.size;
    (seg.small_pool ? small_alloc : large_alloc) += alloc;
    std::fprintf(stderr, "  %s %7.2f MiB, %7.2f allocated, %3zu blocks:%s\n", seg.small_pool ? "small" : "large",
                 mib(seg.size), mib(alloc), seg.blocks.size(), blocks.c_str());
  }
  std::fprintf(stderr,
               "reserved %.2f MiB (small pool %.2f, large %.2f), allocated %.2f MiB (small %.2f, large %.2f), "
               "requested %.2f MiB\n"
               "reserved - requested = %.2f MiB: free tails %.2f, free holes %.2f, whole free segments %.2f, "
               "unsplit remainders %.2f, rounding %.2f\n",
               mib(reserved), mib(small_res), mib(large_res), mib(allocated), mib(small_alloc), mib(large_alloc),
               mib(requested), mib(reserved - requested), mib(tails), mib(holes), mib(whole), mib(unsplit),
               mib(rounding));
}

}  // namespace

namespace {
// The allocator-settings flags; each replaces the trace's own value.
bench::Flag size_setting(const char* name, const char* help) {
  return bench::int_flag_unset(name, str(help, " in bytes [default: the trace's]"));
}
}  // namespace

SNUG_BENCH(replay, "replay a memory trace (snapshot JSON) against other allocator settings",
           bench::positional("trace", "the snapshot JSON (memory::dump_snapshot, snug-bench trace_gpt)"),
           size_setting("round", "request rounding"), size_setting("small-threshold", "largest small-pool request"),
           size_setting("small-segment", "small-pool segment size"),
           size_setting("large-segment", "large-pool segment size"),
           size_setting("large-threshold", "requests above this get a segment of their own"),
           size_setting("large-round", "rounding of large segments"),
           size_setting("max-split", "blocks above this are not split"),
           bench::choice_flag("fit", "", {"best", "first"}, "block choice [default: the trace's]"),
           bench::text_flag("conf", "", "settings as SNUG_ALLOC_CONF writes them (\"k=v,...\"), before the flags above",
                            "CONF"),
           bench::bytes_flag("capacity", "", "device capacity, e.g. 2GiB [default: no limit]"),
           bench::text_flag("device", "", "the trace's device to replay [default: the first with events]", "DEVICE"),
           bench::switch_flag("layout", "print the segments at peak allocated and where the slack is (stderr)")) {
  const std::string path = args.get("trace");
  Snapshot snap = load_snapshot(path);
  SNUG_CHECK(!snap.devices.empty(), ValueError, path, ": the snapshot has no devices");

  // The device whose events to replay: --device, else the first with events.
  const DeviceSnapshot* dev = nullptr;
  std::string want = args.get("device");
  for (const DeviceSnapshot& d : snap.devices)
    if (want.empty() ? (!d.events.empty() && !dev) : d.device == want) dev = &d;
  SNUG_CHECK(dev != nullptr, ValueError, path, ": no device ", want.empty() ? "with events" : "named " + want);

  AllocatorSettings s = dev->settings;
  if (args.has("conf")) {
    try {
      s = parse_settings(args.get("conf"), s);
    } catch (const ValueError& e) {
      cli::fail("--conf: ", e.what());
    }
  }
  auto size_flag = [&](const char* flag, std::size_t& field) {
    if (args.has(flag)) field = static_cast<std::size_t>(args.get_int(flag));
  };
  size_flag("round", s.round);
  size_flag("small-threshold", s.small_threshold);
  size_flag("small-segment", s.small_segment);
  size_flag("large-segment", s.large_segment);
  size_flag("large-threshold", s.large_threshold);
  size_flag("large-round", s.large_round);
  size_flag("max-split", s.max_split_size);
  if (args.has("fit")) s = parse_settings("fit=" + args.get("fit"), s);
  try {
    s.validate();
  } catch (const ValueError& e) {
    cli::fail("the allocator settings flags: ", e.what());
  }
  std::size_t capacity = kNoLimit;
  if (args.has("capacity")) capacity = static_cast<std::size_t>(args.get_int("capacity"));

  const bool layout = args.has("layout");
  ReplayResult r = replay(dev->events, s, capacity, layout);
  if (layout) print_layout(r.at_peak, s);
  if (args.json()) {
    std::printf(
        "{\"bench\":\"replay\",\"trace\":\"%s\",\"device\":\"%s\",\"settings\":\"%s\",\"events\":%zu,"
        "\"ops\":%lld,\"peak_allocated_bytes\":%lld,\"peak_reserved_bytes\":%lld,\"raw_allocs\":%lld,"
        "\"num_ooms\":%lld,\"skipped_frees\":%lld,\"ns_per_op\":%.1f}\n",
        path.c_str(), dev->device.c_str(), s.to_string().c_str(), dev->events.size(), static_cast<long long>(r.ops),
        static_cast<long long>(r.peak_allocated_bytes), static_cast<long long>(r.peak_reserved_bytes),
        static_cast<long long>(r.raw_allocs), static_cast<long long>(r.num_ooms),
        static_cast<long long>(r.skipped_frees), r.ns_per_op);
  } else {
    std::printf("trace %s (%s, %zu events)\nsettings %s\n", path.c_str(), dev->device.c_str(), dev->events.size(),
                s.to_string().c_str());
    std::printf("peak allocated %s, peak reserved %s (%.1f%% overhead), %lld raw allocs, %lld OOMs, %.1f ns/op\n",
                format_bytes(static_cast<std::size_t>(r.peak_allocated_bytes)).c_str(),
                format_bytes(static_cast<std::size_t>(r.peak_reserved_bytes)).c_str(),
                r.peak_allocated_bytes ? 100.0 * static_cast<double>(r.peak_reserved_bytes - r.peak_allocated_bytes) /
                                             static_cast<double>(r.peak_allocated_bytes)
                                       : 0.0,
                static_cast<long long>(r.raw_allocs), static_cast<long long>(r.num_ooms), r.ns_per_op);
  }
  return 0;
}
