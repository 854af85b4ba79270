// SPDX-License-Identifier: MIT
// CPU softmax and log-softmax along one dim, forward and backward, and the
// causal softmax of attention (the CUDA twin of this file is cuda/softmax.cu).
//
//   softmax:      y_i = exp(x_i - m) / s,        s = sum_j exp(x_j - m), m = max_j x_j
//   log_softmax:  y_i = x_i - m - log(s)
//   backward:     softmax      dx_i = y_i (g_i - sum_j g_j y_j)
//                 log_softmax  dx_i = g_i - exp(y_i) sum_j g_j
//   causal:       softmax(scale x) over the last dim, column j of row i
//                 visible only when j <= i + (Tk - Tq)
//
// The formulas are core/softmax_math.h's (softmax_row::), shared with the CUDA
// kernels; this file walks the rows. f16/bf16 compute in f32; row sums
// accumulate in double for f32/f64 (NOTE [ Reduction accumulators ] in
// cpu/reduce.cpp) and in f32 for the half types.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/softmax_math.h>

#if defined(__AVX512F__)
#include <snug/core/cpu/simd_avx512.h>
#elif defined(__AVX2__) && defined(__FMA__)
#include <snug/core/cpu/simd_avx2.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

using softmax_row::ExactExp;
using softmax_row::FastExp;
using softmax_row::sum_t;

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
static_assert(kLanes == 16, "fold_max and fold_add fold 16 lanes");

// The 16 lanes folded by a fixed vector tree, the same order every call:
// folded one scalar op after another they were a chain of 16 dependent
// compares (and 16 adds) per row, most of a short row's time (W-GPT's
// log-softmax rows hold 65 logits). A NaN lane may be dropped by the x86 max
// (it returns its second operand); the row still comes out NaN (exp of NaN).
inline float fold_max(const float* ml) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps(_mm512_loadu_ps(ml));
#elif defined(__AVX2__) && defined(__FMA__)
  return kernels::detail::reduce_max8(_mm256_max_ps(_mm256_loadu_ps(ml), _mm256_loadu_ps(ml + 8)));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  return vmaxvq_f32(
      vmaxq_f32(vmaxq_f32(vld1q_f32(ml), vld1q_f32(ml + 4)), vmaxq_f32(vld1q_f32(ml + 8), vld1q_f32(ml + 12))));
#else
  float m = ml[0];
  for (int j = 1; j < kLanes; ++j) m = softmax_row::max_nan(m, ml[j]);
  return m;
#endif
}
inline double fold_add(const double* sl) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_loadu_pd(sl), _mm512_loadu_pd(sl + 8)));
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256d a = _mm256_add_pd(_mm256_add_pd(_mm256_loadu_pd(sl), _mm256_loadu_pd(sl + 4)),
                                  _mm256_add_pd(_mm256_loadu_pd(sl + 8), _mm256_loadu_pd(sl + 12)));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  float64x2_t v[8];
  for (int k = 0; k < 8; ++k) v[k] = vld1q_f64(sl + 2 * k);
  for (int w = 4; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) v[k] = vaddq_f64(v[k], v[k + w]);
  return vaddvq_f64(v[0]);
#else
  double s = 0;
  for (int j = 0; j < kLanes; ++j) s += sl[j];
  return s;
#endif
}

// The backward of one contiguous f32 row: c = sum_j backward_term(g_j, y_j)
// in 16 lanes of f64 partial sums (as the forward's sums, NOTE [ One f32
// softmax row ]), then dx_i by softmax_row's formulas with exp_approx.
void softmax_backward_row_f32(const float* g, const float* y, float* d, int64_t L, bool log) {
  double sl[kLanes] = {};
  int64_t i = 0;
  // The branch on `log` is outside the loops, so each vectorizes on its own.
  if (log) {
    for (; i + kLanes <= L; i += kLanes)
      for (int j = 0; j < kLanes; ++j) sl[j] += softmax_row::backward_term(g[i + j], y[i + j], true);
    for (int j = 0; i + j < L; ++j) sl[j] += softmax_row::backward_term(g[i + j], y[i + j], true);
  } else {
    for (; i + kLanes <= L; i += kLanes)
      for (int j = 0; j < kLanes; ++j) sl[j] += softmax_row::backward_term(g[i + j], y[i + j], false);
    for (int j = 0; i + j < L; ++j) sl[j] += softmax_row::backward_term(g[i + j], y[i + j], false);
  }
  const float cs = static_cast<float>(fold_add(sl));
  if (log) {
    for (i = 0; i < L; ++i) d[i] = softmax_row::log_softmax_backward_at(g[i], y[i], cs, FastExp{});
  } else {
    for (i = 0; i < L; ++i) d[i] = softmax_row::softmax_backward_at(g[i], y[i], cs);
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
      for (int64_t j = 0; j < w; ++j) m[j] = softmax_row::max_nan(m[j], static_cast<C>(xb[i * inner + j]));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < w; ++j)
        s[j] += softmax_row::shifted_exp(static_cast<C>(xb[i * inner + j]), m[j], FastExp{});
    if (log) {
      C ls[kBlock];
      for (int64_t j = 0; j < w; ++j) ls[j] = softmax_row::log_sum<C>(s[j]);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < w; ++j)
          yb[i * inner + j] =
              static_cast<T>(softmax_row::log_softmax_at(static_cast<C>(xb[i * inner + j]), m[j], ls[j]));
    } else {
      C inv[kBlock];
      for (int64_t j = 0; j < w; ++j) inv[j] = softmax_row::inverse_sum<C>(s[j]);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < w; ++j)
          yb[i * inner + j] =
              static_cast<T>(softmax_row::softmax_at(static_cast<C>(xb[i * inner + j]), m[j], inv[j], FastExp{}));
    }
  }
}

// NOTE [ One f32 softmax row ]
// y[0, L) = softmax(scale * x[0, L)), or log_softmax when `log`, for one
// contiguous f32 row: softmax, and the causal softmax (scale = 1/sqrt(head
// size), L = the visible part of the row). Max and sum keep 16 lanes of
// partial results so the loops vectorize without reassociating one
// accumulator (the compiler may not without -ffast-math); the sum is in f64;
// exp is fmath::exp_approx (NOTE [ Vectorizable exp and erf for float ]). A
// NaN input makes the row NaN.
void softmax_row_f32(const float* x, float* y, int64_t L, float scale, bool log) {
  float ml[kLanes];
  for (float& m : ml) m = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= L; i += kLanes)
    for (int j = 0; j < kLanes; ++j) ml[j] = softmax_row::max_nan(ml[j], scale * x[i + j]);
  for (int j = 0; i + j < L; ++j) ml[j] = softmax_row::max_nan(ml[j], scale * x[i + j]);
  const float m = fold_max(ml);
  // exp into y first (log_softmax overwrites it below): a loop without a
  // reduction vectorizes; the sum then runs over y.
  for (i = 0; i < L; ++i) y[i] = softmax_row::shifted_exp(scale * x[i], m, FastExp{});
  double sl[kLanes] = {};
  for (i = 0; i + kLanes <= L; i += kLanes)
    for (int j = 0; j < kLanes; ++j) sl[j] += y[i + j];
  for (int j = 0; i + j < L; ++j) sl[j] += y[i + j];
  const double s = fold_add(sl);
  if (log) {
    const float ls = softmax_row::log_sum<float>(s);
    for (i = 0; i < L; ++i) y[i] = softmax_row::log_softmax_at(scale * x[i], m, ls);
  } else {
    const float inv = softmax_row::inverse_sum<float>(s);
    for (i = 0; i < L; ++i) y[i] = softmax_row::normalize(y[i], inv);
  }
}

}  // namespace

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
          softmax_row_f32(xr, yr, L, 1.0f, log);
          continue;
        }
      } else if constexpr (cpu::is_half_storage_v<T>) {
        if (sx == 1 && so == 1) {  // widen the row, the f32 row kernel, round once
          thread_local std::vector<float> buf;
          buf.resize(size_t(2 * L));
          cpu::load_as_float(xr, buf.data(), L);
          softmax_row_f32(buf.data(), buf.data() + L, L, 1.0f, log);
          cpu::store_from_float(buf.data() + L, yr, L);
          continue;
        }
      }
      // A NaN anywhere makes m NaN, and the whole row NaN, as in PyTorch.
      C m = -INFINITY;
      for (int64_t i = 0; i < L; ++i) m = softmax_row::max_nan(m, static_cast<C>(xr[i * sx]));
      S s = 0;
      if (log) {
        for (int64_t i = 0; i < L; ++i) s += softmax_row::shifted_exp(static_cast<C>(xr[i * sx]), m, ExactExp{});
        const C ls = softmax_row::log_sum<C>(s);
        for (int64_t i = 0; i < L; ++i)
          yr[i * so] = static_cast<T>(softmax_row::log_softmax_at(static_cast<C>(xr[i * sx]), m, ls));
      } else if constexpr (std::is_same_v<T, C>) {
        // Store exp() in out, then scale it: one exp per element.
        for (int64_t i = 0; i < L; ++i) {
          C e = softmax_row::shifted_exp(xr[i * sx], m, ExactExp{});
          yr[i * so] = e;
          s += e;
        }
        const C inv = softmax_row::inverse_sum<C>(s);
        for (int64_t i = 0; i < L; ++i) yr[i * so] = softmax_row::normalize(yr[i * so], inv);
      } else {
        // 16-bit out would round exp() before the scaling: recompute instead.
        for (int64_t i = 0; i < L; ++i) s += softmax_row::shifted_exp(static_cast<C>(xr[i * sx]), m, ExactExp{});
        const C inv = softmax_row::inverse_sum<C>(s);
        for (int64_t i = 0; i < L; ++i)
          yr[i * so] = static_cast<T>(softmax_row::softmax_at(static_cast<C>(xr[i * sx]), m, inv, ExactExp{}));
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
      for (int64_t i = 0; i < L; ++i)
        s += softmax_row::backward_term(static_cast<C>(g[i * sg]), static_cast<C>(yr[i * sy]), log);
      const C cs = static_cast<C>(s);
      for (int64_t i = 0; i < L; ++i) {
        const C gi = static_cast<C>(g[i * sg]), yi = static_cast<C>(yr[i * sy]);
        d[i * sd] = static_cast<T>(log ? softmax_row::log_softmax_backward_at(gi, yi, cs, ExactExp{})
                                       : softmax_row::softmax_backward_at(gi, yi, cs));
      }
    }
  });
}

// x (..., Tq, Tk) contiguous -> out (same shape, contiguous): softmax(scale *
// x) over the last dim with column j of row i visible only when j <= i + (Tk
// - Tq). Masked entries are written as 0 and never read, so no Tq x Tk mask
// exists. f32 and f16/bf16 rows take the f32 row kernel (NOTE [ One f32
// softmax row ]); f64 rows the same formulas in a plain loop.
void CpuBackend::causal_softmax(const Tensor& x, double scale, const Tensor& out) {
  const int64_t Tk = x.size(-1), Tq = x.size(-2);
  const int64_t rows = Tk ? x.numel() / Tk : 0;
  const int64_t shift = Tk - Tq;
  dispatch_floating(x.dtype(), "causal_softmax", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out.data_ptr());
    const A sc = A(scale);
#pragma omp parallel for if (rows * Tk > cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % Tq;
      const int64_t visible = std::min<int64_t>(std::max<int64_t>(i + shift + 1, 0), Tk);
      const T* xr = xp + r * Tk;
      T* yr = yp + r * Tk;
      if constexpr (std::is_same_v<T, float>) {
        softmax_row_f32(xr, yr, visible, sc, false);
      } else if constexpr (cpu::is_half_storage_v<T>) {
        // Widen the row, run the f32 row kernel, round once on the way out.
        thread_local std::vector<float> buf;
        buf.resize(size_t(2 * visible));
        cpu::load_as_float(xr, buf.data(), visible);
        softmax_row_f32(buf.data(), buf.data() + visible, visible, sc, false);
        cpu::store_from_float(buf.data() + visible, yr, visible);
      } else {
        A m = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) m = softmax_row::max_nan(m, sc * A(xr[j]));
        sum_t<T> s = 0;
        for (int64_t j = 0; j < visible; ++j) {
          const A e = softmax_row::shifted_exp(sc * A(xr[j]), m, FastExp{});
          yr[j] = T(e);
          s += e;
        }
        const A inv = softmax_row::inverse_sum<A>(s);
        for (int64_t j = 0; j < visible; ++j) yr[j] = T(softmax_row::normalize(A(yr[j]), inv));
      }
      for (int64_t j = visible; j < Tk; ++j) yr[j] = T(0);
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL
