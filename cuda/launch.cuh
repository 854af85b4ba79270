// SPDX-License-Identifier: MIT
// Shared by the .cu files: launch sizes, launch-error checks, the grid-stride
// elementwise kernel, a block reduction and the row kernels' grid. Only for
// files in cuda/.
#pragma once
#include <cuda_runtime.h>

#include <snug/base/error.h>
#include <snug/core/dtype.h>
#include <snug/cuda/geometry.h>
#include <snug/cuda/kernels.h>

namespace snug::cuda::kernels {

constexpr int kThreads = 256;  // a power of two: block_reduce halves it

inline unsigned grid_for(int64_t n, int64_t cap = 65535 * 4) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

inline cudaStream_t as_stream(StreamHandle s) { return reinterpret_cast<cudaStream_t>(s); }

inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw DeviceError(::snug::str("cuda: launching ", kernel, " failed with ", cudaGetErrorName(err), " (",
                                  cudaGetErrorString(err), ")"));
}

// Element i of g: body(off) with off[k] the offset of operand k. Grid-stride,
// so any numel fits any grid.
template <int N, class Body>
__global__ void elementwise_kernel(Geometry<N> g, Body body) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    int64_t off[N];
    g.offsets(i, off);
    body(off);
  }
}

template <int N, class Body>
void launch_elementwise(const char* name, const Geometry<N>& g, Body body, StreamHandle s) {
  if (g.numel == 0) return;
  elementwise_kernel<N, Body><<<grid_for(g.numel), kThreads, 0, as_stream(s)>>>(g, body);
  check_launch(name);
}

// Combines one value per thread of the block; every thread gets the result.
// buf has blockDim.x entries; blockDim.x is a power of two. The tree order is
// fixed, so results are reproducible run to run.
template <class A, class F>
__device__ A block_reduce(A v, F combine, A* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = combine(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const A r = buf[0];
  __syncthreads();
  return r;
}

template <class A>
struct SumOp {
  __device__ A operator()(A a, A b) const { return a + b; }
};

// The grid of the row kernels (softmax.cu, layer_norm.cu): a block per row,
// up to 65535 * 8 blocks, each then striding over rows.
inline unsigned row_grid(int64_t rows) { return unsigned(rows < 65535 * 8 ? (rows < 1 ? 1 : rows) : 65535 * 8); }

// dispatch on dtype with the device-side storage type (same as the host's).
template <class F>
void dispatch_floating_dev(DType d, const char* op, F&& f) {
  dispatch_floating(d, op, std::forward<F>(f));
}

// Kernels that only move bytes (where, gather) need one instantiation per
// element size, not per dtype: calls f.template operator()<E>() with the
// unsigned integer E of `bytes` bytes; throws DTypeError naming `op` otherwise.
template <class F>
decltype(auto) dispatch_element_size(std::size_t bytes, const char* op, F&& f) {
  switch (bytes) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 8:
      return f.template operator()<uint64_t>();
    default:
      throw DTypeError(str(op, ": unsupported element size ", bytes));
  }
}

}  // namespace snug::cuda::kernels
