// SPDX-License-Identifier: MIT
// The CPU elementwise engine: walks N operands (operand 0 is the output)
// over a common shape with per-operand strides (0 for broadcast dims), in
// parallel with OpenMP. Kernels supply a typed inner loop; everything else
// (broadcasting, coalescing dims, threading) is written once here.
#pragma once
#include <snug/core/cpu/level.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <snug/core/cpu/half_convert.h>
#include <snug/core/tensor.h>

namespace snug::inline SNUG_CPU_LEVEL::cpu {

inline constexpr int kMaxDims = 16;
// Below this many elements a loop runs on one thread: the fork/join costs more.
inline constexpr int64_t kParallelGrain = 32768;

template <int N>
struct StridedLoop {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];  // in bytes
  std::array<char*, N> base;
  int64_t numel = 1;
};

// Operand strides of t broadcast to `shape` (right-aligned), in bytes.
inline void broadcast_strides(const Tensor& t, const Shape& shape, int64_t* out) {
  int64_t nd = static_cast<int64_t>(shape.size()), td = t.dim(), es = static_cast<int64_t>(t.element_size());
  for (int64_t i = 0; i < nd; ++i) {
    int64_t ti = i - (nd - td);
    out[i] = (ti < 0 || t.shape()[ti] == 1) ? 0 : t.strides()[ti] * es;
  }
}

// Builds the loop: drops size-1 dims and merges dims that are contiguous for
// every operand, so most loops end up 1-D.
template <int N>
StridedLoop<N> make_loop(const Shape& shape, const std::array<const Tensor*, N>& ops) {
  SNUG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), ShapeError, "elementwise: at most ", kMaxDims,
             " dims are supported, got ", shape.size());
  StridedLoop<N> L;
  int64_t st[N][kMaxDims];
  for (int k = 0; k < N; ++k) {
    broadcast_strides(*ops[k], shape, st[k]);
    L.base[k] = static_cast<char*>(ops[k]->data_ptr());
  }
  // Keep non-trivial dims, outermost first.
  int nd = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    L.shape[nd] = shape[i];
    for (int k = 0; k < N; ++k) L.strides[k][nd] = st[k][i];
    ++nd;
  }
  // Merge dim i into i+1 when, for every operand, stride[i] == stride[i+1]*shape[i+1].
  int out = 0;
  for (int i = 0; i < nd; ++i) {
    if (out > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && L.strides[k][out - 1] == L.strides[k][i] * L.shape[i];
      if (merge) {
        L.shape[out - 1] *= L.shape[i];
        for (int k = 0; k < N; ++k) L.strides[k][out - 1] = L.strides[k][i];
        continue;
      }
    }
    L.shape[out] = L.shape[i];
    for (int k = 0; k < N; ++k) L.strides[k][out] = L.strides[k][i];
    ++out;
  }
  L.ndim = out;
  for (int i = 0; i < out; ++i) L.numel *= L.shape[i];
  if (numel_of(shape) == 0) L.numel = 0;
  return L;
}

// Runs inner(ptrs, inner_strides, n) over every innermost row. The rows are
// split among threads by linear index; each thread computes its start
// position once, then steps like an odometer.
template <int N, class Inner>
void run_loop(const StridedLoop<N>& L, Inner&& inner) {
  if (L.numel == 0) return;
  if (L.ndim == 0) {
    int64_t zero[N] = {};
    std::array<char*, N> p = L.base;
    inner(p, zero, int64_t{1});
    return;
  }
  const int last = L.ndim - 1;
  const int64_t row = L.shape[last];
  const int64_t rows = L.numel / row;
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = L.strides[k][last];

  auto do_rows = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    // Rows [r0, r1); within a single row, columns [c0, c1) (used when there is one row).
    int64_t idx[kMaxDims] = {};
    int64_t rem = r0;
    for (int d = last - 1; d >= 0; --d) {
      idx[d] = rem % L.shape[d];
      rem /= L.shape[d];
    }
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) {
      p[k] = L.base[k];
      for (int d = 0; d < last; ++d) p[k] += idx[d] * L.strides[k][d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      std::array<char*, N> q;
      for (int k = 0; k < N; ++k) q[k] = p[k] + c0 * inner_strides[k];
      inner(q, inner_strides, c1 - c0);
      for (int d = last - 1; d >= 0; --d) {  // odometer step
        for (int k = 0; k < N; ++k) p[k] += L.strides[k][d];
        if (++idx[d] < L.shape[d]) break;
        for (int k = 0; k < N; ++k) p[k] -= L.strides[k][d] * L.shape[d];
        idx[d] = 0;
      }
    }
  };

  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (L.numel < kParallelGrain || threads <= 1) {
    do_rows(0, rows, 0, row);
  } else if (rows == 1) {
    // One long row: split the columns.
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t c0 = row * t / nt, c1 = row * (t + 1) / nt;
      if (c1 > c0) do_rows(0, 1, c0, c1);
    }
  } else {
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
      if (r1 > r0) do_rows(r0, r1, 0, row);
    }
  }
}

// NOTE [ Half-precision elementwise loops ]
// A scalar Half -> float conversion is a dozen integer operations with
// branches and keeps a loop from vectorizing. When an operand is f16/bf16 and
// the compute type is float, the contiguous fast path of map() widens each
// input a chunk at a time with the bulk converters of core/cpu/half_convert.cpp
// (AVX-512/F16C, bit-identical to the scalar ones), runs f on float buffers,
// and rounds the chunk back: the same results, several times faster. With no
// f16 operand and every input contiguous, the loop converts in registers
// instead (bf16 -> float is a shift, float -> bf16 an add, a shift and a NaN
// select: core/half.h's scalar code, which the loop vectorizes), without the
// buffers and the converter calls (a bf16 add had taken 1.3-2x the f32 one's
// time; tests/test_elementwise.cpp checks it bit for bit).
template <class T>
inline constexpr bool is_half_storage_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T>
SNUG_INLINE void load_as_float(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Half>)
    half_to_float_array(reinterpret_cast<const uint16_t*>(src), dst, n);
  else if constexpr (std::is_same_v<T, BFloat16>)
    bf16_to_float_array(reinterpret_cast<const uint16_t*>(src), dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
template <class T>
SNUG_INLINE void store_from_float(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Half>)
    float_to_half_array(src, reinterpret_cast<uint16_t*>(dst), n);
  else if constexpr (std::is_same_v<T, BFloat16>)
    float_to_bf16_array(src, reinterpret_cast<uint16_t*>(dst), n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// One element of bf16 (through its bits: a BFloat16 copied as a struct keeps
// GCC from vectorizing the loop, "more than one data ref") or f32 storage, as float.
template <class T>
SNUG_INLINE float load_bits(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return snug::bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
  else
    return static_cast<float>(p[i]);
}
template <class T, class V>
SNUG_INLINE void store_bits(T* p, int64_t i, V v) {
  if constexpr (std::is_same_v<T, BFloat16>)
    reinterpret_cast<uint16_t*>(p)[i] = snug::float_to_bf16(static_cast<float>(v));
  else
    p[i] = static_cast<T>(v);
}

// out[i] = f(in[i]...) with typed loads/stores. Out and In are storage
// types; C is the compute type (float for f16/bf16).
// Call as map<Out, C, In...>(out, f, inputs...) with one In per input.
template <class Out, class C, class... In, class F, class... Ts>
void map(const Tensor& out, F f, const Ts&... in) {
  static_assert(sizeof...(In) == sizeof...(Ts), "map: give one storage type per input");
  constexpr int N = 1 + sizeof...(In);
  auto L = make_loop<N>(out.shape(), {&out, &in...});
  run_loop<N>(L, [&](std::array<char*, N> p, const int64_t* s, int64_t n) {
    bool contiguous = s[0] == static_cast<int64_t>(sizeof(Out));
    size_t k = 1;
    ((contiguous = contiguous && (s[k] == static_cast<int64_t>(sizeof(In)) || s[k] == 0), ++k), ...);
    auto strided = [&]<size_t... I>(std::index_sequence<I...>) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            static_cast<Out>(f(static_cast<C>(*reinterpret_cast<const In*>(p[I + 1] + i * s[I + 1]))...));
    };
    if constexpr (std::is_same_v<C, float> && sizeof...(In) > 0 &&
                  (is_half_storage_v<Out> || (false || ... || is_half_storage_v<In>))) {
      // bf16 and f32 only, every input contiguous: converted in registers
      // (NOTE [ Half-precision elementwise loops ]).
      if constexpr (!std::is_same_v<Out, Half> && (true && ... && !std::is_same_v<In, Half>)) {
        size_t k = 1;
        bool dense = contiguous;
        ((dense = dense && s[k] == static_cast<int64_t>(sizeof(In)), ++k), ...);
        if (dense) {
          Out* o = reinterpret_cast<Out*>(p[0]);
          auto run_bf16 = [&]<size_t... I>(std::index_sequence<I...>) {
            [[maybe_unused]] auto ptrs = std::tuple<const In*...>(reinterpret_cast<const In*>(p[I + 1])...);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) store_bits(o, i, f(load_bits(std::get<I>(ptrs), i)...));
          };
          run_bf16(std::index_sequence_for<In...>{});
          return;
        }
      }
      if (contiguous) {  // NOTE [ Half-precision elementwise loops ]
        constexpr int64_t kChunk = 256;
        Out* o = reinterpret_cast<Out*>(p[0]);
        auto run_half = [&]<size_t... I>(std::index_sequence<I...>) {
          float buf[sizeof...(In)][kChunk];
          float res[kChunk];
          for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
            const int64_t m = std::min(kChunk, n - c0);
            ((s[I + 1] == 0 ? (void)std::fill_n(buf[I], m, static_cast<float>(*reinterpret_cast<const In*>(p[I + 1])))
                            : load_as_float(reinterpret_cast<const In*>(p[I + 1]) + c0, buf[I], m)),
             ...);
#pragma omp simd
            for (int64_t i = 0; i < m; ++i) res[i] = static_cast<float>(f(buf[I][i]...));
            store_from_float(res, o + c0, m);
          }
        };
        run_half(std::index_sequence_for<In...>{});
        return;
      }
    }
    if (contiguous) {
      // Fast path: output contiguous, inputs contiguous or scalar-broadcast.
      Out* o = reinterpret_cast<Out*>(p[0]);
      auto run = [&]<size_t... I>(std::index_sequence<I...>) {
        const bool bcast[] = {(s[I + 1] == 0)...};
        const bool any_bcast = (false || ... || bcast[I]);
        if (!any_bcast) {
          [[maybe_unused]] auto ptrs = std::tuple<const In*...>(reinterpret_cast<const In*>(p[I + 1])...);
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(static_cast<C>(std::get<I>(ptrs)[i])...));
        } else if constexpr (sizeof...(In) == 2) {
          // Tensor op scalar (x * 0.5, x + eps: binary_scalar broadcasts a 0-d
          // tensor) or scalar op tensor: hoist the scalar so the loop vectorizes.
          using A = std::tuple_element_t<0, std::tuple<In...>>;
          using B = std::tuple_element_t<1, std::tuple<In...>>;
          const A* a = reinterpret_cast<const A*>(p[1]);
          const B* b = reinterpret_cast<const B*>(p[2]);
          if (bcast[0] && bcast[1]) {
            const Out v = static_cast<Out>(f(static_cast<C>(a[0]), static_cast<C>(b[0])));
            for (int64_t i = 0; i < n; ++i) o[i] = v;
          } else if (bcast[1]) {
            const C bv = static_cast<C>(b[0]);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(static_cast<C>(a[i]), bv));
          } else {
            const C av = static_cast<C>(a[0]);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(av, static_cast<C>(b[i])));
          }
        } else {
          for (int64_t i = 0; i < n; ++i)
            o[i] = static_cast<Out>(f(static_cast<C>(reinterpret_cast<const In*>(p[I + 1])[bcast[I] ? 0 : i])...));
        }
      };
      run(std::index_sequence_for<In...>{});
    } else {
      strided(std::index_sequence_for<In...>{});
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL::cpu
