// SPDX-License-Identifier: MIT
// History: a bounded ring buffer of allocator events, and snapshots (the
// segments with their blocks, plus the events) written as JSON and read back.
// tools/memory_timeline.py draws a snapshot; `snug-bench replay` replays its
// alloc/free events against other settings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/settings.h>
#include <snug/memory/stats.h>

namespace snug::memory {

// step: a training step begins (memory::mark_step); replay passes it on, so
// the planned policy sees the steps it plans from.
enum class Action : uint8_t { alloc, free, segment_alloc, segment_free, oom, step };
const char* action_name(Action a);
Action parse_action(const std::string& s);  // throws ValueError

// One event. For alloc/free: the block's address and rounded size, and the
// size the caller asked for. For segment_*: the segment. For oom: the request
// (address 0). time_ns counts from the process's first allocator.
struct TraceEntry {
  Action action = Action::alloc;
  uint64_t time_ns = 0;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  StreamId stream = 0;
  Tag tag = Tag::other;
  std::string op;  // empty when no OpScope was active
};

// Fixed-capacity ring: keeps the newest max_entries events. Not thread-safe
// on its own; the owning allocator's lock guards it.
class History {
 public:
  void enable(bool on, std::size_t max_entries);
  bool enabled() const { return enabled_; }
  void clear();
  // Overwrites the oldest entry when full; reuses its string's storage, so
  // steady-state recording does not allocate for short op names.
  void record(Action a, uint64_t time_ns, std::uintptr_t addr, std::size_t size, std::size_t requested, StreamId stream,
              Tag tag, const char* op);
  std::vector<TraceEntry> entries() const;  // oldest first
  std::size_t dropped() const { return dropped_; }

 private:
  bool enabled_ = false;
  std::vector<TraceEntry> ring_;
  std::size_t head_ = 0;  // next slot to write
  std::size_t count_ = 0;
  std::size_t dropped_ = 0;
};

uint64_t trace_now_ns();

enum class BlockState : uint8_t { allocated, pending_free, free };
const char* block_state_name(BlockState s);

struct BlockInfo {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // 0 unless allocated
  BlockState state = BlockState::free;
  Tag tag = Tag::other;
  std::string op;
};

struct SegmentInfo {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  StreamId stream = 0;
  bool small_pool = false;
  std::vector<BlockInfo> blocks;  // in address order, covering the segment
};

struct DeviceSnapshot {
  std::string device;   // "cpu:1"
  std::string backend;  // "host", "simulated", ...
  AllocatorSettings settings;
  std::size_t capacity = SIZE_MAX;
  DeviceStats stats;
  std::vector<SegmentInfo> segments;
  std::vector<TraceEntry> events;  // oldest first
};

struct Snapshot {
  std::vector<DeviceSnapshot> devices;
};

// Writes / reads the JSON form (format described in docs/memory.md).
// Errors throw IOError naming the file (and, for bad content, what was wrong).
void write_snapshot(const Snapshot& s, const std::string& path);
std::string snapshot_to_json(const Snapshot& s, int indent = -1);
Snapshot load_snapshot(const std::string& path);
Snapshot snapshot_from_json(const std::string& text, const std::string& what = "snapshot");

}  // namespace snug::memory
