// SPDX-License-Identifier: MIT
// CPU softmax and log-softmax along one dim, forward and backward.
//
//   softmax:      y_i = exp(x_i - m) / s,        s = sum_j exp(x_j - m), m = max_j x_j
//   log_softmax:  y_i = x_i - m - log(s)
//   backward:     softmax      dx_i = y_i (g_i - sum_j g_j y_j)
//                 log_softmax  dx_i = g_i - exp(y_i) sum_j g_j
//
// Subtracting the row max keeps exp() from overflowing. f16/bf16 compute in
// f32; row sums accumulate in double for f32/f64 (NOTE [ Reduction
// accumulators ] in cpu/reduce.cpp) and in f32 for the half types.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/cpu/softmax_row.h>

#if defined(__AVX512F__)
#include <snug/core/cpu/simd_avx512.h>
#endif

namespace snug {

namespace {

template <class T> using sum_t = std::conditional_t<std::is_same_v<compute_t<T>, float> &&
                                                        !std::is_same_v<T, float>, float, double>;

// The rows along `dim`: every index of the other dims, with per-operand
// base offsets computed from the operands' own strides (in elements).
template <int N>
struct Rows {
  int64_t count = 1, len = 1;
  int64_t step[N];  // stride along dim, per operand
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides[N];

  Rows(const Shape& shape, int64_t dim, const std::array<const Tensor*, N>& ops) {
    len = shape[dim];
    for (int k = 0; k < N; ++k) step[k] = ops[k]->strides()[dim];
    for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
      if (i == dim || shape[i] == 1) continue;
      sizes.push_back(shape[i]);
      for (int k = 0; k < N; ++k) strides[k].push_back(ops[k]->strides()[i]);
      count *= shape[i];
    }
  }
  void offsets(int64_t r, int64_t* off) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      int64_t i = r % sizes[d];
      r /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

constexpr int kLanes = 16;  // independent partial results, so the loops vectorize

void softmax_backward_row_f32(const float* g, const float* y, float* d, int64_t L, bool log) {
  double sl[kLanes] = {};
  int64_t i = 0;
  if (log) {
    for (; i + kLanes <= L; i += kLanes)
      for (int j = 0; j < kLanes; ++j) sl[j] += g[i + j];
    for (int j = 0; i + j < L; ++j) sl[j] += g[i + j];
  } else {
    for (; i + kLanes <= L; i += kLanes)
      for (int j = 0; j < kLanes; ++j) sl[j] += g[i + j] * y[i + j];
    for (int j = 0; i + j < L; ++j) sl[j] += g[i + j] * y[i + j];
  }
  double s = 0;
  for (double v : sl) s += v;
  const float cs = static_cast<float>(s);
  if (log) {
    for (i = 0; i < L; ++i) d[i] = g[i] - fmath::exp_approx(y[i]) * cs;
  } else {
    for (i = 0; i < L; ++i) d[i] = y[i] * (g[i] - cs);
  }
}

// exp for the strided loops: f32 takes fmath::exp_approx, plain arithmetic that
// vectorizes (NOTE [ Vectorizable exp and erf for float ]); softmax evaluates
// it only at x - max <= 0 and at log-probabilities.
template <class C>
inline C exp_c(C v) {
  if constexpr (std::is_same_v<C, float>) {
    return fmath::exp_approx(v);
  } else {
    return fmath::exp(v);
  }
}

// Contiguous x and out, dim not the last: x is (outer, L, inner) and each
// softmax runs down a column. Blocks of kBlock neighbouring columns are
// processed together so every pass reads whole rows in order (a column
// walk would touch a new cache line, and soon a new page, per element).
template <class T>
void softmax_cols(const T* x, T* y, int64_t outer, int64_t L, int64_t inner, bool log) {
  using C = compute_t<T>;
  using S = sum_t<T>;
  constexpr int64_t kBlock = 64;
  const int64_t nb = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (outer * L * inner > cpu::kParallelGrain && outer * nb > 1)
  for (int64_t u = 0; u < outer * nb; ++u) {
    const int64_t o = u / nb, c0 = (u % nb) * kBlock, w = std::min(kBlock, inner - c0);
    const T* xb = x + o * L * inner + c0;
    T* yb = y + o * L * inner + c0;
    C m[kBlock];
    S s[kBlock];
    for (int64_t j = 0; j < w; ++j) {
      m[j] = -INFINITY;
      s[j] = 0;
    }
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const C v = static_cast<C>(xb[i * inner + j]);
        m[j] = (v != v || v > m[j]) ? v : m[j];
      }
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < w; ++j) s[j] += exp_c(static_cast<C>(xb[i * inner + j]) - m[j]);
    if (log) {
      C ls[kBlock];
      for (int64_t j = 0; j < w; ++j) ls[j] = static_cast<C>(std::log(s[j]));
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < w; ++j) yb[i * inner + j] = static_cast<T>((static_cast<C>(xb[i * inner + j]) - m[j]) - ls[j]);
    } else {
      C inv[kBlock];
      for (int64_t j = 0; j < w; ++j) inv[j] = static_cast<C>(1 / s[j]);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < w; ++j)
          yb[i * inner + j] = static_cast<T>(exp_c(static_cast<C>(xb[i * inner + j]) - m[j]) * inv[j]);
    }
  }
}

}  // namespace

namespace cpu {

// NOTE [ One f32 softmax row ] in core/cpu/softmax_row.h.
void softmax_row_f32(const float* x, float* y, int64_t L, float scale, bool log) {
  float ml[kLanes];
  for (float& m : ml) m = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= L; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = scale * x[i + j];
      ml[j] = (v != v || v > ml[j]) ? v : ml[j];
    }
  for (int j = 0; i + j < L; ++j) {
    const float v = scale * x[i + j];
    ml[j] = (v != v || v > ml[j]) ? v : ml[j];
  }
  // The lanes folded by a fixed vector tree: folded one scalar op after another
  // they were a chain of 16 dependent compares (and 16 adds below) per row,
  // most of a short row's time (W-GPT's log-softmax rows hold 65 logits). A
  // NaN lane may be dropped here; the row still comes out NaN (exp of NaN).
#if defined(__AVX512F__)
  static_assert(kLanes == 16, "one zmm of lanes");
  float m = _mm512_reduce_max_ps(_mm512_loadu_ps(ml));
#else
  float m = ml[0];
  for (int j = 1; j < kLanes; ++j) m = (ml[j] != ml[j] || ml[j] > m) ? ml[j] : m;
#endif
  // exp into y first (log_softmax overwrites it below): a loop without a
  // reduction vectorizes; the sum then runs over y.
  for (i = 0; i < L; ++i) y[i] = fmath::exp_approx(scale * x[i] - m);
  double sl[kLanes] = {};
  for (i = 0; i + kLanes <= L; i += kLanes)
    for (int j = 0; j < kLanes; ++j) sl[j] += y[i + j];
  for (int j = 0; i + j < L; ++j) sl[j] += y[i + j];
#if defined(__AVX512F__)
  const double s = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_loadu_pd(sl), _mm512_loadu_pd(sl + 8)));
#else
  double s = 0;
  for (double v : sl) s += v;
#endif
  if (log) {
    const float ls = static_cast<float>(std::log(s));
    for (i = 0; i < L; ++i) y[i] = (scale * x[i] - m) - ls;
  } else {
    const float inv = static_cast<float>(1 / s);
    for (i = 0; i < L; ++i) y[i] *= inv;
  }
}

}  // namespace cpu

// x (any strides) -> out (x's shape).
void CpuBackend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (x.numel() == 0) return;
  const Rows<2> R(x.shape(), dim, {&x, &out});
  const int64_t L = R.len, sx = R.step[0], so = R.step[1];
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&]<class T>() {
    using C = compute_t<T>;
    using S = sum_t<T>;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    if (dim + 1 < x.dim() && x.is_contiguous() && out.is_contiguous()) {
      const int64_t inner = numel_of(Shape(x.shape().begin() + dim + 1, x.shape().end()));
      softmax_cols(xp, op, x.numel() / (L * inner), L, inner, log);
      return;
    }
#pragma omp parallel for schedule(static) if (R.count * L > cpu::kParallelGrain && R.count > 1)
    for (int64_t r = 0; r < R.count; ++r) {
      int64_t off[2];
      R.offsets(r, off);
      const T* xr = xp + off[0];
      T* yr = op + off[1];
      if constexpr (std::is_same_v<T, float>) {
        if (sx == 1 && so == 1) {
          cpu::softmax_row_f32(xr, yr, L, 1.0f, log);
          continue;
        }
      } else if constexpr (cpu::is_half_storage_v<T>) {
        if (sx == 1 && so == 1) {  // widen the row, the f32 row kernel, round once
          thread_local std::vector<float> buf;
          buf.resize(size_t(2 * L));
          cpu::load_as_float(xr, buf.data(), L);
          cpu::softmax_row_f32(buf.data(), buf.data() + L, L, 1.0f, log);
          cpu::store_from_float(buf.data() + L, yr, L);
          continue;
        }
      }
      // A NaN anywhere makes m NaN, and the whole row NaN, as in PyTorch.
      C m = -INFINITY;
      for (int64_t i = 0; i < L; ++i) {
        C v = static_cast<C>(xr[i * sx]);
        m = (v != v || v > m) ? v : m;
      }
      S s = 0;
      if (log) {
        for (int64_t i = 0; i < L; ++i) s += fmath::exp(static_cast<C>(xr[i * sx]) - m);
        // (x - m) - log(s), not x - (m + log(s)): x - m is exact near the
        // max, and m + log(s) would round away log(s)'s low bits when |m| is large.
        const C ls = static_cast<C>(std::log(s));
        for (int64_t i = 0; i < L; ++i) yr[i * so] = static_cast<T>((static_cast<C>(xr[i * sx]) - m) - ls);
      } else if constexpr (std::is_same_v<T, C>) {
        // Store exp() in out, then scale it: one exp per element.
        for (int64_t i = 0; i < L; ++i) {
          C e = fmath::exp(xr[i * sx] - m);
          yr[i * so] = e;
          s += e;
        }
        const C inv = static_cast<C>(1 / s);
        for (int64_t i = 0; i < L; ++i) yr[i * so] *= inv;
      } else {
        // 16-bit out would round exp() before the scaling: recompute instead.
        for (int64_t i = 0; i < L; ++i) s += fmath::exp(static_cast<C>(xr[i * sx]) - m);
        const C inv = static_cast<C>(1 / s);
        for (int64_t i = 0; i < L; ++i) yr[i * so] = static_cast<T>(fmath::exp(static_cast<C>(xr[i * sx]) - m) * inv);
      }
    }
  });
}

// grad_out and y (any strides, same shape) -> grad_in (same shape).
void CpuBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                                  const Tensor& grad_in) {
  if (y.numel() == 0) return;
  const Rows<3> R(y.shape(), dim, {&grad_out, &y, &grad_in});
  const int64_t L = R.len, sg = R.step[0], sy = R.step[1], sd = R.step[2];
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&]<class T>() {
    using C = compute_t<T>;
    using S = sum_t<T>;
    const T* gp = grad_out.data<T>();
    const T* yp = y.data<T>();
    T* dp = grad_in.data<T>();
#pragma omp parallel for schedule(static) if (R.count * L > cpu::kParallelGrain && R.count > 1)
    for (int64_t r = 0; r < R.count; ++r) {
      int64_t off[3];
      R.offsets(r, off);
      const T* g = gp + off[0];
      const T* yr = yp + off[1];
      T* d = dp + off[2];
      if constexpr (std::is_same_v<T, float>) {
        if (sg == 1 && sy == 1 && sd == 1) {
          softmax_backward_row_f32(g, yr, d, L, log);
          continue;
        }
      } else if constexpr (cpu::is_half_storage_v<T>) {
        if (sg == 1 && sy == 1 && sd == 1) {  // widen the rows, the f32 row kernel, round once
          thread_local std::vector<float> buf;
          buf.resize(size_t(3 * L));
          cpu::load_as_float(g, buf.data(), L);
          cpu::load_as_float(yr, buf.data() + L, L);
          softmax_backward_row_f32(buf.data(), buf.data() + L, buf.data() + 2 * L, L, log);
          cpu::store_from_float(buf.data() + 2 * L, d, L);
          continue;
        }
      }
      S s = 0;
      if (log) {
        for (int64_t i = 0; i < L; ++i) s += static_cast<C>(g[i * sg]);
        const C cs = static_cast<C>(s);
        for (int64_t i = 0; i < L; ++i)
          d[i * sd] = static_cast<T>(static_cast<C>(g[i * sg]) - fmath::exp(static_cast<C>(yr[i * sy])) * cs);
      } else {
        for (int64_t i = 0; i < L; ++i) s += static_cast<C>(g[i * sg]) * static_cast<C>(yr[i * sy]);
        const C cs = static_cast<C>(s);
        for (int64_t i = 0; i < L; ++i)
          d[i * sd] = static_cast<T>(static_cast<C>(yr[i * sy]) * (static_cast<C>(g[i * sg]) - cs));
      }
    }
  });
}

}  // namespace snug
