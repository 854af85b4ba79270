// SPDX-License-Identifier: MIT
// DevicePrefetcher: a DataLoader's batches copied to a device one step ahead,
// on a copy stream of their own, so that batch s+1 travels while step s
// computes (NOTE [ Prefetch to a device ]). With the loader's pin_memory the
// copies read page-locked memory and are truly asynchronous.
//
//   data::DataLoader loader(ds, {.batch_size = 64, .pin_memory = true});
//   data::DevicePrefetcher pf(Device("cuda:0"));
//   auto it = loader.begin();
//   pf.push(*it);                                   // batch 0 starts its trip
//   while (!pf.empty()) {
//     data::Batch b = pf.pop();                     // batch s, ready for the current stream
//     if (++it != loader.end()) pf.push(*it);       // batch s+1's copy overlaps step s
//     step(b);
//   }
//
// On a CPU device (cpu, or a virtual cpu:N) each push is Batch::to, done at
// once, and the same calls give the same batches.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include <snug/data/collate.h>
#include <snug/memory/allocator.h>

namespace snug::data {

// NOTE [ Prefetch to a device ]
// On a GPU, as PyTorch's data prefetchers do it:
// 1. push() queues each tensor's copy on the copy stream (its destination is
//    allocated from that stream's pool, and a pinned source's block is kept
//    from reuse until the copy is done: raw::to_device_async). The copy stream
//    is non-blocking (memory::create_copy_stream): the legacy default stream,
//    on which snug's kernels run, does not wait for it, nor it for them.
// 2. pop() makes the calling thread's current stream (the compute stream)
//    wait, on the device, for the copy stream's work so far, and records the
//    batch's blocks on the compute stream (memory::record_stream), so that
//    once the step frees them they are not handed to a later copy before the
//    step's kernels are done with them. The host does not wait.
// While a profiler::Profile records on a GPU, both streams are timed with the
// GPU's own events and appear in the trace as device tracks (NOTE [ The
// prefetcher's GPU timeline ] in device_prefetch.cpp): the copy of batch s+1
// inside the compute stream's step s is the overlap.
class DevicePrefetcher {
 public:
  // How one tensor reaches the device, queued on the device's current
  // stream (default raw::to_device_async). Tests substitute their own.
  using CopyFn = std::function<Tensor(const Tensor&, Device)>;
  explicit DevicePrefetcher(Device device, CopyFn copy = {});
  ~DevicePrefetcher();  // waits for the copies in flight, releases the stream
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // Starts copying every tensor of b (fields, lengths, padding_mask) to the device.
  void push(const Batch& b);
  // The batch pushed longest ago, usable on the current stream (ValueError when none).
  Batch pop();
  // The step that used the last popped batch is queued: while a profile records
  // on a GPU, its compute-stream interval ends here, and the timed intervals
  // are waited for and written into the profile (call it before the profile
  // stops, or the last step's intervals are lost). Nothing otherwise.
  void end_step();
  bool empty() const { return queue_.empty(); }
  std::size_t size() const { return queue_.size(); }
  Device device() const { return device_; }
  memory::StreamId copy_stream() const { return stream_; }

 private:
  Device device_;
  CopyFn copy_;
  memory::StreamId stream_ = 0;
  std::deque<Batch> queue_;

  // The GPU timeline (CUDA event handles as integers; 0: none).
  struct Interval {
    const char* name;
    std::uintptr_t begin, end;
    uint32_t track;  // 0: the compute stream, 1: the copy stream
    bool owns_begin, owns_end;  // a compute interval's end may begin the next one
  };
  std::uintptr_t record(memory::StreamId s);
  void flush_timeline(bool all);
  bool timed() const;
  std::uintptr_t origin_ = 0, last_pop_ = 0;
  int64_t origin_ns_ = 0;
  std::vector<Interval> pending_;
};

}  // namespace snug::data
