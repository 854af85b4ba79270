// SPDX-License-Identifier: MIT
// Device queries and raw device memory: the runtime half of cuda/cuda_api.h
// (streams and events: cuda/stream.cu).
#include <cuda_runtime.h>

#include <snug/cuda/check.h>
#include <snug/cuda/cuda_api.h>

namespace snug::cuda {

namespace {
// "no driver" and "no device" mean zero GPUs, not an error: CI has nvcc but no
// GPU, and a CPU-only machine must be able to ask.
int query_device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

}  // namespace

void require_device(const char* what, int device) {
  const int n = device_count();
  SNUG_CHECK(n > 0, DeviceError, "cuda::", what, ": no CUDA GPU is present (device_count() == 0)");
  SNUG_CHECK(device >= 0 && device < n, DeviceError, "cuda::", what, ": device ", device, " is out of range (", n,
             " device", n == 1 ? "" : "s", " present)");
}

int device_count() {
  static const int n = query_device_count();  // the set of GPUs does not change under a process
  return n;
}

int runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

int current_device() {
  require_device("current_device", 0);
  int d = 0;
  SNUG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  require_device("set_device", device);
  SNUG_CUDA_CHECK(cudaSetDevice(device));
}

DeviceProperties properties(int device) {
  require_device("properties", device);
  cudaDeviceProp p{};
  SNUG_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceProperties out;
  out.index = device;
  out.name = p.name;
  out.total_memory = p.totalGlobalMem;
  out.major = p.major;
  out.minor = p.minor;
  out.multiprocessor_count = p.multiProcessorCount;
  return out;
}

void* device_malloc(std::size_t bytes) {
  require_device("device_malloc", 0);
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  SNUG_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* ptr) {
  if (ptr) SNUG_CUDA_CHECK(cudaFree(ptr));
}

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes) SNUG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) SNUG_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void synchronize() { SNUG_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace snug::cuda
