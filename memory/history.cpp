// SPDX-License-Identifier: MIT
#include <snug/memory/history.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <snug/base/error.h>

namespace snug::memory {

using nlohmann::json;

const char* action_name(Action a) {
  switch (a) {
    case Action::alloc:
      return "alloc";
    case Action::free:
      return "free";
    case Action::segment_alloc:
      return "segment_alloc";
    case Action::segment_free:
      return "segment_free";
    case Action::oom:
      return "oom";
    case Action::step:
      return "step";
  }
  return "?";
}

Action parse_action(const std::string& s) {
  for (Action a : {Action::alloc, Action::free, Action::segment_alloc, Action::segment_free, Action::oom,
                   Action::step})
    if (s == action_name(a)) return a;
  throw ValueError(str("memory trace: unknown action \"", s, "\""));
}

const char* block_state_name(BlockState s) {
  switch (s) {
    case BlockState::allocated:
      return "allocated";
    case BlockState::pending_free:
      return "pending_free";
    case BlockState::free:
      return "free";
  }
  return "?";
}

uint64_t trace_now_ns() {
  // Relative to the first call, so times in a trace start near zero.
  static const auto start = std::chrono::steady_clock::now();
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// ---- History ------------------------------------------------------------------

void History::enable(bool on, std::size_t max_entries) {
  SNUG_CHECK(!on || max_entries > 0, ValueError, "memory::record_history: max_entries must be > 0");
  if (on && max_entries != ring_.size()) {
    std::vector<TraceEntry> kept = entries();
    if (kept.size() > max_entries) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(max_entries));
    ring_.assign(max_entries, TraceEntry{});
    count_ = kept.size();
    for (std::size_t i = 0; i < count_; ++i) ring_[i] = std::move(kept[i]);
    head_ = count_ % max_entries;
  }
  enabled_ = on;
}

void History::clear() { head_ = count_ = dropped_ = 0; }

void History::record(Action a, uint64_t time_ns, std::uintptr_t addr, std::size_t size, std::size_t requested,
                     StreamId stream, Tag tag, const char* op) {
  if (ring_.empty()) return;
  TraceEntry& e = ring_[head_];
  e.action = a;
  e.time_ns = time_ns;
  e.address = addr;
  e.size = size;
  e.requested = requested;
  e.stream = stream;
  e.tag = tag;
  if (op)
    e.op.assign(op);
  else
    e.op.clear();
  head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
  if (count_ < ring_.size())
    ++count_;
  else
    ++dropped_;
}

std::vector<TraceEntry> History::entries() const {
  std::vector<TraceEntry> out;
  out.reserve(count_);
  std::size_t start = count_ < ring_.size() ? 0 : head_;
  for (std::size_t i = 0; i < count_; ++i) out.push_back(ring_[(start + i) % ring_.size()]);
  return out;
}

// ---- JSON ------------------------------------------------------------------------
// Sizes and addresses are JSON integers (exact up to 2^64 in nlohmann::json);
// "capacity" and "max_split_size" are null when unlimited.

namespace {

json size_or_null(std::size_t v) { return v == kNoLimit ? json(nullptr) : json(v); }

json stat_json(const Stat& s) {
  return {{"current", s.current}, {"peak", s.peak}, {"allocated", s.allocated}, {"freed", s.freed}};
}

Stat stat_from(const json& j) {
  Stat s;
  s.current = j.at("current").get<int64_t>();
  s.peak = j.at("peak").get<int64_t>();
  s.allocated = j.at("allocated").get<int64_t>();
  s.freed = j.at("freed").get<int64_t>();
  return s;
}

Tag tag_from(const std::string& s) {
  for (int t = 0; t < kNumTags; ++t)
    if (s == tag_name(static_cast<Tag>(t))) return static_cast<Tag>(t);
  throw ValueError(str("memory trace: unknown tag \"", s, "\""));
}

#define SNUG_STAT_FIELDS(X)                                                                            \
  X(allocated_bytes)                                                                                   \
  X(requested_bytes) X(active_bytes) X(inactive_split_bytes) X(reserved_bytes) X(allocation) X(active) \
      X(inactive_split) X(segment)
#define SNUG_COUNTER_FIELDS(X) \
  X(num_alloc_retries)         \
  X(num_ooms) X(num_cache_hits) X(num_cache_misses) X(num_raw_allocs) X(num_raw_frees) X(num_deferred_frees)

json stats_json(const DeviceStats& s) {
  json j;
#define X(f) j[#f] = stat_json(s.f);
  SNUG_STAT_FIELDS(X)
#undef X
#define X(f) j[#f] = s.f;
  SNUG_COUNTER_FIELDS(X)
#undef X
  json tags = json::object();
  for (int t = 0; t < kNumTags; ++t) {
    json tj = stat_json(s.tag_bytes[t]);
    tj["at_peak"] = s.tag_at_peak[t];
    tags[tag_name(static_cast<Tag>(t))] = tj;
  }
  j["tag_bytes"] = tags;
  return j;
}

DeviceStats stats_from(const json& j) {
  DeviceStats s;
#define X(f) s.f = stat_from(j.at(#f));
  SNUG_STAT_FIELDS(X)
#undef X
#define X(f) s.f = j.at(#f).get<int64_t>();
  SNUG_COUNTER_FIELDS(X)
#undef X
  for (auto& [name, tj] : j.at("tag_bytes").items()) {
    int t = static_cast<int>(tag_from(name));
    s.tag_bytes[t] = stat_from(tj);
    s.tag_at_peak[t] = tj.at("at_peak").get<int64_t>();
  }
  return s;
}

json event_json(const TraceEntry& e) {
  return {{"action", action_name(e.action)}, {"time_ns", e.time_ns}, {"address", e.address},   {"size", e.size},
          {"requested", e.requested},        {"stream", e.stream},   {"tag", tag_name(e.tag)}, {"op", e.op}};
}

TraceEntry event_from(const json& j) {
  TraceEntry e;
  e.action = parse_action(j.at("action").get<std::string>());
  e.time_ns = j.value("time_ns", uint64_t{0});
  e.address = j.value("address", std::uintptr_t{0});
  e.size = j.at("size").get<std::size_t>();
  e.requested = j.value("requested", e.size);
  e.stream = j.value("stream", StreamId{0});
  e.tag = tag_from(j.value("tag", std::string("other")));
  e.op = j.value("op", std::string());
  return e;
}

}  // namespace

std::string snapshot_to_json(const Snapshot& snap, int indent) {
  json devices = json::array();
  for (const DeviceSnapshot& d : snap.devices) {
    json segs = json::array();
    for (const SegmentInfo& s : d.segments) {
      json blocks = json::array();
      for (const BlockInfo& b : s.blocks)
        blocks.push_back({{"address", b.address},
                          {"size", b.size},
                          {"requested", b.requested},
                          {"state", block_state_name(b.state)},
                          {"tag", tag_name(b.tag)},
                          {"op", b.op}});
      segs.push_back({{"address", s.address},
                      {"size", s.size},
                      {"stream", s.stream},
                      {"pool", s.small_pool ? "small" : "large"},
                      {"blocks", blocks}});
    }
    json events = json::array();
    for (const TraceEntry& e : d.events) events.push_back(event_json(e));
    devices.push_back({{"device", d.device},
                       {"backend", d.backend},
                       {"settings", d.settings.to_string()},
                       {"capacity", size_or_null(d.capacity)},
                       {"stats", stats_json(d.stats)},
                       {"segments", segs},
                       {"events", events}});
  }
  json root = {{"format", "snug-memory-snapshot"}, {"version", 1}, {"devices", devices}};
  return root.dump(indent);
}

Snapshot snapshot_from_json(const std::string& text, const std::string& what) {
  Snapshot snap;
  // A pickle (protocol 2 and later start with 0x80) is most likely PyTorch's
  // own snapshot: say how to bring it in rather than quote the JSON parser.
  SNUG_CHECK(text.empty() || static_cast<unsigned char>(text[0]) != 0x80, IOError, what,
             ": a pickle, not a snug memory snapshot (JSON); a PyTorch snapshot converts with "
             "`python3 tools/torch_snapshot.py import ",
             what, " -o TRACE.json`");
  try {
    json root = json::parse(text);
    SNUG_CHECK(root.value("format", std::string()) == "snug-memory-snapshot", IOError, what,
               ": not a snug memory snapshot (missing \"format\": \"snug-memory-snapshot\")");
    SNUG_CHECK(root.value("version", 0) == 1, IOError, what, ": unsupported snapshot version ",
               root.value("version", 0));
    for (const json& dj : root.at("devices")) {
      DeviceSnapshot d;
      d.device = dj.at("device").get<std::string>();
      d.backend = dj.value("backend", std::string());
      d.settings = parse_settings(dj.value("settings", std::string()));
      d.capacity = dj.contains("capacity") && !dj["capacity"].is_null() ? dj["capacity"].get<std::size_t>() : kNoLimit;
      if (dj.contains("stats")) d.stats = stats_from(dj["stats"]);
      d.stats.capacity = d.capacity;
      for (const json& sj : dj.value("segments", json::array())) {
        SegmentInfo s;
        s.address = sj.at("address").get<std::uintptr_t>();
        s.size = sj.at("size").get<std::size_t>();
        s.stream = sj.value("stream", StreamId{0});
        s.small_pool = sj.value("pool", std::string("large")) == "small";
        for (const json& bj : sj.at("blocks")) {
          BlockInfo b;
          b.address = bj.at("address").get<std::uintptr_t>();
          b.size = bj.at("size").get<std::size_t>();
          b.requested = bj.value("requested", std::size_t{0});
          std::string st = bj.at("state").get<std::string>();
          b.state = st == "allocated"      ? BlockState::allocated
                    : st == "pending_free" ? BlockState::pending_free
                    : st == "free"         ? BlockState::free
                                           : throw ValueError(str("unknown block state \"", st, "\""));
          b.tag = tag_from(bj.value("tag", std::string("other")));
          b.op = bj.value("op", std::string());
          s.blocks.push_back(std::move(b));
        }
        d.segments.push_back(std::move(s));
      }
      for (const json& ej : dj.value("events", json::array())) d.events.push_back(event_from(ej));
      snap.devices.push_back(std::move(d));
    }
  } catch (const IOError&) {
    throw;
  } catch (const std::exception& e) {
    throw IOError(str(what, ": bad memory snapshot: ", e.what()));
  }
  return snap;
}

void write_snapshot(const Snapshot& s, const std::string& path) {
  std::string text = snapshot_to_json(s);
  std::ofstream f(path, std::ios::binary);
  SNUG_CHECK(f.good(), IOError, "memory::dump_snapshot: cannot open \"", path, "\" for writing");
  f << text << '\n';
  f.close();
  SNUG_CHECK(f.good(), IOError, "memory::dump_snapshot: writing \"", path, "\" failed");
}

Snapshot load_snapshot(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SNUG_CHECK(f.good(), IOError, "memory::load_snapshot: cannot open \"", path, "\"");
  std::stringstream ss;
  ss << f.rdbuf();
  return snapshot_from_json(ss.str(), path);
}

}  // namespace snug::memory
