// SPDX-License-Identifier: MIT
// The host-side plans of CudaBackend's non-elementwise ops: which geometry
// each kernel walks. Plain C++ (shapes and strides in, cuda/geometry.h structs
// out) so tests/test_cuda_host.cpp can run the kernels' loops on the CPU with
// these plans and compare with the CPU backend. Strides are in elements.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <snug/cuda/geometry.h>

namespace snug::cuda {

using Dims = std::vector<int64_t>;

// reduce: out has x's shape with the reduced dims set to 1.
// kept: (x, out) offsets over the kept dims; red: x offsets over the reduced dims.
struct ReducePlan {
  Geometry<2> kept;
  Geometry<1> red;
};
inline ReducePlan plan_reduce(const Dims& shape, const Dims& xs, const Dims& os, const Dims& dims) {
  Dims kept_shape = shape, red_shape = shape;
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    const bool red = std::find(dims.begin(), dims.end(), i) != dims.end();
    (red ? kept_shape : red_shape)[i] = 1;
  }
  return {make_geometry<2>(kept_shape, {xs, os}), make_geometry<1>(red_shape, {xs})};
}

// arg_reduce / softmax rows: every position of the other dims (dim set to 1),
// with the operands' offsets; each row then walks `len` elements `step` apart.
template <int N>
struct RowPlan {
  Geometry<N> rows;
  int64_t len = 0;
  int64_t step[N] = {};
};
template <int N>
RowPlan<N> plan_rows(const Dims& shape, const std::array<Dims, N>& strides, int64_t dim) {
  Dims rows = shape;
  rows[dim] = 1;
  RowPlan<N> p;
  p.rows = make_geometry<N>(rows, strides);
  p.len = shape[dim];
  for (int k = 0; k < N; ++k) p.step[k] = strides[k][dim];
  return p;
}

// gather: out (index's shape) = x gathered along dim. Operands over out's
// shape: (out, index, x with no step along dim); jump = x's stride along dim.
struct GatherPlan {
  Geometry<3> g;
  int64_t jump = 0;
};
inline GatherPlan plan_gather(const Dims& out_shape, const Dims& out_strides, const Dims& index_strides,
                              const Dims& x_strides, int64_t dim) {
  Dims xv = x_strides;
  xv[dim] = 0;  // the index supplies the step along dim
  return {make_geometry<3>(out_shape, {broadcast_strides(out_shape, out_strides, out_shape),
                                       broadcast_strides(out_shape, index_strides, out_shape),
                                       broadcast_strides(out_shape, xv, out_shape)}),
          x_strides[dim]};
}

// scatter_add: for each position of index's shape with dim set to 1, walk dim
// in order: out[o0 + index[o1 + j istep] ostep] += src[o2 + j sstep].
struct ScatterPlan {
  Geometry<3> outer;
  int64_t len = 0, ostep = 0, istep = 0, sstep = 0;
};
inline ScatterPlan plan_scatter(const Dims& index_shape, const Dims& out_strides, const Dims& index_strides,
                                const Dims& src_strides, int64_t dim) {
  Dims outer = index_shape;
  outer[dim] = 1;
  return {make_geometry<3>(outer, {out_strides, index_strides, src_strides}), index_shape[dim], out_strides[dim],
          index_strides[dim], src_strides[dim]};
}

// The strides of a 1-D index (stride s) seen with `shape` along dim
// (index_select, index_add): 0 everywhere but dim.
inline Dims index_strides_along(const Dims& shape, int64_t dim, int64_t s) {
  Dims st(shape.size(), 0);
  st[dim] = s;
  return st;
}

}  // namespace snug::cuda
