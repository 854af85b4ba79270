// SPDX-License-Identifier: MIT
// CPU pooling over (H, W): max, average and adaptive average, forward beside
// backward (the CUDA twin is cuda/pool.cu). The windows and the per-window
// math (Pool2dParams, pool_span, pool_max_window, ...) are core/pool_window.h,
// shared with the CUDA kernels; this file walks planes and keeps the
// vectorized max-pool rows.
#include <omp.h>

#if defined(__AVX512F__)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // as in cpu/gemm_avx512.cpp: intrinsics' pass-through operands
#endif
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/pool_window.h>
#include <snug/core/raw_ops.h>

namespace snug::inline SNUG_CPU_LEVEL {

// Output cell (oh, ow) of a plane reads input rows [h0, h1) and columns
// [w0, w1) (already clipped to the input) and, for avg, divides by the
// window size. Windows are separable: each output row and column has its
// span (pool_span), computed once per call. Planes (n, c) are independent
// and spread over threads.
namespace {

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

using Span = PoolSpan;

// The spans of one dim d (0 = rows, 1 = columns): input length n, output length no.
std::vector<Span> spans_of(const Pool2dParams& p, int d, int64_t n, int64_t no) {
  std::vector<Span> out(static_cast<size_t>(no));
  for (int64_t o = 0; o < no; ++o) out[size_t(o)] = pool_span(p, d, o, n, no);
  return out;
}

#if defined(__AVX512F__)
// One output row of an f32 max pool whose windows are all whole, for column
// stride 1 or 2, 16 output columns at a time with masks at the row's end
// (W-CNN's rows are 12 outputs: a compiler-vectorized loop never fills 16
// lanes there and runs its scalar remainder). Taps are visited in the general
// loop's order, so ties and NaN resolve the same way. x: the plane; h0, c0:
// the first window's top-left; out, idx (or null): the row's Wo outputs.
void max_pool_row_f32(const float* x, int64_t W, int64_t h0, int64_t c0, int64_t kh, int64_t kw, int64_t sw, int64_t Wo,
                      float* out, int64_t* idx) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i step = _mm512_mullo_epi32(lane, _mm512_set1_epi32(int32_t(sw)));  // lane * sw
  for (int64_t ow0 = 0; ow0 < Wo; ow0 += 16) {
    const int64_t n = std::min<int64_t>(16, Wo - ow0);
    const __mmask16 m = __mmask16((1u << n) - 1);
    // Inputs one tap reads for these outputs: (n - 1) sw + 1 floats from column c0 + ow0 sw + tap.
    const int64_t span = (n - 1) * sw + 1;
    const __mmask16 m0 = __mmask16(span >= 16 ? 0xffff : (1u << span) - 1);
    const __mmask16 m1 = __mmask16(span > 16 ? (1u << (span - 16)) - 1 : 0);
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512i arg = _mm512_add_epi32(_mm512_set1_epi32(int32_t(h0 * W + c0 + ow0 * sw)), step);
    for (int64_t h = h0; h < h0 + kh; ++h)
      for (int64_t k = 0; k < kw; ++k) {
        const int64_t w0 = h * W + c0 + ow0 * sw + k;  // flat index of this tap for output ow0
        __m512 v;
        if (sw == 1) {
          v = _mm512_maskz_loadu_ps(m, x + w0);
        } else {  // sw == 2: the even lanes of two consecutive vectors
          const __m512 a = _mm512_maskz_loadu_ps(m0, x + w0), b = _mm512_maskz_loadu_ps(m1, x + w0 + 16);
          v = _mm512_permutex2var_ps(a, evens, b);
        }
        // take = v > best or v is NaN (pool_max_takes; NaN propagates, as in PyTorch)
        const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_blend_ps(take, best, v);
        arg = _mm512_mask_blend_epi32(take, arg, _mm512_add_epi32(_mm512_set1_epi32(int32_t(w0)), step));
      }
    _mm512_mask_storeu_ps(out + ow0, m, best);
    if (idx) {
      _mm512_mask_storeu_epi64(idx + ow0, __mmask8(m & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(arg)));
      if (n > 8)
        _mm512_mask_storeu_epi64(idx + ow0 + 8, __mmask8(m >> 8),
                                 _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(arg, 1)));
    }
  }
}
#endif

}  // namespace

void CpuBackend::pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  const std::vector<Span> rows = spans_of(p, 0, H, Ho), cols = spans_of(p, 1, W, Wo);
  dispatch_floating(x.dtype(), "pool2d", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = ptr<T>(x);
    T* op = ptr<T>(out);
    int64_t* ip = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
    // NOTE [ Max pooling without clipped windows ]
    // The general loop below decides "is this tap the new max" with a branch
    // per tap; on real data that branch is unpredictable and a 2x2 max pool
    // of W-CNN cost 13% of its step. When no window is clipped by padding or
    // the border (every span is the full kernel), a row of outputs is done
    // with the output column innermost and branch-free selects, which
    // vectorizes. The taps are visited in the same order (window rows, then
    // columns), so ties and NaNs resolve exactly as in the general loop.
    bool whole = p.kind == PoolKind::max && Wo > 0;
    for (const Span& r : rows) whole = whole && r.hi - r.lo == p.kernel[0];
    for (const Span& c : cols) whole = whole && c.hi - c.lo == p.kernel[1];
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      if (whole && (p.stride[1] == 1 || p.stride[1] == 2) && H * W <= std::numeric_limits<int32_t>::max()) {
#pragma omp parallel for if (planes * H * W > cpu::kParallelGrain) schedule(static)
        for (int64_t pl = 0; pl < planes; ++pl)
          for (int64_t oh = 0; oh < Ho; ++oh)
            max_pool_row_f32(xp + pl * H * W, W, rows[size_t(oh)].lo, cols[0].lo, p.kernel[0], p.kernel[1], p.stride[1],
                             Wo, op + pl * Ho * Wo + oh * Wo, ip ? ip + pl * Ho * Wo + oh * Wo : nullptr);
        return;
      }
    }
#endif
    if (whole) {
      const int64_t sw = p.stride[1], c0 = cols[0].lo;
#pragma omp parallel for if (planes * H * W > cpu::kParallelGrain) schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl) {
        thread_local std::vector<A> best;
        thread_local std::vector<int64_t> arg;
        best.resize(size_t(Wo));
        arg.resize(size_t(Wo));
        A* bq = best.data();
        int64_t* aq = arg.data();
        const T* xq = xp + pl * H * W;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t h0 = rows[size_t(oh)].lo;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            bq[ow] = -std::numeric_limits<A>::infinity();
            aq[ow] = h0 * W + c0 + ow * sw;
          }
          for (int64_t h = h0; h < h0 + p.kernel[0]; ++h)
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t w0 = h * W + c0 + kw;  // flat index of this tap for output column 0
#pragma omp simd
              for (int64_t ow = 0; ow < Wo; ++ow) {
                const A v = A(xq[w0 + ow * sw]);
                const bool take = pool_max_takes(v, bq[ow]);  // NaN propagates, as in PyTorch
                bq[ow] = take ? v : bq[ow];
                aq[ow] = take ? w0 + ow * sw : aq[ow];
              }
            }
          T* oq = op + pl * Ho * Wo + oh * Wo;
          for (int64_t ow = 0; ow < Wo; ++ow) oq[ow] = T(bq[ow]);
          if (ip)  // no indices when no backward follows (nn::functional's pool)
            for (int64_t ow = 0; ow < Wo; ++ow) ip[pl * Ho * Wo + oh * Wo + ow] = aq[ow];
        }
      }
      return;
    }
#pragma omp parallel for if (planes * H * W > cpu::kParallelGrain) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* xq = xp + pl * H * W;
      T* oq = op + pl * Ho * Wo;
      int64_t* iq = ip ? ip + pl * Ho * Wo : nullptr;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const Span r = rows[size_t(oh)];
        if (p.kind == PoolKind::max) {
          for (int64_t ow = 0; ow < Wo; ++ow) {
            A best;
            int64_t arg;
            pool_max_window(xq, W, r, cols[size_t(ow)], best, arg);
            oq[oh * Wo + ow] = T(best);
            if (iq) iq[oh * Wo + ow] = arg;
          }
        } else {
          for (int64_t ow = 0; ow < Wo; ++ow) oq[oh * Wo + ow] = T(pool_avg_window<A>(xq, W, r, cols[size_t(ow)]));
        }
      }
    }
  });
}

void CpuBackend::pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                                 const Tensor& grad_x) {
  const int64_t planes = grad_x.size(0) * grad_x.size(1), H = grad_x.size(2), W = grad_x.size(3);
  const int64_t Ho = grad_out.size(2), Wo = grad_out.size(3);
  const std::vector<Span> rows = spans_of(p, 0, H, Ho), cols = spans_of(p, 1, W, Wo);
  dispatch_floating(grad_x.dtype(), "pool2d_backward", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* gp = ptr<T>(grad_out);
    T* gxp = ptr<T>(grad_x);
    const int64_t* ip = indices.defined() ? static_cast<const int64_t*>(indices.data_ptr()) : nullptr;
#pragma omp parallel for if (planes * H * W > cpu::kParallelGrain) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      // Accumulate the plane in A (f16/bf16 sums would round at every tap).
      std::vector<A> acc(size_t(H * W), A(0));
      const T* gq = gp + pl * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const Span r = rows[size_t(oh)];
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const A go = A(gq[oh * Wo + ow]);
          if (p.kind == PoolKind::max) {
            acc[size_t(ip[pl * Ho * Wo + oh * Wo + ow])] += go;
            continue;
          }
          const Span c = cols[size_t(ow)];
          const A share = pool_avg_divide(go, r, c);
          for (int64_t h = r.lo; h < r.hi; ++h)
            for (int64_t w = c.lo; w < c.hi; ++w) acc[size_t(h * W + w)] += share;
        }
      }
      T* gxq = gxp + pl * H * W;
      for (int64_t e = 0; e < H * W; ++e) gxq[e] = T(acc[size_t(e)]);
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL
