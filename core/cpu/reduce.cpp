// SPDX-License-Identifier: MIT
// CPU reductions: CpuBackend::reduce and CpuBackend::arg_reduce.
//
// The math of each reduction is the init/combine/finish functor of
// core/functors.h (NOTE [ One definition of each op's math ]); this file only
// decides the order in which elements meet the functor. Every output element
// is produced by exactly one thread in an order fixed by the shapes alone, so
// results do not depend on the number of threads.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/reduce_dispatch.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

using cpu::kMaxDims;
using cpu::kParallelGrain;

// MaxR/MinR start from -inf/+inf, which an integer accumulator cannot hold.
template <class A, class R>
A init_of(const R& r) {
  if constexpr (std::is_integral_v<A> && std::is_same_v<R, MaxR<A>>) {
    return std::numeric_limits<A>::lowest();
  } else if constexpr (std::is_integral_v<A> && std::is_same_v<R, MinR<A>>) {
    return std::numeric_limits<A>::max();
  } else {
    return r.init();
  }
}

// The reduction's geometry after dropping size-1 dims, ordering dims by x
// stride (outermost first) and merging neighbours of the same kind that are
// contiguous with each other. Kept dims carry their out stride too.
struct Plan {
  int nk = 0, nr = 0;
  int64_t ks[kMaxDims], kx[kMaxDims], ko[kMaxDims];  // kept: size, x stride, out stride
  int64_t rs[kMaxDims], rx[kMaxDims];                // reduced: size, x stride
  int64_t kept = 1, red = 1;                         // element counts
};

Plan make_plan(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  struct D {
    int64_t size, xs, os;
    bool red;
  };
  std::vector<D> ds;
  Plan P;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool red = std::find(dims.begin(), dims.end(), i) != dims.end();
    int64_t n = x.shape()[i];
    (red ? P.red : P.kept) *= n;
    if (n != 1) ds.push_back({n, x.strides()[i], red ? 0 : out.strides()[i], red});
  }
  std::stable_sort(ds.begin(), ds.end(), [](const D& a, const D& b) { return a.xs > b.xs; });
  std::vector<D> merged;
  for (const D& d : ds) {
    if (!merged.empty()) {
      D& m = merged.back();
      if (m.red == d.red && m.xs == d.xs * d.size && (d.red || m.os == d.os * d.size)) {
        m.size *= d.size;
        m.xs = d.xs;
        m.os = d.os;
        continue;
      }
    }
    merged.push_back(d);
  }
  for (const D& d : merged) {
    SNUG_CHECK(P.nk < kMaxDims && P.nr < kMaxDims, ShapeError, "reduce: at most ", kMaxDims,
               " non-mergeable dims are supported, got shape ", shape_str(x.shape()));
    if (d.red) {
      P.rs[P.nr] = d.size;
      P.rx[P.nr++] = d.xs;
    } else {
      P.ks[P.nk] = d.size;
      P.kx[P.nk] = d.xs;
      P.ko[P.nk++] = d.os;
    }
  }
  return P;
}

// x and out offsets of kept index k over the first nd kept dims.
inline void kept_offsets(const Plan& P, int nd, int64_t k, int64_t& xo, int64_t& oo) {
  xo = oo = 0;
  for (int d = nd - 1; d >= 0; --d) {
    int64_t i = k % P.ks[d];
    k /= P.ks[d];
    xo += i * P.kx[d];
    oo += i * P.ko[d];
  }
}

// One odometer step over dims [0, nd) of (sizes, strides); off tracks the offset.
inline void step(int nd, const int64_t* sizes, const int64_t* strides, int64_t* idx, int64_t& off) {
  for (int d = nd - 1; d >= 0; --d) {
    off += strides[d];
    if (++idx[d] < sizes[d]) return;
    off -= strides[d] * sizes[d];
    idx[d] = 0;
  }
}

// 16 independent accumulators let the compiler vectorize a contiguous run
// (one or two zmm registers) without reassociating anything itself: the
// order of operations is fixed by this code, so results are reproducible.
constexpr int kLanes = 16;

template <class A, class T, class R>
inline void combine_run(const R& r, A* lanes, const T* p, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] = r.combine(lanes[j], static_cast<A>(p[i + j]));
  for (int j = 0; i + j < n; ++j) lanes[j] = r.combine(lanes[j], static_cast<A>(p[i + j]));
}

template <class A, class R>
inline A fold(const R& r, const A* lanes) {
  A acc = lanes[0];
  for (int j = 1; j < kLanes; ++j) acc = r.combine(acc, lanes[j]);
  return acc;
}

// Row mode: the innermost reduced dim is contiguous in x (row sums of a
// (B, C) tensor, or any full reduction of a dense tensor). Each output
// combines runs of L contiguous elements into kLanes accumulators.
template <class T, class O, class A, class R>
void reduce_rows(const R& r, const Plan& P, const T* x, O* out) {
  const int64_t L = P.rs[P.nr - 1];
  const int nro = P.nr - 1;  // reduced dims outside the run
  const int64_t runs = P.red / L;

  if (P.kept == 1 && nro == 0 && L > 2 * kParallelGrain) {
    // One long run (a full sum of a big tensor): split it into blocks of a
    // fixed size, reduce the blocks in parallel, then combine the partial
    // results in block order -- the same result for any number of threads.
    const int64_t block = kParallelGrain;
    const int64_t nb = (L + block - 1) / block;
    std::vector<A> part(nb);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      A lanes[kLanes];
      for (auto& l : lanes) l = init_of<A>(r);
      int64_t s = b * block;
      combine_run(r, lanes, x + s, std::min(block, L - s));
      part[b] = fold(r, lanes);
    }
    A acc = part[0];
    for (int64_t b = 1; b < nb; ++b) acc = r.combine(acc, part[b]);
    out[0] = static_cast<O>(r.finish(acc, P.red));
    return;
  }

#pragma omp parallel for schedule(static) if (P.kept * P.red > kParallelGrain && P.kept > 1)
  for (int64_t k = 0; k < P.kept; ++k) {
    int64_t xo, oo;
    kept_offsets(P, P.nk, k, xo, oo);
    A lanes[kLanes];
    for (auto& l : lanes) l = init_of<A>(r);
    int64_t idx[kMaxDims] = {};
    int64_t roff = 0;
    for (int64_t q = 0; q < runs; ++q) {
      combine_run(r, lanes, x + xo + roff, L);
      step(nro, P.rs, P.rx, idx, roff);
    }
    out[oo] = static_cast<O>(r.finish(fold(r, lanes), P.red));
  }
}

// Column mode: the innermost kept dim is contiguous in x (a bias gradient:
// the sum of a (B, C) tensor over B). A block of kBlock columns is
// accumulated at once while walking the reduced dims row by row, so x is
// read once, in order, and nothing is transposed.
template <class T, class O, class A, class R>
void reduce_cols(const R& r, const Plan& P, const T* x, O* out) {
  constexpr int64_t kBlock = 64;
  const int64_t C = P.ks[P.nk - 1], ocs = P.ko[P.nk - 1];
  const int64_t outer = P.kept / C;
  const int64_t nb = (C + kBlock - 1) / kBlock;
  const int nr = P.nr;
#pragma omp parallel for schedule(static) if (P.kept * P.red > kParallelGrain && outer * nb > 1)
  for (int64_t u = 0; u < outer * nb; ++u) {
    const int64_t o = u / nb, c0 = (u % nb) * kBlock, w = std::min(kBlock, C - c0);
    int64_t xo, oo;
    kept_offsets(P, P.nk - 1, o, xo, oo);
    A acc[kBlock];
    for (auto& a : acc) a = init_of<A>(r);
    const T* base = x + xo + c0;
    int64_t idx[kMaxDims] = {};
    int64_t roff = 0;
    for (int64_t q = 0; q < P.red; ++q) {
      const T* p = base + roff;
      if constexpr (cpu::is_half_storage_v<T>) {
        // 16-bit rows widened with the bulk converters (NOTE [ Half-precision
        // elementwise loops ] in core/cpu/loop.h): the scalar Half -> float
        // conversion made a bias gradient under f16 autocast 11% of a step.
        float v[kBlock];
        cpu::load_as_float(p, v, w);
        for (int64_t j = 0; j < w; ++j) acc[j] = r.combine(acc[j], static_cast<A>(v[j]));
      } else if (w == kBlock) {
        for (int64_t j = 0; j < kBlock; ++j) acc[j] = r.combine(acc[j], static_cast<A>(p[j]));
      } else {
        for (int64_t j = 0; j < w; ++j) acc[j] = r.combine(acc[j], static_cast<A>(p[j]));
      }
      step(nr, P.rs, P.rx, idx, roff);
    }
    for (int64_t j = 0; j < w; ++j) out[oo + (c0 + j) * ocs] = static_cast<O>(r.finish(acc[j], P.red));
  }
}

// Anything else (strided or broadcast inputs): one scalar walk per output.
template <class T, class O, class A, class R>
void reduce_generic(const R& r, const Plan& P, const T* x, O* out) {
#pragma omp parallel for schedule(static) if (P.kept * P.red > kParallelGrain && P.kept > 1)
  for (int64_t k = 0; k < P.kept; ++k) {
    int64_t xo, oo;
    kept_offsets(P, P.nk, k, xo, oo);
    A acc = init_of<A>(r);
    int64_t idx[kMaxDims] = {};
    int64_t roff = 0;
    for (int64_t q = 0; q < P.red; ++q) {
      acc = r.combine(acc, static_cast<A>(x[xo + roff]));
      step(P.nr, P.rs, P.rx, idx, roff);
    }
    out[oo] = static_cast<O>(r.finish(acc, P.red));
  }
}

template <class T, class O, class A, class R>
void run_reduce(const R& r, const Plan& P, const T* x, O* out) {
  if (P.kept == 0) return;
  if (P.red > 0 && P.nr > 0 && P.rx[P.nr - 1] == 1) {
    reduce_rows<T, O, A>(r, P, x, out);
  } else if (P.red > 0 && P.nk > 0 && P.kx[P.nk - 1] == 1) {
    reduce_cols<T, O, A>(r, P, x, out);
  } else {
    reduce_generic<T, O, A>(r, P, x, out);
  }
}

}  // namespace

// x is any shape and strides; out has x's shape with the reduced dims set to
// 1 and either x's dtype or i64 (sums and products of integers).
void CpuBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  const Plan P = make_plan(x, dims, out);
  dispatch_all(x.dtype(), reduce_op_name(op), [&]<class T>() {
    using A = ReduceAcc<T>;
    auto go = [&]<class O>() {
      visit_supported<A>(op, [&](auto r) {
        run_reduce<T, O, A>(r, P, x.data<T>(), out.data<O>());  // NOTE [ Integer sums wrap ] (core/functors.h)
      });
    };
    if (out.dtype() == x.dtype()) {
      go.template operator()<T>();
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, int64_t>) {
      SNUG_CHECK(out.dtype() == DType::i64, DTypeError, reduce_op_name(op), ": output dtype ", dtype_name(out.dtype()),
                 " is not supported for input dtype ", dtype_name(x.dtype()), " (expected ", dtype_name(x.dtype()),
                 " or i64)");
      go.template operator()<int64_t>();
    } else {
      throw DTypeError(str(reduce_op_name(op), ": output dtype ", dtype_name(out.dtype()),
                           " is not supported for input dtype ", dtype_name(x.dtype())));
    }
  });
}

// out (i64) has x's shape with `dim` set to 1. Ties give the first index; a
// NaN wins (the first NaN), as in PyTorch.
void CpuBackend::arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) {
  const int64_t L = x.shape()[dim], xs = x.strides()[dim];
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  // Kept dims with their x and out strides (dim itself has size 1 in out).
  std::vector<int64_t> ks, kx, ko;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == dim || x.shape()[i] == 1) continue;
    ks.push_back(x.shape()[i]);
    kx.push_back(x.strides()[i]);
    ko.push_back(out.strides()[i]);
  }
  const int nk = static_cast<int>(ks.size());
  int64_t* o = out.data<int64_t>();
  dispatch_all(x.dtype(), is_max ? "argmax" : "argmin", [&]<class T>() {
    using C = compute_t<T>;
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static) if (n_out * L > kParallelGrain)
    for (int64_t k = 0; k < n_out; ++k) {
      int64_t xo = 0, oo = 0, rem = k;
      for (int d = nk - 1; d >= 0; --d) {
        int64_t i = rem % ks[d];
        rem /= ks[d];
        xo += i * kx[d];
        oo += i * ko[d];
      }
      const T* row = p + xo;
      C best = static_cast<C>(row[0]);
      int64_t bi = 0;
      for (int64_t i = 1; i < L && best == best; ++i) {
        C v = static_cast<C>(row[i * xs]);
        if (v != v || (is_max ? v > best : v < best)) {
          best = v;
          bi = i;
        }
      }
      o[oo] = bi;
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL
