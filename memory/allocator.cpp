// SPDX-License-Identifier: MIT
// The process-wide allocator registry behind memory/allocator.h: one
// CachingAllocator per device, created on first use.
#include <snug/memory/allocator.h>
#include <snug/memory/fault_injection.h>

#include <atomic>
#include <mutex>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/history.h>
#include <snug/memory/raw_backend.h>
#include <snug/memory/settings.h>
#include <snug/memory/stats.h>

namespace snug::memory {
namespace {

thread_local Tag t_tag = Tag::other;
thread_local const char* t_op = nullptr;
thread_local std::uint64_t t_requested = 0;  // bytes this thread asked for, ever (profiler)

constexpr int kMaxDevices = 256;  // per device type

// NOTE [ Allocator registry lifetime ]
// Tensors may be freed after main returns (static destructors in user code),
// so the registry and every allocator in it are created with new and never
// destroyed: they outlive everything. The OS takes the memory back at exit.
struct Registry {
  std::mutex mu;  // guards creation and the fields below
  std::atomic<CachingAllocator*> slots[kNumDeviceTypes][kMaxDevices]{};
  BackendFactory factories[kNumDeviceTypes];
  AllocatorSettings settings = settings_from_env();  // SNUG_ALLOC_CONF, read once
  bool history_on = false;
  std::size_t history_max = 0;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

const char* tag_name(Tag t) {
  static const char* names[kNumTags] = {"other",     "parameter", "gradient",  "optimizer_state", "activation",
                                        "temporary", "data",      "workspace", "master_weights"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumTags ? names[i] : "?";
}
TagScope::TagScope(Tag t) : prev_(t_tag) { t_tag = t; }
TagScope::~TagScope() { t_tag = prev_; }
OpScope::OpScope(const char* n) : prev_(t_op) { t_op = n; }
OpScope::~OpScope() { t_op = prev_; }
Tag current_tag() { return t_tag; }
const char* current_op() { return t_op; }

CachingAllocator& allocator_for(Device d) {
  SNUG_CHECK(d.index >= 0 && d.index < kMaxDevices, DeviceError, "memory: device index ", d.index, " of ", d,
             " is out of range (at most ", kMaxDevices - 1, ")");
  Registry& r = registry();
  auto& slot = r.slots[static_cast<int>(d.type)][d.index];
  if (CachingAllocator* a = slot.load(std::memory_order_acquire)) return *a;

  std::lock_guard<std::mutex> lock(r.mu);
  if (CachingAllocator* a = slot.load(std::memory_order_relaxed)) return *a;
  std::unique_ptr<RawBackend> backend;
  if (const BackendFactory& f = r.factories[static_cast<int>(d.type)])
    backend = f(d);
  else if (d.is_cpu())
    backend = std::make_unique<HostBackend>();
  SNUG_CHECK(backend != nullptr, DeviceError, "memory: no memory backend for ", d,
             d.is_cuda() ? " (this build has no CUDA backend registered)" : "");
  auto* a = new CachingAllocator(d, std::move(backend), r.settings);  // never deleted: see NOTE above
  if (r.history_on) a->record_history(true, r.history_max);
  slot.store(a, std::memory_order_release);
  return *a;
}

void register_backend_factory(DeviceType t, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[static_cast<int>(t)] = std::move(factory);
}

namespace {
// FailAllocation's state: off unless a guard lives (one relaxed load per allocation).
std::atomic<bool> g_fail_on{false};
std::atomic<std::uint64_t> g_fail_count{0}, g_fail_nth{0};
std::atomic<bool> g_fail_fired{false};
}  // namespace

FailAllocation::FailAllocation(std::uint64_t nth) {
  SNUG_CHECK(!g_fail_on.load(), ValueError, "FailAllocation: another guard is active");
  g_fail_count = 0;
  g_fail_nth = nth;
  g_fail_fired = false;
  g_fail_on = true;
}
FailAllocation::~FailAllocation() { g_fail_on = false; }
std::uint64_t FailAllocation::count() const { return g_fail_count.load(); }
bool FailAllocation::fired() const { return g_fail_fired.load(); }

void* allocate(Device d, std::size_t nbytes, StreamId stream) {
  t_requested += nbytes;
  if (g_fail_on.load(std::memory_order_relaxed)) {
    const std::uint64_t k = ++g_fail_count;
    if (k == g_fail_nth.load()) {
      g_fail_fired = true;
      throw OutOfMemoryError(str(d.str(), " out of memory: allocation ", k, " of ", nbytes,
                                 " bytes failed by memory::FailAllocation (injected for testing)"),
                             nbytes, capacity(d));
    }
  }
  return allocator_for(d).allocate(nbytes, stream, t_tag, t_op);
}

void deallocate(Device d, void* p) {
  if (p) allocator_for(d).deallocate(p);
}

void record_stream(Device d, void* p, StreamId stream) { allocator_for(d).record_stream(p, stream); }

std::uint64_t thread_requested_bytes() { return t_requested; }

std::size_t allocated(Device d) { return static_cast<std::size_t>(stats(d).allocated_bytes.current); }
std::size_t reserved(Device d) { return static_cast<std::size_t>(stats(d).reserved_bytes.current); }
std::size_t peak_allocated(Device d) { return static_cast<std::size_t>(stats(d).allocated_bytes.peak); }
void reset_peak(Device d) { allocator_for(d).reset_peak(); }
void empty_cache(Device d) { allocator_for(d).empty_cache(); }
void mark_step(Device d) { allocator_for(d).mark_step(); }
DeviceStats stats(Device d) { return allocator_for(d).stats(); }

void set_capacity(Device d, std::size_t bytes) { allocator_for(d).set_capacity(bytes); }
void set_capacity_fraction(Device d, double f) { allocator_for(d).set_capacity_fraction(f); }
std::size_t capacity(Device d) { return allocator_for(d).capacity(); }
std::size_t available(Device d) { return allocator_for(d).available(); }
void set_settings(Device d, const AllocatorSettings& s) { allocator_for(d).set_settings(s); }

void record_history(bool enabled, std::size_t max_entries) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.history_on = enabled;
  r.history_max = max_entries;
  for (auto& per_type : r.slots)
    for (auto& slot : per_type)
      if (CachingAllocator* a = slot.load(std::memory_order_acquire)) a->record_history(enabled, max_entries);
}

void dump_snapshot(Device d, const std::string& path) {
  Snapshot s;
  s.devices.push_back(allocator_for(d).snapshot());
  write_snapshot(s, path);
}

void dump_snapshot(const std::string& path) {
  Registry& r = registry();
  Snapshot s;
  for (auto& per_type : r.slots)
    for (auto& slot : per_type)
      if (CachingAllocator* a = slot.load(std::memory_order_acquire)) s.devices.push_back(a->snapshot());
  write_snapshot(s, path);
}

}  // namespace snug::memory
