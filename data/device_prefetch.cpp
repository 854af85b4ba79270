// SPDX-License-Identifier: MIT
// DevicePrefetcher (NOTE [ Prefetch to a device ] in data/device_prefetch.h).
#include <snug/data/device_prefetch.h>

#include <optional>
#include <thread>

#include <snug/base/error.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/stream.h>

namespace snug::data {

DevicePrefetcher::DevicePrefetcher(Device device, CopyFn copy) : device_(device), copy_(std::move(copy)) {
  if (!copy_) copy_ = [](const Tensor& t, Device d) { return raw::to_device_async(t, d); };
  stream_ = memory::create_copy_stream(device_);  // 0 on CPU devices
}

DevicePrefetcher::~DevicePrefetcher() {
  queue_.clear();
  if (stream_ != 0) memory::destroy_stream(device_, stream_);  // waits for its copies first
  if (device_.is_cuda()) {
    try {
      flush_timeline(true);
    } catch (const Error&) {  // a destructor does not throw; the trace just lacks these
    }
  }
}

// NOTE [ The prefetcher's GPU timeline ]
// While a Profile records (and the device is a GPU), push() brackets its
// copies with events on the copy stream and pop() records one on the compute
// stream: the compute stream's step s runs between pop s and pop s+1. When an
// interval's events are done it goes into the trace as a device interval
// (profiler::record_device_interval; track 0 the compute stream, 1 the copy
// stream), placed on the profile's clock through an origin event recorded
// with the host's time (so the two tracks are exact relative to each other,
// and shifted from the host threads by the GPU's queueing delay at the origin).
bool DevicePrefetcher::timed() const { return device_.is_cuda() && stream_ != 0 && profiler::enabled(); }

std::uintptr_t DevicePrefetcher::record(memory::StreamId s) {
  if (origin_ == 0 || profiler::clock_ns() < origin_ns_) {  // the first, or a new Profile's clock
    if (origin_ != 0) memory::destroy_event(device_, origin_);
    origin_ = memory::record_timed_event(device_, memory::current_stream(device_));
    origin_ns_ = profiler::clock_ns();
  }
  return memory::record_timed_event(device_, s);
}

void DevicePrefetcher::flush_timeline(bool all) {
  std::vector<Interval> keep;
  for (const Interval& iv : pending_) {
    if (!all && !memory::event_done(device_, iv.end)) {
      keep.push_back(iv);
      continue;
    }
    if (origin_ != 0 && memory::event_done(device_, iv.end)) {
      const double start_ms = memory::elapsed_ms(device_, origin_, iv.begin);
      const double ms = memory::elapsed_ms(device_, iv.begin, iv.end);
      profiler::record_device_interval(iv.name, device_, origin_ns_ + static_cast<int64_t>(start_ms * 1e6),
                                       static_cast<int64_t>(ms * 1e6), iv.track);
    }
    if (iv.owns_begin) memory::destroy_event(device_, iv.begin);
    if (iv.owns_end) memory::destroy_event(device_, iv.end);
  }
  pending_ = std::move(keep);
  if (all) {
    memory::destroy_event(device_, last_pop_);
    memory::destroy_event(device_, origin_);
    last_pop_ = origin_ = 0;
  }
}

void DevicePrefetcher::push(const Batch& b) {
  Batch out = b;
  const bool t = stream_ != 0 && timed();
  const std::uintptr_t begin = t ? record(stream_) : 0;
  {
    // On a GPU, allocations and copies go on the copy stream; on a CPU device there is none.
    std::optional<memory::StreamGuard> on_copy;
    if (stream_ != 0) on_copy.emplace(device_, stream_);
    out.each_tensor([&](Tensor& x) { x = copy_(x, device_); });
  }
  if (t) pending_.push_back({"h2d copy (prefetch, copy stream)", begin, record(stream_), 1, true, true});
  queue_.push_back(std::move(out));
}

void DevicePrefetcher::end_step() {
  if (!timed() || last_pop_ == 0) return;
  pending_.push_back({"step (compute stream)", last_pop_, record(memory::current_stream(device_)), 0, true, true});
  last_pop_ = 0;  // the next pop starts a new step
  for (const Interval& iv : pending_)
    while (!memory::event_done(device_, iv.end)) std::this_thread::yield();  // the step is queued: it ends
  flush_timeline(false);
}

Batch DevicePrefetcher::pop() {
  SNUG_CHECK(!queue_.empty(), ValueError, "DevicePrefetcher::pop: no batch was pushed (push one first)");
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  if (stream_ != 0) {
    const memory::StreamId compute = memory::current_stream(device_);
    memory::wait_stream(device_, compute, stream_);  // the step's kernels start after the copies
    b.each_tensor([&](Tensor& t) { memory::record_stream(device_, t.storage()->data(), compute); });
    if (timed()) {
      const std::uintptr_t now = record(compute);
      if (last_pop_ != 0) pending_.push_back({"step (compute stream)", last_pop_, now, 0, true, false});
      last_pop_ = now;
      flush_timeline(false);
    }
  }
  return b;
}

}  // namespace snug::data
