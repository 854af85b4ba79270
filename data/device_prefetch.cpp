// SPDX-License-Identifier: MIT
// DevicePrefetcher (NOTE [ Prefetch to a device ] in data/device_prefetch.h).
#include <snug/data/device_prefetch.h>

#include <snug/base/error.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/stream.h>

namespace snug::data {

namespace {
// Applies f to every defined tensor of b, in a fixed order.
template <class F>
void each_tensor(Batch& b, F f) {
  for (Tensor& t : b.fields)
    if (t.defined()) f(t);
  if (b.lengths.defined()) f(b.lengths);
  if (b.padding_mask.defined()) f(b.padding_mask);
}
}  // namespace

DevicePrefetcher::DevicePrefetcher(Device device, CopyFn copy) : device_(device), copy_(std::move(copy)) {
  if (!copy_) copy_ = [](const Tensor& t, Device d) { return raw::to_device_async(t, d); };
  stream_ = memory::create_copy_stream(device_);  // 0 on CPU devices
}

DevicePrefetcher::~DevicePrefetcher() {
  queue_.clear();
  if (stream_ != 0) memory::destroy_stream(device_, stream_);  // waits for its copies first
}

void DevicePrefetcher::push(const Batch& b) {
  Batch out = b;
  if (stream_ != 0) {
    memory::StreamGuard on_copy(device_, stream_);  // allocations and copies on the copy stream
    each_tensor(out, [&](Tensor& t) { t = copy_(t, device_); });
  } else {
    each_tensor(out, [&](Tensor& t) { t = copy_(t, device_); });
  }
  queue_.push_back(std::move(out));
}

Batch DevicePrefetcher::pop() {
  SNUG_CHECK(!queue_.empty(), ValueError, "DevicePrefetcher::pop: no batch was pushed (push one first)");
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  if (stream_ != 0) {
    const memory::StreamId compute = memory::current_stream(device_);
    memory::wait_stream(device_, compute, stream_);  // the step's kernels start after the copies
    each_tensor(b, [&](Tensor& t) { memory::record_stream(device_, t.storage()->data(), compute); });
  }
  return b;
}

}  // namespace snug::data
