// SPDX-License-Identifier: MIT
// Geometry<N>: how a CUDA kernel finds the N operands of element i of an
// elementwise loop. Plain C++ (no CUDA header), so the host builds it, the
// kernel reads it, and tests/test_cuda_host.cpp checks it on the CPU.
//
// NOTE [ CUDA elementwise geometry ]
// The host drops size-1 dims and merges neighbouring dims that are contiguous
// for every operand (the same coalescing as core/cpu/loop.h's make_loop), then
// passes the result by value to the kernel. Element i (0 <= i < numel, in
// row-major order of the coalesced shape) has, for operand k, the offset
//   off[k] = sum_d idx_d(i) * strides[k][d]      (in elements; 0 = broadcast)
// where idx_d(i) are the row-major digits of i. When every operand is dense
// and in order (`dense`), off[k] == i and the division is skipped.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include <snug/base/error.h>
#include <snug/base/macros.h>

namespace snug::cuda {

inline constexpr int kMaxDims = 16;

template <int N>
struct Geometry {
  int ndim = 0;
  bool dense = false;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  // The offsets of element i (see the NOTE).
  SNUG_HOST_DEVICE SNUG_INLINE void offsets(int64_t i, int64_t* off) const {
    if (dense) {
      for (int k = 0; k < N; ++k) off[k] = i;
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t q = i / sizes[d];
      const int64_t idx = i - q * sizes[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

// shape: the loop's shape; strides[k]: operand k's strides over that shape in
// elements (right-aligned like shape, 0 where the operand is broadcast).
template <int N>
Geometry<N> make_geometry(const std::vector<int64_t>& shape, const std::array<std::vector<int64_t>, N>& strides) {
  SNUG_CHECK(shape.size() <= static_cast<std::size_t>(kMaxDims), ShapeError, "cuda: at most ", kMaxDims,
             " dims are supported, got ", shape.size());
  Geometry<N> g;
  g.numel = 1;
  for (int64_t s : shape) g.numel *= s;
  int nd = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = g.strides[k][nd - 1] == strides[k][i] * shape[i];
    if (merge) {
      g.sizes[nd - 1] *= shape[i];
      for (int k = 0; k < N; ++k) g.strides[k][nd - 1] = strides[k][i];
      continue;
    }
    g.sizes[nd] = shape[i];
    for (int k = 0; k < N; ++k) g.strides[k][nd] = strides[k][i];
    ++nd;
  }
  g.ndim = nd;
  g.dense = nd == 0;
  if (nd == 1) {
    g.dense = true;
    for (int k = 0; k < N; ++k) g.dense = g.dense && g.strides[k][0] == 1;
  }
  return g;
}

// The strides of a tensor of shape `from` broadcast to `to` (right-aligned;
// 0 for added dims and for size-1 dims that are expanded).
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& from,
                                              const std::vector<int64_t>& from_strides,
                                              const std::vector<int64_t>& to) {
  std::vector<int64_t> out(to.size(), 0);
  const int64_t lead = int64_t(to.size()) - int64_t(from.size());
  for (int64_t i = 0; i < int64_t(to.size()); ++i) {
    const int64_t j = i - lead;
    out[i] = (j < 0 || from[j] == 1) ? 0 : from_strides[j];
  }
  return out;
}

}  // namespace snug::cuda
