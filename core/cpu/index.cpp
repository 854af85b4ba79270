// SPDX-License-Identifier: MIT
// CPU index ops: index_select, gather (reads) and index_add, scatter_add
// (accumulating writes). Indices are i64 and already bounds-checked by
// core/raw_index.cpp.
//
// Two kernels do all the work, on top of the strided loop of core/cpu/loop.h:
//   gather:      out[p] = x[p with p[dim] := index[p]]
//   scatter_add: out[p with p[dim] := index[p]] += src[p]
// index_select is a gather whose index is the 1-D index broadcast (stride 0)
// over every dim but `dim`; index_add is the same trick on scatter_add.
//
// NOTE [ Deterministic scatter ]
// Several source elements may land on one output element. The scatter loop
// is parallel only over positions in the dims other than `dim`, and each
// position walks `dim` in order, so every output element is updated by one
// thread in a fixed order: results are bitwise reproducible for any number
// of threads, with no atomics.
#include <cstring>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/raw_ops.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

// Copies element bits, so one instantiation serves every dtype of that size.
template <class F>
void dispatch_size(std::size_t size, F&& f) {
  switch (size) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 8:
      return f.template operator()<uint64_t>();
    default:
      throw DTypeError(str("gather: unsupported element size ", size));
  }
}

// out (index's shape) = x gathered along dim; index any strides.
void gather_impl(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  // x seen with index's shape and no step along dim: the index supplies it.
  Strides xs = x.strides();
  xs[dim] = 0;
  const Tensor xv = raw::as_strided(x, index.shape(), xs, x.offset());
  const int64_t jump = x.strides()[dim] * static_cast<int64_t>(x.element_size());  // bytes per index step
  auto L = cpu::make_loop<3>(out.shape(), {&out, &index, &xv});
  dispatch_size(x.element_size(), [&]<class E>() {
    cpu::run_loop<3>(L, [&](std::array<char*, 3> p, const int64_t* s, int64_t n) {
      constexpr int64_t es = sizeof(E);
      if (s[1] == 0 && s[0] == es && s[2] == es) {
        // One index for the whole contiguous row (index_select of rows, an
        // embedding lookup): a plain copy.
        const int64_t j = *reinterpret_cast<const int64_t*>(p[1]);
        std::memcpy(p[0], p[2] + j * jump, static_cast<size_t>(n * es));
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
        *reinterpret_cast<E*>(p[0] + i * s[0]) = *reinterpret_cast<const E*>(p[2] + i * s[2] + j * jump);
      }
    });
  });
}

// out[.., index[p], ..] += src[p] along dim, for p over index's shape.
void scatter_add_impl(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t len = index.shape()[dim];
  if (len == 0 || index.numel() == 0) return;
  // The loop runs over every dim but `dim` (set to size 1); `dim` is walked
  // inside, in order (NOTE [ Deterministic scatter ]).
  Shape outer = index.shape();
  outer[dim] = 1;
  const Tensor ov = raw::as_strided(out, outer, out.strides(), out.offset());
  const Tensor iv = raw::as_strided(index, outer, index.strides(), index.offset());
  const Tensor sv = raw::as_strided(src, outer, src.strides(), src.offset());
  const int64_t es = static_cast<int64_t>(out.element_size());
  const int64_t ostep = out.strides()[dim] * es;
  const int64_t istep = index.strides()[dim] * 8;
  const int64_t sstep = src.strides()[dim] * es;
  auto L = cpu::make_loop<3>(outer, {&ov, &iv, &sv});
  dispatch_numeric(out.dtype(), "scatter_add", [&]<class T>() {
    using C = compute_t<T>;
    cpu::run_loop<3>(L, [&](std::array<char*, 3> p, const int64_t* s, int64_t n) {
      constexpr int64_t es = sizeof(T);
      if (s[1] == 0 && s[0] == es && s[2] == es) {
        // One index per row and contiguous rows (index_add of rows, an
        // embedding's backward): add whole rows.
        for (int64_t j = 0; j < len; ++j) {
          const int64_t k = *reinterpret_cast<const int64_t*>(p[1] + j * istep);
          T* o = reinterpret_cast<T*>(p[0] + k * ostep);
          const T* v = reinterpret_cast<const T*>(p[2] + j * sstep);
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(static_cast<C>(o[i]) + static_cast<C>(v[i]));
        }
        return;
      }
      for (int64_t j = 0; j < len; ++j) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = *reinterpret_cast<const int64_t*>(p[1] + i * s[1] + j * istep);
          T& o = *reinterpret_cast<T*>(p[0] + i * s[0] + k * ostep);
          const T v = *reinterpret_cast<const T*>(p[2] + i * s[2] + j * sstep);
          o = static_cast<T>(static_cast<C>(o) + static_cast<C>(v));
        }
      }
    });
  });
}

// The 1-D index (n) seen with `shape` (whose size along dim is n): stride 0
// everywhere but dim.
Tensor broadcast_index(const Tensor& index, const Shape& shape, int64_t dim) {
  Strides st(shape.size(), 0);
  st[dim] = index.dim() == 0 ? 0 : index.strides()[0];
  return raw::as_strided(index, shape, st, index.offset());
}

}  // namespace

// x (.., S, ..), index (n) -> out (.., n, ..).
void CpuBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  gather_impl(x, dim, broadcast_index(index, out.shape(), dim), out);
}

// out (.., S, ..) += src (.., n, ..) at rows index (n) along dim.
void CpuBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (src.numel() == 0) return;
  scatter_add_impl(out, dim, broadcast_index(index, src.shape(), dim), src);
}

// x, index (same ndim; index.size(d) <= x.size(d) for d != dim) -> out (index's shape).
void CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  gather_impl(x, dim, index, out);
}

// out (read and written), index and src (index.size(d) <= src.size(d)).
void CpuBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_add_impl(out, dim, index, src);
}

}  // namespace snug::SNUG_CPU_LEVEL
