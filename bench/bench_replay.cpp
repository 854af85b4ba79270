// snug-bench replay TRACE [--round N --small-threshold N --small-segment N
//   --large-segment N --large-threshold N --large-round N --max-split N
//   --fit best|first --conf "k=v,..." --capacity N --device cuda:0] [--json]
//
// Replays the alloc/free events of a memory snapshot (memory::dump_snapshot)
// on a simulated device with the trace's own settings, changed by the flags,
// and reports what the allocator would have reserved.
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "core/error.h"
#include "memory/history.h"
#include "memory/replay.h"
#include "memory/settings.h"
#include "memory/stats.h"

using namespace snug;
using namespace snug::memory;

SNUG_BENCH(replay, "replay a memory trace (snapshot JSON) against other allocator settings") {
  SNUG_CHECK(args.positional.size() == 1, ValueError, "usage: snug-bench replay TRACE.json [--round N ...] [--json]");
  const std::string path = args.positional[0];
  Snapshot snap = load_snapshot(path);
  SNUG_CHECK(!snap.devices.empty(), ValueError, path, ": the snapshot has no devices");

  // The device whose events to replay: --device, else the first with events.
  const DeviceSnapshot* dev = nullptr;
  std::string want = args.get("device", "");
  for (const DeviceSnapshot& d : snap.devices)
    if (want.empty() ? (!d.events.empty() && !dev) : d.device == want) dev = &d;
  SNUG_CHECK(dev != nullptr, ValueError, path, ": no device ", want.empty() ? "with events" : "named " + want);

  AllocatorSettings s = dev->settings;
  if (args.has("conf")) s = parse_settings(args.get("conf", ""), s);
  auto size_flag = [&](const char* flag, std::size_t& field) {
    if (args.has(flag)) {
      long long v = args.get_int(flag, 0);
      SNUG_CHECK(v > 0, ValueError, "snug-bench replay: --", flag, " must be positive, got ", v);
      field = static_cast<std::size_t>(v);
    }
  };
  size_flag("round", s.round);
  size_flag("small-threshold", s.small_threshold);
  size_flag("small-segment", s.small_segment);
  size_flag("large-segment", s.large_segment);
  size_flag("large-threshold", s.large_threshold);
  size_flag("large-round", s.large_round);
  size_flag("max-split", s.max_split_size);
  if (args.has("fit")) s = parse_settings("fit=" + args.get("fit", ""), s);
  s.validate();
  std::size_t capacity = kNoLimit;
  if (args.has("capacity")) capacity = static_cast<std::size_t>(args.get_int("capacity", 0));

  ReplayResult r = replay(dev->events, s, capacity);
  if (args.json()) {
    std::printf(
        "{\"bench\":\"replay\",\"trace\":\"%s\",\"device\":\"%s\",\"settings\":\"%s\",\"events\":%zu,"
        "\"ops\":%lld,\"peak_allocated_bytes\":%lld,\"peak_reserved_bytes\":%lld,\"raw_allocs\":%lld,"
        "\"num_ooms\":%lld,\"skipped_frees\":%lld,\"ns_per_op\":%.1f}\n",
        path.c_str(), dev->device.c_str(), s.to_string().c_str(), dev->events.size(),
        static_cast<long long>(r.ops), static_cast<long long>(r.peak_allocated_bytes),
        static_cast<long long>(r.peak_reserved_bytes), static_cast<long long>(r.raw_allocs),
        static_cast<long long>(r.num_ooms), static_cast<long long>(r.skipped_frees), r.ns_per_op);
  } else {
    std::printf("trace %s (%s, %zu events)\nsettings %s\n", path.c_str(), dev->device.c_str(), dev->events.size(),
                s.to_string().c_str());
    std::printf("peak allocated %s, peak reserved %s (%.1f%% overhead), %lld raw allocs, %lld OOMs, %.1f ns/op\n",
                format_bytes(static_cast<std::size_t>(r.peak_allocated_bytes)).c_str(),
                format_bytes(static_cast<std::size_t>(r.peak_reserved_bytes)).c_str(),
                r.peak_allocated_bytes
                    ? 100.0 * static_cast<double>(r.peak_reserved_bytes - r.peak_allocated_bytes) /
                          static_cast<double>(r.peak_allocated_bytes)
                    : 0.0,
                static_cast<long long>(r.raw_allocs), static_cast<long long>(r.num_ooms), r.ns_per_op);
  }
  return 0;
}
