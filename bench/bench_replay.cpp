// SPDX-License-Identifier: MIT
// snug-bench replay TRACE [--policy P] [--round N --small-threshold N --small-segment N
//   --large-segment N --large-threshold N --large-round N --max-split N
//   --fit best|first --conf "k=v,..." --capacity N --device cuda:0] [--layout] [--json]
//
// Replays the alloc/free/step events of a memory snapshot (memory::dump_snapshot,
// or tools/torch_snapshot.py import) on a simulated device with the trace's own
// settings, changed by the flags, under any allocation policy (best_fit,
// first_fit, size_class, buddy, expandable, planned; or malloc: glibc's
// malloc/free on this machine), and reports what it would have reserved. --layout also prints the
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
           bench::choice_flag("policy", "", {"best_fit", "first_fit", "size_class", "buddy", "expandable", "planned", "malloc"},
                              "allocation policy [default: the trace's]"),
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
           bench::switch_flag("layout", "print the segments at peak allocated and where the slack is (stderr)"),
           bench::int_flag("repeats", 1, "run the trace this many times (steady_* figures: from its second step on)", 1)) {
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
  const std::string policy = args.has("policy") ? args.get("policy") : policy_name(s.policy);
  if (policy != "malloc") s.policy = parse_policy(policy);
  try {
    s.validate();
  } catch (const ValueError& e) {
    cli::fail("the allocator settings flags: ", e.what());
  }
  std::size_t capacity = kNoLimit;
  if (args.has("capacity")) capacity = static_cast<std::size_t>(args.get_int("capacity"));

  const bool layout = args.has("layout");
  if (policy == "malloc" && (layout || capacity != kNoLimit)) cli::fail("--policy malloc takes neither --layout nor --capacity");
  const int repeats = static_cast<int>(args.get_int("repeats"));
  ReplayResult r = policy == "malloc" ? replay_malloc(dev->events)
                                      : replay(dev->events, s, capacity, layout, repeats);
  if (layout) print_layout(r.at_peak, s);
  auto ratio = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  // Fragmentation: the share of the peak reservation that never held a
  // requested byte at the peak (1 - requested / reserved).
  const double frag = r.peak_reserved_bytes > 0 ? 1.0 - ratio(r.peak_requested_bytes, r.peak_reserved_bytes) : 0.0;
  const std::string settings = policy == "malloc" ? "glibc malloc" : s.to_string();
  if (args.json()) {
    std::printf(
        "{\"bench\":\"replay\",\"trace\":\"%s\",\"device\":\"%s\",\"policy\":\"%s\",\"settings\":\"%s\","
        "\"events\":%zu,\"ops\":%lld,\"peak_allocated_bytes\":%lld,\"peak_requested_bytes\":%lld,"
        "\"peak_reserved_bytes\":%lld,\"reserved_over_allocated\":%.4f,\"reserved_over_requested\":%.4f,"
        "\"fragmentation\":%.4f,\"raw_allocs\":%lld,\"steps\":%lld,\"steady_peak_reserved_bytes\":%lld,"
        "\"steady_raw_allocs\":%lld,\"num_ooms\":%lld,\"skipped_frees\":%lld,\"ns_per_op\":%.1f,"
        "\"ns_per_alloc_free\":%.1f,\"steady_ns_per_alloc_free\":%.1f,\"steady_ns_per_alloc_free_mean\":%.1f,\"steady_steps_timed\":%lld,\"planned_peak_bytes\":%zu,\"planned_hits\":%lld,\"planned_fallbacks\":%lld,\"planned_kept_out\":%lld,"
        "\"planned_held_hits\":%lld,\"planned_arena_bytes\":%zu,\"planned_lower_bound_bytes\":%zu,"
        "\"planned_replans\":%lld,\"planned_bounded_steps\":%lld,\"planned_suspended_steps\":%lld,\"planned_gave_up\":%s,\"planned_plan_ms\":%.3f}\n",
        path.c_str(), dev->device.c_str(), policy.c_str(), settings.c_str(), dev->events.size(),
        static_cast<long long>(r.ops), static_cast<long long>(r.peak_allocated_bytes),
        static_cast<long long>(r.peak_requested_bytes), static_cast<long long>(r.peak_reserved_bytes),
        ratio(r.peak_reserved_bytes, r.peak_allocated_bytes), ratio(r.peak_reserved_bytes, r.peak_requested_bytes), frag,
        static_cast<long long>(r.raw_allocs), static_cast<long long>(r.steps),
        static_cast<long long>(r.steady_peak_reserved_bytes), static_cast<long long>(r.steady_raw_allocs),
        static_cast<long long>(r.num_ooms), static_cast<long long>(r.skipped_frees), r.ns_per_op, r.ns_per_alloc_free,
        r.steady_ns_per_alloc_free, r.steady_ns_per_alloc_free_mean, static_cast<long long>(r.steady_steps_timed),
        r.planned.planned_peak,
        static_cast<long long>(r.planned.hits), static_cast<long long>(r.planned.fallbacks),
        static_cast<long long>(r.planned.kept_out), static_cast<long long>(r.planned.held_hits), r.planned.arena_bytes,
        r.planned.lower_bound, static_cast<long long>(r.planned.replans),
        static_cast<long long>(r.planned.bounded_steps), static_cast<long long>(r.planned.suspended_steps),
        r.planned.gave_up ? "true" : "false", r.planned.plan_ms);
  } else {
    std::printf("trace %s (%s, %zu events)\npolicy %s, settings %s\n", path.c_str(), dev->device.c_str(),
                dev->events.size(), policy.c_str(), settings.c_str());
    std::printf("peak requested %s, allocated %s, reserved %s (%.3fx requested, fragmentation %.1f%%)\n",
                format_bytes(static_cast<std::size_t>(r.peak_requested_bytes)).c_str(),
                format_bytes(static_cast<std::size_t>(r.peak_allocated_bytes)).c_str(),
                format_bytes(static_cast<std::size_t>(r.peak_reserved_bytes)).c_str(),
                ratio(r.peak_reserved_bytes, r.peak_requested_bytes), 100.0 * frag);
    std::printf("%lld device allocations (%lld after the first step), %lld OOMs, %.1f ns per allocate+free "
                "(after the first step: %.1f the median step, %.1f the mean)\n",
                static_cast<long long>(r.raw_allocs), static_cast<long long>(r.steady_raw_allocs),
                static_cast<long long>(r.num_ooms), r.ns_per_alloc_free, r.steady_ns_per_alloc_free,
                r.steady_ns_per_alloc_free_mean);
    if (s.policy == AllocPolicy::planned && policy != "malloc")
      std::printf("planned arena %s (lower bound %s), planned peak %s: %lld hits, %lld fallbacks, %lld left to best fit, "
                  "%lld replans, %lld bounded steps, %.2f ms planning\n",
                  format_bytes(r.planned.arena_bytes).c_str(), format_bytes(r.planned.lower_bound).c_str(),
                  format_bytes(r.planned.planned_peak).c_str(),
                  static_cast<long long>(r.planned.hits), static_cast<long long>(r.planned.fallbacks),
                  static_cast<long long>(r.planned.kept_out), static_cast<long long>(r.planned.replans),
                  static_cast<long long>(r.planned.bounded_steps), r.planned.plan_ms);
  }
  return 0;
}
