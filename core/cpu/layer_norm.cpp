// SPDX-License-Identifier: MIT
// CPU layer norm over the last dim, forward and backward side by side (the
// CUDA twin is cuda/layer_norm.cu).
//   y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps)  (biased var)
//   backward, with xhat = (x - mean) * rstd and gh = g * w:
//     gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))
//     gw = sum_rows(g * xhat),  gb = sum_rows(g)
// The formulas are core/layer_norm_math.h's (layer_norm_row::), shared with
// the CUDA kernels; the AVX-512, AVX2 and NEON rows below are the same
// formulas in vectors.
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <snug/core/cpu/simd_avx512.h>
#elif defined(__AVX2__) && defined(__FMA__)
#include <snug/core/cpu/simd_avx2.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/layer_norm_math.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {
// NOTE [ Half-precision layer norm ]: f16/bf16 rows are widened into f32
// buffers with the bulk converters (one per thread) and the f32 code runs on
// them; a row-wise scalar Half conversion would cost more than the math.
// rowbuf<T>::get(src, buf, n) gives an A-typed view of src: src itself for
// f32/f64, else buf filled with the widened row.
template <class T, class A>
const A* widen_row(const T* src, std::vector<float>& buf, int64_t n) {
  if constexpr (cpu::is_half_storage_v<T>) {
    buf.resize(size_t(n));
    cpu::load_as_float(src, buf.data(), n);
    return buf.data();
  } else {
    return src;
  }
}

#if defined(__AVX512F__)
// NOTE [ Layer norm rows in AVX-512 ]
// `omp simd reduction` vectorised the row sums, but GCC folds the 16 lanes at
// the end of each sum through the stack, one scalar add after another: a
// chain of ~60 cycles, twice per row (mean, then variance; two sums in
// backward), which the next row's work could not hide. On W-GPT's (2048, 128)
// rows that chain was most of the time (`perf annotate`), and two threads
// were slower than one for the backward. These f32 rows keep four vector
// partial sums and fold them with a fixed tree (_mm512_reduce_add_ps), so
// the order, and the result, is the same on every call.
using kernels::detail::head_mask;

// sum over c < C of f(c), f giving 16 lanes (masked lanes must be zero).
template <class F>
inline float row_sum16(int64_t C, F f) {
  // Four named accumulators: GCC keeps an array of them on the stack.
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __mmask16 all = 0xFFFF;
  int64_t c = 0;
  for (; c + 64 <= C; c += 64) {
    a0 = _mm512_add_ps(a0, f(c, all));
    a1 = _mm512_add_ps(a1, f(c + 16, all));
    a2 = _mm512_add_ps(a2, f(c + 32, all));
    a3 = _mm512_add_ps(a3, f(c + 48, all));
  }
  if (c < C) a0 = _mm512_add_ps(a0, f(c, head_mask(C - c)));
  if (c + 16 < C) a1 = _mm512_add_ps(a1, f(c + 16, head_mask(C - c - 16)));
  if (c + 32 < C) a2 = _mm512_add_ps(a2, f(c + 32, head_mask(C - c - 32)));
  if (c + 48 < C) a3 = _mm512_add_ps(a3, f(c + 48, head_mask(C - c - 48)));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void ln_forward_row_f32(const float* x, const float* w, const float* b, float* y, int64_t C, float eps, float* mean,
                        float* rstd) {
  const float mu =
      layer_norm_row::mean(row_sum16(C, [&](int64_t c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x + c); }), C);
  const __m512 vmu = _mm512_set1_ps(mu);
  const float sq = row_sum16(C, [&](int64_t c, __mmask16 m) {
    __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + c), vmu);
    return _mm512_mul_ps(d, d);
  });
  const float rs = layer_norm_row::rstd(sq, C, eps);
  *mean = mu;
  *rstd = rs;
  const __m512 vrs = _mm512_set1_ps(rs);
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = head_mask(C - c);
    // layer_norm_row::normalize_at, 16 columns at a time.
    __m512 h = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vmu), vrs);
    if (w) h = _mm512_mul_ps(h, _mm512_maskz_loadu_ps(m, w + c));
    if (b) h = _mm512_add_ps(h, _mm512_maskz_loadu_ps(m, b + c));
    _mm512_mask_storeu_ps(y + c, m, h);
  }
}

// One row of the backward: gx (if wanted) and the partial sums pw += g * xhat,
// pb += g (if wanted).
void ln_backward_row_f32(const float* g, const float* x, const float* w, float mu, float rs, int64_t C, float* gx,
                         float* pw, float* pb) {
  const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
  auto xhat = [&](int64_t c, __mmask16 m) {
    return _mm512_maskz_mul_ps(m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vmu), vrs);
  };
  auto ghat = [&](int64_t c, __mmask16 m) {  // g * w
    __m512 gv = _mm512_maskz_loadu_ps(m, g + c);
    return w ? _mm512_mul_ps(gv, _mm512_maskz_loadu_ps(m, w + c)) : gv;
  };
  const float m1 = layer_norm_row::mean(row_sum16(C, ghat), C);
  const float m2 = layer_norm_row::mean(
      row_sum16(C, [&](int64_t c, __mmask16 m) { return _mm512_mul_ps(ghat(c, m), xhat(c, m)); }), C);
  const __m512 vm1 = _mm512_set1_ps(m1), vm2 = _mm512_set1_ps(m2);
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = head_mask(C - c);
    const __m512 xh = xhat(c, m);
    if (pw) {
      // pw and pb are read back by the next row: a masked store does not forward
      // to the next masked load (the load waits for the store to reach L1, the
      // hottest spot of this loop in `perf annotate`), so whole vectors use plain
      // loads and stores, which do.
      const __m512 gv = _mm512_maskz_loadu_ps(m, g + c);
      if (m == __mmask16(0xFFFF)) {
        _mm512_storeu_ps(pw + c, _mm512_fmadd_ps(gv, xh, _mm512_loadu_ps(pw + c)));
        _mm512_storeu_ps(pb + c, _mm512_add_ps(gv, _mm512_loadu_ps(pb + c)));
      } else {
        _mm512_mask_storeu_ps(pw + c, m, _mm512_fmadd_ps(gv, xh, _mm512_maskz_loadu_ps(m, pw + c)));
        _mm512_mask_storeu_ps(pb + c, m, _mm512_add_ps(gv, _mm512_maskz_loadu_ps(m, pb + c)));
      }
    }
    if (gx) {
      // layer_norm_row::grad_x_at: rs * (gh - m1 - xh * m2), the last two fused
      const __m512 t = _mm512_fnmadd_ps(xh, vm2, _mm512_sub_ps(ghat(c, m), vm1));
      _mm512_mask_storeu_ps(gx + c, m, _mm512_mul_ps(vrs, t));
    }
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// The AVX2 twins of NOTE [ Layer norm rows in AVX-512 ]: the same four
// partial sums and fixed fold over 8-float vectors, the row's last vector
// masked with vmaskmovps (a lane is on when its sign bit is set).
#define SNUG_LN_ROWS 1

using kernels::detail::head_mask8;
using kernels::detail::reduce_add8;
inline __m256 maskz_load(__m256i m, const float* p) { return _mm256_maskload_ps(p, m); }

// sum over c < C of f(c, mask), f giving 8 lanes (masked lanes must be zero).
template <class F>
inline float row_sum8(int64_t C, F f) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) {
    a0 = _mm256_add_ps(a0, f(c, all));
    a1 = _mm256_add_ps(a1, f(c + 8, all));
    a2 = _mm256_add_ps(a2, f(c + 16, all));
    a3 = _mm256_add_ps(a3, f(c + 24, all));
  }
  if (c < C) a0 = _mm256_add_ps(a0, f(c, head_mask8(C - c)));
  if (c + 8 < C) a1 = _mm256_add_ps(a1, f(c + 8, head_mask8(C - c - 8)));
  if (c + 16 < C) a2 = _mm256_add_ps(a2, f(c + 16, head_mask8(C - c - 16)));
  if (c + 24 < C) a3 = _mm256_add_ps(a3, f(c + 24, head_mask8(C - c - 24)));
  return reduce_add8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

void ln_forward_row_f32(const float* x, const float* w, const float* b, float* y, int64_t C, float eps, float* mean,
                        float* rstd) {
  const float mu = layer_norm_row::mean(row_sum8(C, [&](int64_t c, __m256i m) { return maskz_load(m, x + c); }), C);
  const __m256 vmu = _mm256_set1_ps(mu);
  const float sq = row_sum8(C, [&](int64_t c, __m256i m) {
    const __m256 d = _mm256_and_ps(_mm256_sub_ps(maskz_load(m, x + c), vmu), _mm256_castsi256_ps(m));
    return _mm256_mul_ps(d, d);
  });
  const float rs = layer_norm_row::rstd(sq, C, eps);
  *mean = mu;
  *rstd = rs;
  const __m256 vrs = _mm256_set1_ps(rs);
  for (int64_t c = 0; c < C; c += 8) {
    const __m256i m = head_mask8(C - c);
    // layer_norm_row::normalize_at, 8 columns at a time.
    __m256 h = _mm256_mul_ps(_mm256_sub_ps(maskz_load(m, x + c), vmu), vrs);
    if (w) h = _mm256_mul_ps(h, maskz_load(m, w + c));
    if (b) h = _mm256_add_ps(h, maskz_load(m, b + c));
    _mm256_maskstore_ps(y + c, m, h);
  }
}

void ln_backward_row_f32(const float* g, const float* x, const float* w, float mu, float rs, int64_t C, float* gx,
                         float* pw, float* pb) {
  const __m256 vmu = _mm256_set1_ps(mu), vrs = _mm256_set1_ps(rs);
  auto xhat = [&](int64_t c, __m256i m) {
    return _mm256_and_ps(_mm256_mul_ps(_mm256_sub_ps(maskz_load(m, x + c), vmu), vrs), _mm256_castsi256_ps(m));
  };
  auto ghat = [&](int64_t c, __m256i m) {  // g * w
    const __m256 gv = maskz_load(m, g + c);
    return w ? _mm256_mul_ps(gv, maskz_load(m, w + c)) : gv;
  };
  const float m1 = layer_norm_row::mean(row_sum8(C, ghat), C);
  const float m2 = layer_norm_row::mean(
      row_sum8(C, [&](int64_t c, __m256i m) { return _mm256_mul_ps(ghat(c, m), xhat(c, m)); }), C);
  const __m256 vm1 = _mm256_set1_ps(m1), vm2 = _mm256_set1_ps(m2);
  for (int64_t c = 0; c < C; c += 8) {
    const bool whole = c + 8 <= C;
    const __m256i m = head_mask8(C - c);
    const __m256 xh = xhat(c, m);
    if (pw) {  // whole vectors with plain loads and stores (they forward to the next row's loads)
      const __m256 gv = maskz_load(m, g + c);
      if (whole) {
        _mm256_storeu_ps(pw + c, _mm256_fmadd_ps(gv, xh, _mm256_loadu_ps(pw + c)));
        _mm256_storeu_ps(pb + c, _mm256_add_ps(gv, _mm256_loadu_ps(pb + c)));
      } else {
        _mm256_maskstore_ps(pw + c, m, _mm256_fmadd_ps(gv, xh, maskz_load(m, pw + c)));
        _mm256_maskstore_ps(pb + c, m, _mm256_add_ps(gv, maskz_load(m, pb + c)));
      }
    }
    if (gx) {
      // layer_norm_row::grad_x_at: rs * (gh - m1 - xh * m2), the last two fused
      const __m256 t = _mm256_fnmadd_ps(xh, vm2, _mm256_sub_ps(ghat(c, m), vm1));
      _mm256_maskstore_ps(gx + c, m, _mm256_mul_ps(vrs, t));
    }
  }
}
#elif defined(__aarch64__) && defined(__ARM_NEON)
// The NEON twins of NOTE [ Layer norm rows in AVX-512 ]: four 4-float
// partial sums folded in a fixed order; NEON has no masked loads, so the
// columns past the last whole vector take the scalar formulas of
// core/layer_norm_math.h (added to the folded sum, again in a fixed order).
#define SNUG_LN_ROWS 1

// sum over c < C of f(c): vec(c) gives columns c..c+3, one(c) column c.
template <class V, class S>
inline float row_sum4(int64_t C, V vec, S one) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {
    a0 = vaddq_f32(a0, vec(c));
    a1 = vaddq_f32(a1, vec(c + 4));
    a2 = vaddq_f32(a2, vec(c + 8));
    a3 = vaddq_f32(a3, vec(c + 12));
  }
  for (; c + 4 <= C; c += 4) a0 = vaddq_f32(a0, vec(c));
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; c < C; ++c) s += one(c);
  return s;
}

void ln_forward_row_f32(const float* x, const float* w, const float* b, float* y, int64_t C, float eps, float* mean,
                        float* rstd) {
  const float mu = layer_norm_row::mean(
      row_sum4(C, [&](int64_t c) { return vld1q_f32(x + c); }, [&](int64_t c) { return x[c]; }), C);
  const float32x4_t vmu = vdupq_n_f32(mu);
  const float sq = row_sum4(
      C,
      [&](int64_t c) {
        const float32x4_t d = vsubq_f32(vld1q_f32(x + c), vmu);
        return vmulq_f32(d, d);
      },
      [&](int64_t c) { return (x[c] - mu) * (x[c] - mu); });
  const float rs = layer_norm_row::rstd(sq, C, eps);
  *mean = mu;
  *rstd = rs;
  const float32x4_t vrs = vdupq_n_f32(rs);
  int64_t c = 0;
  for (; c + 4 <= C; c += 4) {  // layer_norm_row::normalize_at, 4 columns at a time
    float32x4_t h = vmulq_f32(vsubq_f32(vld1q_f32(x + c), vmu), vrs);
    if (w) h = vmulq_f32(h, vld1q_f32(w + c));
    if (b) h = vaddq_f32(h, vld1q_f32(b + c));
    vst1q_f32(y + c, h);
  }
  for (; c < C; ++c) y[c] = layer_norm_row::normalize_at(x[c], mu, rs, w, b, c);
}

void ln_backward_row_f32(const float* g, const float* x, const float* w, float mu, float rs, int64_t C, float* gx,
                         float* pw, float* pb) {
  const float32x4_t vmu = vdupq_n_f32(mu), vrs = vdupq_n_f32(rs);
  auto xhat = [&](int64_t c) { return vmulq_f32(vsubq_f32(vld1q_f32(x + c), vmu), vrs); };
  auto ghat = [&](int64_t c) {  // g * w
    const float32x4_t gv = vld1q_f32(g + c);
    return w ? vmulq_f32(gv, vld1q_f32(w + c)) : gv;
  };
  auto xhat1 = [&](int64_t c) { return layer_norm_row::xhat(x[c], mu, rs); };
  auto ghat1 = [&](int64_t c) { return layer_norm_row::ghat(g[c], w, c); };
  const float m1 = layer_norm_row::mean(row_sum4(C, ghat, ghat1), C);
  const float m2 = layer_norm_row::mean(row_sum4(
                                            C, [&](int64_t c) { return vmulq_f32(ghat(c), xhat(c)); },
                                            [&](int64_t c) { return ghat1(c) * xhat1(c); }),
                                        C);
  const float32x4_t vm1 = vdupq_n_f32(m1), vm2 = vdupq_n_f32(m2);
  int64_t c = 0;
  for (; c + 4 <= C; c += 4) {
    const float32x4_t xh = xhat(c);
    if (pw) {
      const float32x4_t gv = vld1q_f32(g + c);
      vst1q_f32(pw + c, vfmaq_f32(vld1q_f32(pw + c), gv, xh));
      vst1q_f32(pb + c, vaddq_f32(vld1q_f32(pb + c), gv));
    }
    // layer_norm_row::grad_x_at: rs * (gh - m1 - xh * m2), the last two fused
    if (gx) vst1q_f32(gx + c, vmulq_f32(vrs, vfmsq_f32(vsubq_f32(ghat(c), vm1), xh, vm2)));
  }
  for (; c < C; ++c) {
    const float xh = xhat1(c);
    if (pw) {
      pw[c] += g[c] * xh;
      pb[c] += g[c];
    }
    if (gx) gx[c] = layer_norm_row::grad_x_at(ghat1(c), xh, m1, m2, rs);
  }
}
#endif

}  // namespace

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                            const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr bool half = cpu::is_half_storage_v<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    std::vector<float> wbuf, bbuf;
    const A* wp = weight.defined() ? widen_row<T, A>(static_cast<const T*>(weight.data_ptr()), wbuf, C) : nullptr;
    const A* bp = bias.defined() ? widen_row<T, A>(static_cast<const T*>(bias.data_ptr()), bbuf, C) : nullptr;
    T* yp = static_cast<T*>(out.data_ptr());
    float* mp = static_cast<float*>(mean.data_ptr());
    float* rp = static_cast<float*>(rstd.data_ptr());
#if defined(__AVX512F__) || defined(SNUG_LN_ROWS)
    if constexpr (std::is_same_v<T, float>) {  // NOTE [ Layer norm rows in AVX-512 ] (and their AVX2 twins)
      const float e = float(eps);
#pragma omp parallel for if (R * C > cpu::kParallelGrain) schedule(static)
      for (int64_t r = 0; r < R; ++r) ln_forward_row_f32(xp + r * C, wp, bp, yp + r * C, C, e, mp + r, rp + r);
      return;
    }
#endif
#pragma omp parallel for if (R * C > cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      thread_local std::vector<float> xbuf, ybuf;
      const A* xr = widen_row<T, A>(xp + r * C, xbuf, C);
      // Two passes (mean, then centred squares): stable without Welford.
      // NOTE [ Vector row sums ]: a sum kept in one running float is a chain
      // of dependent adds that the compiler may not reorder (no -ffast-math),
      // which kept these loops scalar: W-GPT's (2048, 128) layer norm took
      // ~440 us forward on two threads. `omp simd reduction` allows the
      // reordering for these loops alone; the order is fixed at compile time,
      // so results stay deterministic.
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += xr[c];
      const A mu = layer_norm_row::mean(s, C);
      A v = 0;
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) {
        A d = xr[c] - mu;
        v += d * d;
      }
      const A rs = layer_norm_row::rstd(v, C, A(eps));
      mp[r] = float(mu);
      rp[r] = float(rs);
      T* yr = yp + r * C;
      if constexpr (half) ybuf.resize(size_t(C));
      for (int64_t c = 0; c < C; ++c) {
        const A h = layer_norm_row::normalize_at(xr[c], mu, rs, wp, bp, c);
        if constexpr (half)
          ybuf[c] = h;
        else
          yr[c] = T(h);
      }
      if constexpr (half) cpu::store_from_float(ybuf.data(), yr, C);
    }
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias) {
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr bool half = cpu::is_half_storage_v<T>;
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    std::vector<float> wbuf;
    const A* wp = weight.defined() ? widen_row<T, A>(static_cast<const T*>(weight.data_ptr()), wbuf, C) : nullptr;
    const float* mp = static_cast<const float*>(mean.data_ptr());
    const float* rp = static_cast<const float*>(rstd.data_ptr());
    T* gxp = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    const bool want_wb = grad_weight.defined() || grad_bias.defined();
    const int nt = (R * C > cpu::kParallelGrain) ? omp_get_max_threads() : 1;
    // Per-thread partial sums for gw/gb, reduced in a fixed order afterwards
    // so results do not depend on scheduling.
    std::vector<A> part_w(want_wb ? size_t(nt) * C : 0, A(0)), part_b(want_wb ? size_t(nt) * C : 0, A(0));
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), T_ = omp_get_num_threads();
      int64_t r0 = R * t / T_, r1 = R * (t + 1) / T_;
      A* pw = want_wb ? part_w.data() + size_t(t) * C : nullptr;
      A* pb = want_wb ? part_b.data() + size_t(t) * C : nullptr;
      std::vector<float> gbuf, xbuf, obuf(half ? size_t(C) : 0);
#if defined(__AVX512F__) || defined(SNUG_LN_ROWS)
      if constexpr (std::is_same_v<T, float>) {  // NOTE [ Layer norm rows in AVX-512 ] (and their AVX2 twins)
        for (int64_t r = r0; r < r1; ++r)
          ln_backward_row_f32(gp + r * C, xp + r * C, wp, mp[r], rp[r], C, gxp ? gxp + r * C : nullptr, pw, pb);
        r1 = r0;  // done: skip the generic loop
      }
#endif
      for (int64_t r = r0; r < r1; ++r) {
        const A* gr = widen_row<T, A>(gp + r * C, gbuf, C);
        const A* xr = widen_row<T, A>(xp + r * C, xbuf, C);
        A mu = A(mp[r]), rs = A(rp[r]);
        A sum_gh = 0, sum_ghx = 0;
        // NOTE [ Vector row sums ]; pw and pb are per column, no dependence.
#pragma omp simd reduction(+ : sum_gh, sum_ghx)
        for (int64_t c = 0; c < C; ++c) {
          const A xh = layer_norm_row::xhat(xr[c], mu, rs);
          const A g = gr[c];
          const A gh = layer_norm_row::ghat(g, wp, c);
          sum_gh += gh;
          sum_ghx += gh * xh;
          if (pw) {
            pw[c] += g * xh;
            pb[c] += g;
          }
        }
        if (gxp) {
          const A m1 = layer_norm_row::mean(sum_gh, C), m2 = layer_norm_row::mean(sum_ghx, C);
          T* gxr = gxp + r * C;
          for (int64_t c = 0; c < C; ++c) {
            const A gx = layer_norm_row::grad_x_at(layer_norm_row::ghat(gr[c], wp, c),
                                                   layer_norm_row::xhat(xr[c], mu, rs), m1, m2, rs);
            if constexpr (half)
              obuf[c] = gx;
            else
              gxr[c] = T(gx);
          }
          if constexpr (half) cpu::store_from_float(obuf.data(), gxr, C);
        }
      }
    }
    if (want_wb) {
      T* gw = grad_weight.defined() ? static_cast<T*>(grad_weight.data_ptr()) : nullptr;
      T* gb = grad_bias.defined() ? static_cast<T*>(grad_bias.data_ptr()) : nullptr;
      for (int64_t c = 0; c < C; ++c) {
        A sw = 0, sb = 0;
        for (int t = 0; t < nt; ++t) {
          sw += part_w[size_t(t) * C + c];
          sb += part_b[size_t(t) * C + c];
        }
        if (gw) gw[c] = T(sw);
        if (gb) gb[c] = T(sb);
      }
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL
