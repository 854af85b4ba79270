// SPDX-License-Identifier: MIT
// examples/alloc_lab: every allocation policy over every shipped allocator
// trace (bench/traces), replayed on a simulated device, as a table and a
// chart (docs/memory.md, "The allocator lab").
//
//   alloc_lab [--traces DIR] [--policies best_fit,...,malloc] [--repeats 20]
//             [--chart lab.png] [--timelines DIR] [--json]
//
// For each trace and policy: peak reserved over peak requested (what the
// trace asked for, the same under every policy: 1.0 is no waste at all),
// device allocations, and the ns per allocate+free once the first step has
// shaped the pool (the trace replayed --repeats times in a row, timed from
// its second step on). `malloc` is glibc's malloc/free on this machine, the
// baseline (the median of a quarter as many replays: it is slow).
// --timelines DIR writes, for the variable-length trace, the replays of its
// worst and best policy with their histories; tools/memory_timeline.py draws
// them side by side:
//   python3 tools/memory_timeline.py DIR/varlen_worst.json DIR/varlen_best.json -o varlen.html
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/memory/history.h>
#include <snug/memory/replay.h>
#include <snug/memory/settings.h>

#include "common/cli.h"
#include "common/picture.h"

using namespace snug;
using namespace snug::memory;
namespace fs = std::filesystem;

namespace {

// One trace: a device's events in a snapshot file (a pipeline's file has one per stage).
struct Trace {
  std::string name;  // the file's stem, and ":device" when the file has several
  std::vector<TraceEntry> events;
  AllocatorSettings settings;
};

struct Row {
  std::string trace, policy;
  int64_t requested = 0, reserved = 0, raw_allocs = 0, steady_raw_allocs = 0, fallbacks = 0;
  double ratio = 0, ns = 0;
};

std::vector<Trace> load_traces(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  SNUG_CHECK(!files.empty(), ValueError, "alloc_lab: no .json trace in ", dir);
  std::vector<Trace> out;
  for (const fs::path& f : files) {
    Snapshot s = load_snapshot(f.string());
    std::size_t with_events = 0;
    for (const DeviceSnapshot& d : s.devices) with_events += d.events.empty() ? 0 : 1;
    for (DeviceSnapshot& d : s.devices) {
      if (d.events.empty()) continue;
      out.push_back(Trace{f.stem().string() + (with_events > 1 ? ":" + d.device : ""), std::move(d.events), d.settings});
    }
  }
  return out;
}

// The trace's settings under `policy`: a policy name, or planned:BASE for
// the planned arena over another base policy.
AllocatorSettings settings_for(const Trace& t, const std::string& policy) {
  AllocatorSettings s = t.settings;
  const std::size_t colon = policy.find(':');
  s.policy = parse_policy(policy.substr(0, colon));
  if (colon != std::string::npos) {
    SNUG_CHECK(s.policy == AllocPolicy::planned, ValueError, "alloc_lab: \"", policy,
               "\": only planned takes a base policy (planned:expandable)");
    s.planned_base = parse_policy(policy.substr(colon + 1));
  }
  s.oom_snapshot.clear();
  s.validate();
  return s;
}

Row run(const Trace& t, const std::string& policy, int repeats) {
  Row row{t.name, policy};
  ReplayResult r;
  if (policy == "malloc") {
    std::vector<double> ns;
    for (int i = 0; i < std::max(1, repeats / 4); ++i) {  // malloc is slow; fewer runs give as steady a median
      r = replay_malloc(t.events);
      ns.push_back(r.ns_per_alloc_free);
    }
    std::sort(ns.begin(), ns.end());
    row.ns = ns[ns.size() / 2];
  } else {
    r = replay(t.events, settings_for(t, policy), ReplayOptions{.repeats = repeats});
    row.ns = r.steady_ns_per_alloc_free;
    row.fallbacks = r.planned.fallbacks;
  }
  row.requested = r.peak_requested_bytes;
  row.reserved = r.peak_reserved_bytes;
  row.ratio = r.peak_requested_bytes > 0 ? double(r.peak_reserved_bytes) / double(r.peak_requested_bytes) : 0;
  row.raw_allocs = r.raw_allocs;
  row.steady_raw_allocs = r.steady_raw_allocs;
  return row;
}

// Two charts, one above the other: reserved / requested, and ns per allocate+free.
void write_chart(const std::vector<Row>& rows, const std::vector<std::string>& traces,
                 const std::vector<std::string>& policies, const std::string& path) {
  picture::BarChart ratio, time;
  ratio.title = "peak reserved / peak requested (1.0: no waste)";
  ratio.y_label = "ratio";
  ratio.y_min = 1.0;
  ratio.value_format = "%.2f";
  time.title = "ns per allocate+free (after the first step)";
  time.y_label = "ns";
  time.value_format = "%.0f";
  for (auto* c : {&ratio, &time}) {
    c->categories = traces;
    c->series = policies;
    c->values.assign(policies.size(), std::vector<double>(traces.size(), NAN));
  }
  for (const Row& r : rows) {
    const auto p = std::size_t(std::find(policies.begin(), policies.end(), r.policy) - policies.begin());
    const auto t = std::size_t(std::find(traces.begin(), traces.end(), r.trace) - traces.begin());
    ratio.values[p][t] = r.ratio;
    time.values[p][t] = r.ns;
  }
  const int w = std::max(1100, 90 + int(traces.size() * (policies.size() * 16 + 30)));
  picture::Image img(w, 1000);
  picture::draw_bar_chart(img, 0, 0, w, 500, ratio);
  picture::draw_bar_chart(img, 0, 500, w, 500, time);
  picture::write_png(img, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"examples/alloc_lab: every allocation policy over every shipped trace (docs/memory.md)", "alloc_lab"};
  cli::init(app);
  std::string dir = SNUG_SOURCE_DIR "/bench/traces", chart, timelines;
  std::string policies_text = "best_fit,first_fit,size_class,buddy,expandable,planned,planned:expandable,malloc";
  int64_t repeats = 20;
  bool json = false;
  app.add_option("--traces", dir, "a folder of snapshot JSONs (each device with events is a trace)")
      ->capture_default_str();
  app.add_option("--policies", policies_text,
                 "comma-separated policies (planned:expandable: planned with planned_base=expandable; malloc: glibc's, "
                 "the baseline)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "replays of each trace per policy (timing: their median)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--chart", chart, "write the ratios and timings as a PNG chart")->type_name("FILE.png");
  app.add_option("--timelines", timelines,
                 "write the variable-length trace's worst and best policy replays (with history) here")
      ->type_name("DIR");
  app.add_flag("--json", json, "one JSON line per trace and policy on stdout");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    std::vector<std::string> policies;
    for (std::size_t a = 0; a <= policies_text.size();) {
      const std::size_t b = std::min(policies_text.find(',', a), policies_text.size());
      const std::string p = policies_text.substr(a, b - a);
      if (p != "malloc") settings_for(Trace{}, p);  // a clear error for a name that is not a policy
      policies.push_back(p);
      a = b + 1;
    }
    const std::vector<Trace> traces = load_traces(dir);
    std::vector<Row> rows;
    std::vector<std::string> names;
    for (const Trace& t : traces) {
      names.push_back(t.name);
      for (const std::string& p : policies) rows.push_back(run(t, p, int(repeats)));
    }

    if (json) {
      for (const Row& r : rows)
        std::printf("{\"program\":\"alloc_lab\",\"trace\":\"%s\",\"policy\":\"%s\",\"peak_requested_bytes\":%lld,"
                    "\"peak_reserved_bytes\":%lld,\"reserved_over_requested\":%.4f,\"raw_allocs\":%lld,"
                    "\"steady_raw_allocs\":%lld,\"ns_per_alloc_free\":%.1f,\"planned_fallbacks\":%lld}\n",
                    r.trace.c_str(), r.policy.c_str(), (long long)r.requested, (long long)r.reserved, r.ratio,
                    (long long)r.raw_allocs, (long long)r.steady_raw_allocs, r.ns, (long long)r.fallbacks);
    } else {
      std::printf("%-28s %-11s %10s %10s %8s %7s %7s %8s\n", "trace", "policy", "requested", "reserved", "res/req",
                  "allocs", "later", "ns/pair");
      for (const Row& r : rows)
        std::printf("%-28s %-11s %9.1fM %9.1fM %8.3f %7lld %7lld %8.0f\n", r.trace.c_str(), r.policy.c_str(),
                    double(r.requested) / 1048576.0, double(r.reserved) / 1048576.0, r.ratio, (long long)r.raw_allocs,
                    (long long)r.steady_raw_allocs, r.ns);
      std::printf("(res/req: peak reserved / peak requested; allocs: device allocations, later: after the first "
                  "step; ns/pair: per allocate+free after the first step, over %lld replays)\n",
                  (long long)repeats);
    }
    if (!chart.empty()) write_chart(rows, names, policies, chart);

    if (!timelines.empty()) {
      // The variable-length trace: the policies with the highest and lowest ratio, replayed with history.
      const Trace* varlen = nullptr;
      for (const Trace& t : traces)
        if (t.name.find("varlen") != std::string::npos) varlen = &t;
      SNUG_CHECK(varlen != nullptr, ValueError, "alloc_lab --timelines: no trace whose name contains \"varlen\" in ",
                 dir);
      const Row* worst = nullptr;
      const Row* best = nullptr;
      for (const Row& r : rows) {
        if (r.trace != varlen->name || r.policy == "malloc") continue;  // malloc keeps no history
        if (!worst || r.ratio > worst->ratio) worst = &r;
        if (!best || r.ratio < best->ratio) best = &r;
      }
      SNUG_CHECK(worst != nullptr, ValueError, "alloc_lab --timelines: no snug policy among --policies");
      fs::create_directories(timelines);
      for (auto [row, file] : {std::pair{worst, "varlen_worst.json"}, std::pair{best, "varlen_best.json"}}) {
        Snapshot snap;
        snap.devices.push_back(
            replay(varlen->events, settings_for(*varlen, row->policy), ReplayOptions{.record_history = true}).history);
        write_snapshot(snap, (fs::path(timelines) / file).string());
      }
      std::fprintf(stderr, "%s: worst %s (%.3f), best %s (%.3f); draw them with\n"
                   "  python3 tools/memory_timeline.py %s/varlen_worst.json %s/varlen_best.json --titles %s,%s -o varlen.html\n",
                   varlen->name.c_str(), worst->policy.c_str(), worst->ratio, best->policy.c_str(), best->ratio,
                   timelines.c_str(), timelines.c_str(), worst->policy.c_str(), best->policy.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "alloc_lab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
