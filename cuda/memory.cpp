// SPDX-License-Identifier: MIT
// Raw memory for the caching allocator (memory/raw_backend.h): device memory
// (cudaMalloc) for every cuda:N pool, with its streams, and pinned host
// memory (cudaHostAlloc) for memory/pinned.h's pool that stages host <-> device
// copies, and the reserved ranges of expandable segments (cuMemMap). Both
// implement the allocator's events with CUDA events, which is what NOTE [ Stream-aware
// reuse ] (memory/caching_allocator.h) needs: a block used on a second stream
// goes back to the pool only when the event recorded on that stream at free
// time has completed.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>

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

// NOTE [ Expandable segments on CUDA ]
// policy=expandable (memory/alloc_policy.h) reserves one range of device
// addresses per stream and pool (cuMemAddressReserve) and maps physical memory
// into it a granule at a time (cuMemCreate + cuMemMap + cuMemSetAccess), as
// PyTorch's expandable_segments does. Each granule is its own allocation
// handle, so the front end may unmap any run of granules it mapped, in pieces
// other than it mapped them (cuMemUnmap takes whole mappings only). The driver
// calls come through cudart's cudaGetDriverEntryPointByVersion, so the plugin
// links no libcuda and still loads on a machine without a driver.
namespace vmm {

struct Api {
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  bool ok = false;
};

const Api& api() {
  static const Api a = [] {
    Api r;
    auto get = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return true;
    };
    r.ok = get("cuMemAddressReserve", r.reserve) && get("cuMemAddressFree", r.address_free) &&
           get("cuMemCreate", r.create) && get("cuMemRelease", r.release) && get("cuMemMap", r.map) &&
           get("cuMemUnmap", r.unmap) && get("cuMemSetAccess", r.set_access) &&
           get("cuMemGetAllocationGranularity", r.granularity);
    return r;
  }();
  return a;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace vmm

class DeviceMemoryBackend final : public memory::RawBackend {
 public:
  explicit DeviceMemoryBackend(int device) : device_(device) {}

  // ---- expandable segments (NOTE [ Expandable segments on CUDA ]) ----
  bool can_reserve() const override { return vmm::api().ok && granule() > 0; }
  void* reserve(std::size_t bytes) override {
    if (!can_reserve()) return nullptr;
    DeviceGuard g(device_);
    CUdeviceptr p = 0;
    if (vmm::api().reserve(&p, bytes, 0, 0, 0) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void*>(p);
  }
  bool map(void* at, std::size_t bytes) override {
    const std::size_t gr = granule();
    if (gr == 0 || reinterpret_cast<std::uintptr_t>(at) % gr != 0 || bytes % gr != 0) return false;
    DeviceGuard g(device_);
    const vmm::Api& a = vmm::api();
    const CUmemAllocationProp prop = vmm::device_prop(device_);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (std::size_t off = 0; off < bytes; off += gr) {
      const auto ptr = reinterpret_cast<CUdeviceptr>(static_cast<char*>(at) + off);
      CUmemGenericAllocationHandle h = 0;
      if (a.create(&h, gr, &prop, 0) != CUDA_SUCCESS) {  // out of device memory
        unmap(at, off);
        return false;
      }
      if (a.map(ptr, gr, 0, h, 0) != CUDA_SUCCESS || a.set_access(ptr, gr, &access, 1) != CUDA_SUCCESS) {
        a.release(h);
        unmap(at, off);
        return false;
      }
      std::lock_guard<std::mutex> l(mu_);
      handles_[ptr] = h;
    }
    return true;
  }
  void unmap(void* at, std::size_t bytes) override {
    const std::size_t gr = granule();
    if (gr == 0) return;
    DeviceGuard g(device_);
    // The device may still be reading a granule the allocator already freed
    // on another stream; the front end waits for those (NOTE [ Stream-aware
    // reuse ]), and the default stream's work is done when this is called.
    SNUG_CUDA_CHECK(cudaDeviceSynchronize());
    for (std::size_t off = 0; off < bytes; off += gr) {
      const auto ptr = reinterpret_cast<CUdeviceptr>(static_cast<char*>(at) + off);
      CUmemGenericAllocationHandle h = 0;
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = handles_.find(ptr);
        if (it == handles_.end()) continue;
        h = it->second;
        handles_.erase(it);
      }
      vmm::api().unmap(ptr, gr);
      vmm::api().release(h);
    }
  }
  void release(void* base, std::size_t bytes) override {
    if (!vmm::api().ok) return;
    DeviceGuard g(device_);
    vmm::api().address_free(reinterpret_cast<CUdeviceptr>(base), bytes);
  }
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
  // The driver's mapping granularity for this device (2 MiB on current GPUs); 0: none.
  std::size_t granule() const {
    std::call_once(granule_once_, [this] {
      if (!vmm::api().ok) return;
      const CUmemAllocationProp prop = vmm::device_prop(device_);
      std::size_t g = 0;
      if (vmm::api().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS) granule_ = g;
    });
    return granule_;
  }

  int device_;
  mutable std::once_flag granule_once_;
  mutable std::size_t granule_ = 0;
  std::mutex mu_;
  std::unordered_map<CUdeviceptr, CUmemGenericAllocationHandle> handles_;  // one per mapped granule
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
