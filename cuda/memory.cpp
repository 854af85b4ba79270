// SPDX-License-Identifier: MIT
// Raw memory for the caching allocator (memory/raw_backend.h): device memory
// (cudaMalloc) for every cuda:N pool, with its streams, and pinned host
// memory (cudaHostAlloc) for memory/pinned.h's pool that stages host <-> device
// copies. Both implement the
// allocator's events with CUDA events, which is what NOTE [ Stream-aware
// reuse ] (memory/caching_allocator.h) needs: a block used on a second stream
// goes back to the pool only when the event recorded on that stream at free
// time has completed.
#include <cuda_runtime.h>
#include <unistd.h>

#include <memory>

#include <snug/cuda/check.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/pinned.h>
#include <snug/memory/raw_backend.h>

namespace snug::cuda {

namespace {

using memory::EventHandle;
using memory::StreamId;

// Events shared by both backends. Created per record (the allocator destroys
// each one once it has completed); timing off, which makes them cheap.
EventHandle record_cuda_event(StreamId stream) {
  cudaEvent_t e = nullptr;
  SNUG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SNUG_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
  return reinterpret_cast<EventHandle>(e);
}
bool query_cuda_event(EventHandle h) {
  const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(h));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error
    return false;
  }
  SNUG_CUDA_CHECK(err);
  return false;
}

class DeviceMemoryBackend final : public memory::RawBackend {
 public:
  explicit DeviceMemoryBackend(int device) : device_(device) {}
  const char* name() const override { return "cuda"; }
  void* alloc(std::size_t nbytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // the caching allocator frees its cache, retries, then throws OutOfMemoryError
      return nullptr;
    }
    SNUG_CUDA_CHECK(err);
    return p;
  }
  void free(void* p, std::size_t) override {
    DeviceGuard g(device_);
    SNUG_CUDA_CHECK(cudaFree(p));
  }
  std::size_t total_memory() const override {
    DeviceGuard g(device_);
    std::size_t free_b = 0, total = 0;
    SNUG_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return total;
  }
  std::size_t free_memory() const override {
    DeviceGuard g(device_);
    std::size_t free_b = 0, total = 0;
    SNUG_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return free_b;
  }
  EventHandle record_event(StreamId stream) override {
    DeviceGuard g(device_);
    return record_cuda_event(stream);
  }
  bool query_event(EventHandle e) override { return query_cuda_event(e); }
  void synchronize_event(EventHandle e) override {
    SNUG_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(e)));
  }
  void destroy_event(EventHandle e) override { SNUG_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e))); }
  StreamId create_stream() override {
    DeviceGuard g(device_);
    return cuda::create_stream();
  }
  StreamId create_copy_stream() override {
    DeviceGuard g(device_);
    return cuda::create_copy_stream();
  }
  void wait_stream(StreamId waiter, StreamId s) override {
    DeviceGuard g(device_);
    cuda::stream_wait(waiter, s);
  }
  EventHandle record_timed_event(StreamId stream) override {
    DeviceGuard g(device_);
    return cuda::record_event(stream);  // with timing (the allocator's events have none)
  }
  double elapsed_ms(EventHandle a, EventHandle b) override { return cuda::elapsed_ms(a, b); }
  void destroy_stream(StreamId s) override {
    DeviceGuard g(device_);
    cuda::synchronize_stream(s);
    cuda::destroy_stream(s);
  }
  void make_current() override { set_device(device_); }

 private:
  int device_;
};

class PinnedHostBackend final : public memory::RawBackend {
 public:
  const char* name() const override { return "cuda_pinned"; }
  void* alloc(std::size_t nbytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    SNUG_CUDA_CHECK(err);
    return p;
  }
  void free(void* p, std::size_t) override { SNUG_CUDA_CHECK(cudaFreeHost(p)); }
  std::size_t total_memory() const override {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : 0;
  }
  EventHandle record_event(StreamId stream) override { return record_cuda_event(stream); }
  bool query_event(EventHandle e) override { return query_cuda_event(e); }
  void synchronize_event(EventHandle e) override {
    SNUG_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(e)));
  }
  void destroy_event(EventHandle e) override { SNUG_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e))); }
};

}  // namespace

std::unique_ptr<memory::RawBackend> make_device_memory_backend(Device d) {
  SNUG_CHECK(d.is_cuda(), DeviceError, "cuda memory backend asked for ", d.str());
  const int n = device_count();
  SNUG_CHECK(d.index >= 0 && d.index < n, DeviceError, d.str(), ": no such CUDA device (", n, " present)");
  return std::make_unique<DeviceMemoryBackend>(d.index);
}

std::unique_ptr<memory::RawBackend> make_pinned_memory_backend() { return std::make_unique<PinnedHostBackend>(); }

// cuda/cuda_api.h's pinned memory is memory/pinned.h's pool, which
// ensure_registered gives this backend when a GPU is present.
void* pinned_allocate(std::size_t bytes) {
  ensure_registered();
  return memory::pinned_allocate(bytes);
}
void pinned_free(void* p) { memory::pinned_free(p); }
void pinned_record_stream(void* p, std::uintptr_t stream) { memory::pinned_record_stream(p, stream); }

}  // namespace snug::cuda
