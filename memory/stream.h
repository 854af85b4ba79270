// SPDX-License-Identifier: MIT
// The current stream: per thread and per CUDA device, as PyTorch's. snug's
// CUDA kernels, copies, cuBLAS and cuDNN calls for cuda:N are queued on
// cuda:N's current stream, and new tensors on cuda:N take their memory from
// the caching allocator's pool for that stream (core/storage.cpp), so a block
// is reused by later work of the same stream without any wait (NOTE
// [ Stream-aware reuse ] in memory/caching_allocator.h covers the other streams).
//
//   const cuda::StreamHandle side = cuda::create_stream();
//   {
//     memory::StreamGuard g(Device("cuda:0"), side);
//     Tensor y = relu(matmul(x, w));   // queued on `side`, y's block belongs to `side`
//   }                                  // cuda:0's current stream is the default again
//
// Stream 0 (the legacy default stream) is current unless a guard says
// otherwise. CPU devices have no streams: their current stream is always 0.
// A plain header (no CUDA): the stream is an opaque integer (a cudaStream_t).
#pragma once
#include <snug/base/device.h>
#include <snug/memory/allocator.h>
#include <snug/memory/raw_backend.h>  // EventHandle

namespace snug::memory {

// Devices cuda:0 .. cuda:(kMaxStreamDevices - 1) can have a current stream.
inline constexpr int kMaxStreamDevices = 64;

// The calling thread's current stream on d (0 for CPU devices).
StreamId current_stream(Device d);
// Sets it for the calling thread; d must be a CUDA device with index in
// [0, kMaxStreamDevices), else DeviceError. The stream must belong to d.
void set_current_stream(Device d, StreamId s);

// Makes s current on d for the scope, then restores the previous stream.
class StreamGuard {
 public:
  StreamGuard(Device d, StreamId s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  StreamId prev_;
};

// ---- streams of one's own, made by the raw backend of d's memory
// (memory/raw_backend.h: the CUDA plugin's for cuda:N) -------------------------
// A new stream on d, whose work overlaps other streams' (CUDA: an ordinary
// stream, ordered with the legacy default stream); 0 on devices that have
// one stream (CPU), so callers need not ask which kind d is.
StreamId create_stream(Device d);
// A stream for copies that overlap every other stream's work, the default
// stream's included (CUDA: non-blocking); ordered only by wait_stream. 0 on
// CPU devices.
StreamId create_copy_stream(Device d);
// Work queued on d's stream `waiter` after this call waits, on the device,
// for the work queued on stream `s` so far (the host does not wait). A no-op
// on CPU devices, whose work is done when queued.
void wait_stream(Device d, StreamId waiter, StreamId s);

// ---- timed events on d's streams (a GPU's; CPU devices keep none) -----------
// Recorded on stream s, it keeps the time d reaches it; 0 on a CPU device.
EventHandle record_timed_event(Device d, StreamId s);
bool event_done(Device d, EventHandle e);                  // d has reached e
double elapsed_ms(Device d, EventHandle a, EventHandle b);  // both done
void destroy_event(Device d, EventHandle e);               // 0 is a no-op
// Waits for the work queued on s, then releases it; 0 is a no-op.
void destroy_stream(Device d, StreamId s);
// Makes d the calling thread's current device, so that work on d that follows
// needs no device switch (CUDA: cudaSetDevice; nothing for CPU devices). For a
// thread that works on one device, such as a pipeline stage.
void set_current_device(Device d);

}  // namespace snug::memory
