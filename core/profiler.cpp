// SPDX-License-Identifier: MIT
#include <snug/core/profiler.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>

namespace snug::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

struct State {
  std::mutex mu;
  std::vector<Event> events;
  std::chrono::steady_clock::time_point t0;
  uint64_t generation = 0;  // bumps with each Profile, so thread numbers restart
  uint32_t next_thread = 0;
};
State& state() {
  static State* s = new State;  // never destroyed: ops may run during static destruction
  return *s;
}

thread_local int t_open_ops = 0;  // ops open on this thread (only the outermost records)
thread_local uint64_t t_generation = 0;
thread_local uint32_t t_thread = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - state().t0).count();
}

void push(Event e) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!detail::g_enabled.load(std::memory_order_relaxed)) return;  // stopped while the event ran
  if (t_generation != s.generation) {
    t_generation = s.generation;
    t_thread = s.next_thread++;
  }
  e.thread = t_thread;
  s.events.push_back(std::move(e));
}

std::string json_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

struct Row {
  std::string name;
  int64_t calls = 0, ns = 0;
  uint64_t bytes = 0;
  double flops = 0;
};

// Rows of one kind, merged by name (and device when more than one is seen).
std::vector<Row> rows_of(const std::vector<Event>& events, EventKind kind, int64_t* total_ns) {
  bool many_devices = false;
  for (const Event& e : events)
    if (e.kind == kind && !(e.device == events.front().device)) many_devices = true;
  std::map<std::string, Row> by;
  *total_ns = 0;
  for (const Event& e : events) {
    if (e.kind != kind) continue;
    std::string key = many_devices ? e.name + " [" + e.device.str() + "]" : e.name;
    Row& r = by[key];
    r.name = key;
    r.calls += 1;
    r.ns += e.dur_ns;
    r.bytes += e.bytes;
    r.flops += e.flops;
    *total_ns += e.dur_ns;
  }
  std::vector<Row> rows;
  for (auto& [k, r] : by) rows.push_back(r);
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ns > b.ns; });
  return rows;
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

Profile::Profile() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  SNUG_CHECK(!detail::g_enabled.load(), ValueError,
             "profiler::Profile: another Profile is already recording; stop it first (one at a time)");
  s.events.clear();
  s.generation += 1;
  s.next_thread = 0;
  s.t0 = std::chrono::steady_clock::now();
  detail::g_enabled.store(true);
}

Profile::~Profile() { stop(); }

void Profile::stop() {
  if (stopped_) return;
  stopped_ = true;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  detail::g_enabled.store(false);
}

std::vector<Event> Profile::events() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.events;
}

std::string Profile::summary(size_t top) const {
  std::vector<Event> ev = events();
  std::ostringstream o;
  int64_t total = 0;
  std::vector<Row> ops = rows_of(ev, EventKind::op, &total);
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %7s %10s %6s %10s %10s %9s %9s\n", "op", "calls", "total ms", "%", "mean us",
                "MiB", "GFLOP", "GFLOP/s");
  o << line;
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    const Row& r = ops[i];
    const double ms = static_cast<double>(r.ns) / 1e6;
    std::snprintf(
        line, sizeof line, "%-28s %7lld %10.3f %6.1f %10.1f %10s %9.3f %9s\n", r.name.c_str(), (long long)r.calls, ms,
        total ? 100.0 * static_cast<double>(r.ns) / static_cast<double>(total) : 0.0,
        static_cast<double>(r.ns) / 1e3 / static_cast<double>(r.calls), mib(r.bytes).c_str(), r.flops / 1e9,
        r.flops > 0 && r.ns > 0 ? std::to_string(static_cast<int>(r.flops / static_cast<double>(r.ns))).c_str() : "-");
    o << line;
  }
  if (ops.size() > top) o << "(" << ops.size() - top << " more ops)\n";
  std::snprintf(line, sizeof line, "%-28s %7s %10.3f\n", "all ops", "", static_cast<double>(total) / 1e6);
  o << line;
  int64_t range_total = 0;
  std::vector<Row> ranges = rows_of(ev, EventKind::range, &range_total);
  if (!ranges.empty()) {
    std::snprintf(line, sizeof line, "\n%-40s %7s %10s %10s %10s\n", "range", "calls", "total ms", "mean us", "MiB");
    o << line;
    for (size_t i = 0; i < ranges.size() && i < top; ++i) {
      const Row& r = ranges[i];
      std::snprintf(line, sizeof line, "%-40s %7lld %10.3f %10.1f %10s\n", r.name.c_str(), (long long)r.calls,
                    static_cast<double>(r.ns) / 1e6, static_cast<double>(r.ns) / 1e3 / static_cast<double>(r.calls),
                    mib(r.bytes).c_str());
      o << line;
    }
    if (ranges.size() > top) o << "(" << ranges.size() - top << " more ranges)\n";
  }
  return o.str();
}

void Profile::write_chrome_trace(const std::string& path) const {
  std::vector<Event> ev = events();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    SNUG_CHECK(f.good(), IOError, "profiler: cannot open ", tmp, " for writing");
    f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    char buf[128];
    for (size_t i = 0; i < ev.size(); ++i) {
      const Event& e = ev[i];
      std::snprintf(buf, sizeof buf, "\"ph\": \"X\", \"pid\": 0, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f", e.thread,
                    static_cast<double>(e.start_ns) / 1e3, static_cast<double>(e.dur_ns) / 1e3);
      const char* cat = e.kind == EventKind::op ? "op" : e.kind == EventKind::range ? "range" : "device";
      f << "{\"name\": \"" << json_escape(e.name) << "\", \"cat\": \"" << cat
        << "\", " << buf << ", \"args\": {\"device\": \"" << e.device.str() << "\", \"bytes\": " << e.bytes
        << ", \"flops\": " << static_cast<uint64_t>(e.flops) << "}}" << (i + 1 < ev.size() ? ",\n" : "\n");
    }
    f << "]}\n";
    f.flush();
    SNUG_CHECK(f.good(), IOError, "profiler: writing ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SNUG_CHECK(!ec, IOError, "profiler: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

int64_t clock_ns() { return enabled() ? now_ns() : 0; }

void record_device_interval(std::string name, Device device, int64_t start_ns, int64_t dur_ns, uint32_t track) {
  if (!enabled()) return;
  Event e;
  e.name = std::move(name);
  e.kind = EventKind::device;
  e.device = device;
  e.start_ns = start_ns;
  e.dur_ns = dur_ns;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!detail::g_enabled.load(std::memory_order_relaxed)) return;
  e.thread = 1000 + track;  // a track of its own, not a host thread's number
  s.events.push_back(std::move(e));
}

void RecordOp::begin(const char* name, Device device, double flops) {
  entered_ = true;
  if (t_open_ops++ > 0) return;  // inside another op: folded into it
  active_ = true;
  name_ = name;
  device_ = device;
  flops_ = flops;
  bytes0_ = memory::thread_requested_bytes();
  start_ns_ = now_ns();
}

void RecordOp::end() {
  --t_open_ops;
  if (!active_) return;
  Event e;
  e.name = name_;
  e.kind = EventKind::op;
  e.device = device_;
  e.start_ns = start_ns_;
  e.dur_ns = now_ns() - start_ns_;
  e.bytes = memory::thread_requested_bytes() - bytes0_;
  e.flops = flops_;
  push(std::move(e));
}

void RecordRange::begin(std::string name) {
  active_ = true;
  name_ = std::move(name);
  bytes0_ = memory::thread_requested_bytes();
  start_ns_ = now_ns();
}

void RecordRange::end() {
  Event e;
  e.name = std::move(name_);
  e.kind = EventKind::range;
  e.start_ns = start_ns_;
  e.dur_ns = now_ns() - start_ns_;
  e.bytes = memory::thread_requested_bytes() - bytes0_;
  push(std::move(e));
}

}  // namespace snug::profiler
