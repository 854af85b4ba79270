// SPDX-License-Identifier: MIT
// The profiler: where the time of a training step goes, op by op.
//
//   {
//     snug::profiler::Profile prof;          // records while it lives
//     train_step();
//     prof.stop();
//     std::cout << prof.summary();           // table sorted by time
//     prof.write_chrome_trace("step.json");  // open in Perfetto / chrome://tracing
//   }
//
// What is recorded:
//   - ops: every raw op (core/raw_ops.h) and every nn kernel entry (layer norm,
//     attention, convolution, pooling) opens a RecordOp. Only the outermost op on
//     a thread is recorded, so an op that calls other ops (binary_scalar calling
//     binary, matmul making an operand contiguous) counts once, with their time
//     and bytes folded in: the table's times add up to the step.
//   - ranges: the backward engine opens one per autograd node ("backward:<node>"),
//     optimizers one per step ("optim:<name>.step"), and user code may open its
//     own with RecordRange. Ranges nest around ops; they appear in the trace and
//     in a second table, not in the op table's total.
// Per op: name, device, wall time, calls, bytes requested from the allocator
// by the calling thread during the op (outputs and workspaces), and FLOPs where
// the op knows them (matmul, convolution: 2 per multiply-add; elementwise and
// normalization ops count nothing, their time is memory-bound).
// When no Profile is alive, a RecordOp costs one relaxed atomic load.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <snug/base/device.h>

namespace snug::profiler {

// device: an interval a device timed itself (a GPU's events on one stream),
// on a trace track of its own; in neither table.
enum class EventKind : uint8_t { op, range, device };

struct Event {
  std::string name;
  EventKind kind = EventKind::op;
  Device device;
  int64_t start_ns = 0;  // since the Profile started
  int64_t dur_ns = 0;
  uint32_t thread = 0;  // small per-profile thread number, 0 = the first seen
  uint64_t bytes = 0;   // bytes requested from the allocator during the event
  double flops = 0;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// Nanoseconds since the running Profile started (the clock of Event::start_ns).
int64_t clock_ns();
// Records an interval timed elsewhere, [start_ns, start_ns + dur_ns) on
// clock_ns()'s clock, as a device event on trace track `track` (the
// trace's tid is 1000 + track, apart from the host threads): e.g. a GPU's
// copy stream and compute stream, timed with its own events
// (data/device_prefetch.h). Nothing when no Profile records.
void record_device_interval(std::string name, Device device, int64_t start_ns, int64_t dur_ns, uint32_t track);

class Profile {
 public:
  Profile();  // throws ValueError when another Profile is already recording
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void stop();  // stops recording (idempotent); events stay readable
  std::vector<Event> events() const;
  // One row per op name: calls, total ms, % of all op time, mean us, bytes,
  // GFLOP and GFLOP/s; sorted by total time, the `top` largest rows. Then the
  // ranges, the same way.
  std::string summary(size_t top = 30) const;
  // Chrome trace event format ("X" events, microseconds); Perfetto opens it.
  // Written to a temporary file and renamed, so a reader never sees half a file.
  void write_chrome_trace(const std::string& path) const;

 private:
  bool stopped_ = false;
};

// Records one op, when profiling is on and no op is open on this thread.
class RecordOp {
 public:
  RecordOp(const char* name, Device device, double flops = 0) {
    if (enabled()) begin(name, device, flops);
  }
  ~RecordOp() {
    if (entered_) end();
  }
  RecordOp(const RecordOp&) = delete;
  RecordOp& operator=(const RecordOp&) = delete;
  void set_flops(double f) { flops_ = f; }

 private:
  void begin(const char* name, Device device, double flops);
  void end();
  bool entered_ = false;  // counted in this thread's open ops
  bool active_ = false;   // the outermost: records an event
  const char* name_ = nullptr;
  Device device_;
  double flops_ = 0;
  int64_t start_ns_ = 0;
  uint64_t bytes0_ = 0;
};

// A named range (backward node, optimizer step, user code); nests freely.
class RecordRange {
 public:
  explicit RecordRange(std::string name) {
    if (enabled()) begin(std::move(name));
  }
  // prefix + name, joined only when profiling is on (no string work otherwise).
  RecordRange(const char* prefix, const char* name) {
    if (enabled()) begin(std::string(prefix) + name);
  }
  ~RecordRange() {
    if (active_) end();
  }
  RecordRange(const RecordRange&) = delete;
  RecordRange& operator=(const RecordRange&) = delete;

 private:
  void begin(std::string name);
  void end();
  bool active_ = false;
  std::string name_;
  int64_t start_ns_ = 0;
  uint64_t bytes0_ = 0;
};

}  // namespace snug::profiler
