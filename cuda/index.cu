// SPDX-License-Identifier: MIT
// Index kernels (gather / index_select, scatter_add / index_add), the CUDA
// twin of core/cpu/index.cpp. The geometry is prepared by CudaBackend exactly
// as core/cpu/index.cpp prepares it for the CPU loop: index_select is a
// gather whose 1-D index is broadcast over the other dims, index_add the same
// trick on scatter_add.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

template <class E>
struct GatherBody {
  E* out;
  const int64_t* index;
  const E* x;
  int64_t jump;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = x[off[2] + index[off[1]] * jump]; }
};

// One thread per position of the outer geometry; each walks dim in order, so
// every output element is updated by one thread in a fixed order
// (NOTE [ Deterministic scatter ] in core/cpu/index.cpp): no atomics, and the
// same sums as the CPU.
template <class T>
struct ScatterAddBody {
  T* out;
  const int64_t* index;
  const T* src;
  int64_t len, ostep, istep, sstep;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t k = index[off[1] + j * istep];
      T& o = out[off[0] + k * ostep];
      o = static_cast<T>(static_cast<C>(o) + static_cast<C>(src[off[2] + j * sstep]));
    }
  }
};

}  // namespace

void gather(std::size_t elem_size, const Geometry<3>& g, int64_t jump, void* out, const int64_t* index, const void* x,
            StreamHandle s) {
  auto go = [&]<class E>() {
    launch_elementwise<3>("gather", g, GatherBody<E>{static_cast<E*>(out), index, static_cast<const E*>(x), jump}, s);
  };
  dispatch_element_size(elem_size, "gather", go);
}

void scatter_add(DType t, const Geometry<3>& outer, int64_t len, int64_t ostep, int64_t istep, int64_t sstep, void* out,
                 const int64_t* index, const void* src, StreamHandle s) {
  if (len == 0) return;
  dispatch_numeric(t, "scatter_add", [&]<class T>() {
    launch_elementwise<3>(
        "scatter_add", outer,
        ScatterAddBody<T>{static_cast<T*>(out), index, static_cast<const T*>(src), len, ostep, istep, sstep}, s);
  });
}

}  // namespace snug::cuda::kernels
