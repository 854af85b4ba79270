// SPDX-License-Identifier: MIT
// The CUDA runtime as plain C++: device queries, raw device memory and the
// elementwise launchers. This header includes no CUDA header, so anything
// (tests, a future backend registration, user code) may include it in every
// build. libsnug implements it by forwarding to the CUDA backend plugin,
// libsnug-cuda.so, loaded on the first call that needs it (cuda/device.cu,
// cuda/elementwise.cu, ... inside it; NOTE [ The CUDA plugin ] in
// cuda/plugin_loader.cpp). Without the plugin (a build without CUDA, or it
// failed to load) there is no device, and calls that need one throw
// DeviceError saying why. Either way there is no #ifdef for the caller.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <snug/core/functors.h>

namespace snug::cuda {

// True when the CUDA backend plugin is loaded (this build made it, SNUG_CUDA
// found nvcc and cuDNN, and it loaded). Loads it.
bool compiled();
// Why there is no CUDA backend: "" once the plugin is loaded, else the
// reason (e.g. "... libsnug-cuda.so was not loaded: dlopen(...) failed:
// libcudart.so.13: cannot open shared object file"). Loads it.
std::string plugin_error();

// Number of usable GPUs: 0 without the CUDA plugin, when no driver is
// installed, or when the driver sees no device. Never throws. Loads the plugin.
int device_count();
inline bool is_available() { return device_count() > 0; }

// CUDA runtime version as the runtime reports it (13000 for 13.0); 0 without CUDA.
int runtime_version();

// The calling thread's current device; throws DeviceError when there is none.
int current_device();
void set_device(int device);

struct DeviceProperties {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;  // bytes of global memory
  int major = 0, minor = 0;      // compute capability
  int multiprocessor_count = 0;
  std::string compute_capability() const { return std::to_string(major) + "." + std::to_string(minor); }
};
// Throws DeviceError if `device` is out of range or there is no GPU.
DeviceProperties properties(int device);

// ---- raw device memory on the current device (no caching: the caching
// allocator will sit on top of these) -----------------------------------------
void* device_malloc(std::size_t bytes);
void device_free(void* ptr);                                         // nullptr is a no-op
void copy_to_device(void* dst, const void* src, std::size_t bytes);  // blocking
void copy_to_host(void* dst, const void* src, std::size_t bytes);    // blocking
void synchronize();                                                  // waits for all work on the current device

// ---- streams and events (on the current device) --------------------------------
// Handles are the cudaStream_t / cudaEvent_t values as integers; stream 0 is
// the default stream, on which snug's kernels run. A StreamHandle is what
// memory::record_stream takes as a StreamId.
using StreamHandle = std::uintptr_t;
using EventHandle = std::uintptr_t;
StreamHandle create_stream();  // an ordinary stream (it orders with the legacy default stream)
// A stream that does not order with the legacy default stream
// (cudaStreamNonBlocking): for copies that overlap kernels; ordered by stream_wait.
StreamHandle create_copy_stream();
void destroy_stream(StreamHandle s);
void synchronize_stream(StreamHandle s);
// Makes `waiter` wait (on the device) for the work queued on `s` so far.
void stream_wait(StreamHandle waiter, StreamHandle s);
EventHandle record_event(StreamHandle s);  // with timing, for elapsed_ms
bool event_done(EventHandle e);
void synchronize_event(EventHandle e);
double elapsed_ms(EventHandle start, EventHandle end);
void destroy_event(EventHandle e);

// Registers the CUDA backend (core/backend.h) and the device-memory factory
// (memory/allocator.h) once, if a GPU is present; a no-op otherwise and
// without the CUDA plugin. core/backend.cpp calls it on the first request for the
// CUDA backend; call it yourself before using memory::allocate on cuda:N
// directly.
void ensure_registered();

// TF32 tensor cores for f32 matmul (off by default: f32 matmul is exact f32
// unless the user opts in, as torch.backends.cuda.matmul.allow_tf32). A
// setting of libsnug's own: it does not load the plugin.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Pinned (page-locked) host memory from its own caching pool, for staging
// host <-> device copies. Throws DeviceError without a GPU.
void* pinned_allocate(std::size_t bytes);
void pinned_free(void* p);  // nullptr is a no-op
// p (from pinned_allocate) is read by an asynchronous copy on `stream`: it is
// reused only after that work is done (NOTE [ Stream-aware reuse ]).
void pinned_record_stream(void* p, std::uintptr_t stream);

// ---- elementwise kernels over contiguous f32 device arrays --------------------
// They instantiate the same functors as the CPU loops (NOTE [ One definition of
// each op's math ] in core/functors.h). Asynchronous on the default stream;
// launch errors throw DeviceError naming the op.
// x, out are (n,); a and b are the op's scalar parameters.
void unary_f32(UnaryOp op, double a, double b, const float* x, float* out, int64_t n);
// x, y, out are (n,).
void binary_f32(BinaryOp op, const float* x, const float* y, float* out, int64_t n);

}  // namespace snug::cuda
