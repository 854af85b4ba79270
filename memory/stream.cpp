// SPDX-License-Identifier: MIT
#include <snug/memory/stream.h>

#include <array>

#include <snug/base/error.h>
#include <snug/memory/caching_allocator.h>

namespace snug::memory {

namespace {
// One slot per CUDA device index, per thread; zero-initialized: the default stream.
thread_local std::array<StreamId, kMaxStreamDevices> t_current{};

int slot(Device d, const char* what) {
  SNUG_CHECK(d.is_cuda(), DeviceError, what, ": ", d.str(), " has no streams (only CUDA devices do)");
  SNUG_CHECK(d.index >= 0 && d.index < kMaxStreamDevices, DeviceError, what, ": device index ", d.index,
             " is outside [0, ", kMaxStreamDevices, ")");
  return d.index;
}
}  // namespace

StreamId current_stream(Device d) {
  if (!d.is_cuda() || d.index < 0 || d.index >= kMaxStreamDevices) return 0;
  return t_current[static_cast<std::size_t>(d.index)];
}

void set_current_stream(Device d, StreamId s) {
  t_current[static_cast<std::size_t>(slot(d, "set_current_stream"))] = s;
}

StreamGuard::StreamGuard(Device d, StreamId s) : device_(d), prev_(0) {
  const int i = slot(d, "StreamGuard");
  prev_ = t_current[static_cast<std::size_t>(i)];
  t_current[static_cast<std::size_t>(i)] = s;
}

StreamGuard::~StreamGuard() { t_current[static_cast<std::size_t>(device_.index)] = prev_; }

StreamId create_stream(Device d) { return allocator_for(d).backend().create_stream(); }
StreamId create_copy_stream(Device d) { return allocator_for(d).backend().create_copy_stream(); }
void wait_stream(Device d, StreamId waiter, StreamId s) {
  if (waiter != s) allocator_for(d).backend().wait_stream(waiter, s);
}
EventHandle record_timed_event(Device d, StreamId s) { return allocator_for(d).backend().record_timed_event(s); }
bool event_done(Device d, EventHandle e) { return allocator_for(d).backend().query_event(e); }
double elapsed_ms(Device d, EventHandle a, EventHandle b) { return allocator_for(d).backend().elapsed_ms(a, b); }
void destroy_event(Device d, EventHandle e) {
  if (e != 0) allocator_for(d).backend().destroy_event(e);
}
void destroy_stream(Device d, StreamId s) {
  if (s) allocator_for(d).backend().destroy_stream(s);
}
void set_current_device(Device d) { allocator_for(d).backend().make_current(); }

}  // namespace snug::memory
