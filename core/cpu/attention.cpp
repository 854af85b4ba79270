// SPDX-License-Identifier: MIT
// Fused self-attention kernels: NOTE [ Fused attention ] in
// core/cpu/attention.h. The row math is core/attention_math.h's (NOTE [
// Attention row math ]), shared with the CUDA kernels; this file has the loops.
#include <snug/core/cpu/attention.h>

#include <omp.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include <snug/base/error.h>
#include <snug/core/attention_math.h>
#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/gemm_detail.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/cpu/tile_gemm.h>
#include <snug/core/functors.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

#if defined(__AVX512F__)
#include <snug/core/cpu/simd_avx512.h>
#elif defined(__AVX2__) && defined(__FMA__)
#include <snug/core/cpu/simd_avx2.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace snug::inline SNUG_CPU_LEVEL::cpu {

namespace {

// C = alpha * A B (+ C) on one tile, A(r, k) = A[r * a_row + k * a_col]
// (core/cpu/tile_gemm.h): no packing, which on these 32-row tiles cost as much as
// the products did through gemm_f32.
template <class T>
void mm(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb,
        bool accumulate, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    kernels::tile_gemm_f32(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
  else
    kernels::tile_gemm_f64(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}

using softmax_row::FastExp;

// Backward's c = sum_j p[j] dp[j] over a row of n keys (attention_row::correction_term;
// for float one vector accumulator of p dp fmadds and a tree fold).
template <class T>
SNUG_INLINE T correction(const T* p, const T* dp, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = kernels::detail::head_mask(n - j);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_maskz_loadu_ps(m, dp + j), acc);
    }
    return _mm512_reduce_add_ps(acc);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {  // the AVX2 twin: one accumulator, a masked tail
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(dp + j), acc);
    if (j < n) {
      const __m256i m = kernels::detail::head_mask8(n - j);
      acc = _mm256_fmadd_ps(_mm256_maskload_ps(p + j, m), _mm256_maskload_ps(dp + j, m), acc);
    }
    return kernels::detail::reduce_add8(acc);
  }
#elif defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (std::is_same_v<T, float>) {  // the NEON twin: one 4-lane accumulator, a scalar tail
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) acc = vfmaq_f32(acc, vld1q_f32(p + j), vld1q_f32(dp + j));
    float s = vaddvq_f32(acc);
    for (; j < n; ++j) s += attention_row::correction_term(p[j], dp[j]);
    return s;
  }
#endif
  T acc = 0;
  for (int64_t j = 0; j < n; ++j) acc += attention_row::correction_term(p[j], dp[j]);
  return acc;
}

// NOTE [ Attention rows in AVX-512 ]
// One block's rows: e = exp(s - max) over a row's visible keys, zeros past
// them, and the row's sum. The rows are short (32 to 128 keys, 2 to 8
// vectors) and there are many of them (every query row of every head, forward
// and backward), so fixed costs per row and per vector dominate. The compiled
// exp_approx loop (NOTE [ Vectorizable exp and erf for float ]) ran over the
// whole row with its masked tail set to -inf, and spent a third of its
// instructions on blends for NaN and underflow; the forward then made a third
// pass to scale the row by 1/sum (`perf annotate`: half of the fused forward's
// own samples were these row loops). Here:
//   - exp runs on the visible vectors only (the last one masked) and writes
//     zeros past them;
//   - exp is exp_approx's formula in intrinsics: n = round(x log2 e) by
//     vrndscaleps, the same degree-7 polynomial, and p * 2^n by vscalefps,
//     which needs no bit tricks; lanes below -87.34 are zeroed through the
//     scalef's mask (no denormal results), a NaN lane stays NaN;
//   - forward does not normalize P: O = P V is computed from the unnormalized
//     rows and its (m, D) rows are scaled by 1/sum afterwards, m x D floats
//     instead of m x kv.
// So the float specializations below spell core/attention_math.h's
// per-element formulas in intrinsics instead of calling them (the compiled
// loop over those calls is the slower one described above): exp16 is
// FastExp's exp_approx, exp_row's lanes are shifted_exp, row_max is the
// running max (vmaxps can drop a NaN that max_nan keeps, but a NaN score
// makes the row's sum, and so its output, NaN either way), and the
// correction's fmadds are correction_term. The generic versions (f64, and
// float without AVX-512) call the shared functions, and so does everything
// per row or outside these loops: the row statistics (logsumexp,
// inverse_sum), the output scaling (normalize) and backward's dS (score_grad,
// in an `omp simd` loop that the compiler still vectorizes).
template <class T>
T row_max(const T* row, int64_t vis) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < vis; ++j) m = softmax_row::max_nan(m, row[j]);
  return m;
}

// row[j] = exp(row[j] - sub) for j < vis, 0 for vis <= j < n; returns the sum
// of the exps. sub is the row's max (forward's terms of l) or its lse
// (backward's P, attention_row::prob).
template <class T>
T exp_row(T* row, int64_t vis, int64_t n, T sub) {
  T s = 0;
  for (int64_t j = 0; j < vis; ++j) s += (row[j] = softmax_row::shifted_exp(row[j], sub, FastExp{}));
  for (int64_t j = vis; j < n; ++j) row[j] = T(0);
  return s;
}

#if defined(__AVX512F__)
using kernels::detail::head_mask;

// exp(x) for 16 lanes, fmath::exp_approx's formula and constants: <= 1.5 ulp,
// 0 below fmath::kExpMin, NaN stays NaN. x <= 88 is assumed (the callers pass
// x - max or s - lse).
SNUG_INLINE __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(fmath::kExpMin);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // x >= lo, or NaN
  x = _mm512_max_ps(lo, x);                                       // the second operand comes back for NaN
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(fmath::kLog2e)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(fmath::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(fmath::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

template <>
float row_max<float>(const float* row, int64_t vis) {
  __m512 m0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t j = 0;
  for (; j + 32 <= vis; j += 32) {  // two chains: a row is at most a few vectors
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + j + 16));
  }
  for (; j < vis; j += 16) m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(m1, head_mask(vis - j), row + j));
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

template <>
float exp_row<float>(float* row, int64_t vis, int64_t n, float sub) {
  const __m512 sv = _mm512_set1_ps(sub);
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int64_t j = 0;
  for (; j + 32 <= vis; j += 32) {
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), sv));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j + 16), sv));
    _mm512_storeu_ps(row + j, e0);
    _mm512_storeu_ps(row + j + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; j < vis; j += 16) {  // the last visible vector: masked lanes load and store 0
    const __mmask16 k = head_mask(vis - j);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), sv)));
    _mm512_mask_storeu_ps(row + j, head_mask(n - j), e);
    s0 = _mm512_add_ps(s0, e);
  }
  for (; j < n; j += 16) _mm512_mask_storeu_ps(row + j, head_mask(n - j), _mm512_setzero_ps());
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
#elif defined(__AVX2__) && defined(__FMA__)
// The AVX2 twins of the rows above (NOTE [ Attention rows in AVX-512 ]): the
// same exp formula over 8 lanes, with 2^n built in the exponent bits (n is in
// [-126, 127] for x in [kExpMin, 88]) instead of vscalefps.
using kernels::detail::head_mask8;
using kernels::detail::reduce_add8;
using kernels::detail::reduce_max8;

SNUG_INLINE __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(fmath::kExpMin);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);  // x >= lo, or NaN
  x = _mm256_max_ps(lo, x);                              // the second operand comes back for NaN
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(fmath::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(fmath::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(fmath::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep);  // NaN lanes: p is NaN
}

template <>
float row_max<float>(const float* row, int64_t vis) {
  __m256 m0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t j = 0;
  for (; j + 16 <= vis; j += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(row + j));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(row + j + 8));
  }
  for (; j < vis; j += 8) {  // masked lanes read as -inf
    const __m256i k = head_mask8(vis - j);
    m0 = _mm256_max_ps(m0, _mm256_blendv_ps(m1, _mm256_maskload_ps(row + j, k), _mm256_castsi256_ps(k)));
  }
  return reduce_max8(_mm256_max_ps(m0, m1));
}

template <>
float exp_row<float>(float* row, int64_t vis, int64_t n, float sub) {
  const __m256 sv = _mm256_set1_ps(sub);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int64_t j = 0;
  for (; j + 16 <= vis; j += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), sv));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j + 8), sv));
    _mm256_storeu_ps(row + j, e0);
    _mm256_storeu_ps(row + j + 8, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  for (; j < vis; j += 8) {  // the last visible vector: masked lanes become 0
    const __m256i k = head_mask8(vis - j);
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(row + j, k), sv)), _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(row + j, head_mask8(n - j), e);
    s0 = _mm256_add_ps(s0, e);
  }
  for (; j < n; j += 8) _mm256_maskstore_ps(row + j, head_mask8(n - j), _mm256_setzero_ps());
  return reduce_add8(_mm256_add_ps(s0, s1));
}
#elif defined(__aarch64__) && defined(__ARM_NEON)
// The NEON twins (NOTE [ Attention rows in AVX-512 ]): exp_approx's formula
// over 4 lanes, n rounded by vrndnq, 2^n built in the exponent bits; the
// lanes past the last whole vector take the scalar formula (the same one).
SNUG_INLINE float32x4_t exp4(float32x4_t x) {
  const float32x4_t lo = vdupq_n_f32(fmath::kExpMin);
  const uint32x4_t keep = vmvnq_u32(vcltq_f32(x, lo));  // not below lo: x >= lo, or NaN
  x = vmaxq_f32(lo, x);                                 // NaN stays NaN
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(fmath::kLog2e)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(fmath::kLn2Hi));
  r = vfmsq_f32(r, n, vdupq_n_f32(fmath::kLn2Lo));
  float32x4_t p = vdupq_n_f32(1.0f / 5040);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t e = vmulq_f32(p, vreinterpretq_f32_s32(bits));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e), keep));  // NaN lanes: p is NaN
}

template <>
float row_max<float>(const float* row, int64_t vis) {
  float32x4_t m0 = vdupq_n_f32(-std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t j = 0;
  for (; j + 8 <= vis; j += 8) {
    m0 = vmaxq_f32(m0, vld1q_f32(row + j));
    m1 = vmaxq_f32(m1, vld1q_f32(row + j + 4));
  }
  for (; j + 4 <= vis; j += 4) m0 = vmaxq_f32(m0, vld1q_f32(row + j));
  float m = vmaxvq_f32(vmaxq_f32(m0, m1));
  for (; j < vis; ++j) m = softmax_row::max_nan(m, row[j]);
  return m;
}

template <>
float exp_row<float>(float* row, int64_t vis, int64_t n, float sub) {
  const float32x4_t sv = vdupq_n_f32(sub);
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
  int64_t j = 0;
  for (; j + 8 <= vis; j += 8) {
    const float32x4_t e0 = exp4(vsubq_f32(vld1q_f32(row + j), sv));
    const float32x4_t e1 = exp4(vsubq_f32(vld1q_f32(row + j + 4), sv));
    vst1q_f32(row + j, e0);
    vst1q_f32(row + j + 4, e1);
    s0 = vaddq_f32(s0, e0);
    s1 = vaddq_f32(s1, e1);
  }
  for (; j + 4 <= vis; j += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(row + j), sv));
    vst1q_f32(row + j, e);
    s0 = vaddq_f32(s0, e);
  }
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; j < vis; ++j) s += (row[j] = softmax_row::shifted_exp(row[j], sub, FastExp{}));
  for (; j < n; ++j) row[j] = 0.0f;
  return s;
}
#endif

// What one (batch, head)'s rows add to their scaled scores (NOTE [ Attention
// masks ] in core/backend.h): -inf at padded keys and where a bool mask is
// true, a floating mask's values otherwise. Read through the mask's strides.
template <class T>
struct RowMasks {
  const T* pad = nullptr;   // (T) this batch's key padding as 0 / -inf (added: vectorizes), or null
  const char* m = nullptr;  // this (batch, head)'s (T, T) plane of the mask, or null
  int64_t si = 0, sj = 0;   // its strides in bytes
  bool m_bool = false;
  bool any() const { return pad || m; }
  // row (n keys from key 0) of query row i
  void apply(T* row, int64_t i, int64_t n) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (m) {
      const char* r = m + i * si;
      if (m_bool && sj == 1) {
        const bool* b = reinterpret_cast<const bool*>(r);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] = b[j] ? kNegInf : row[j];
      } else if (m_bool) {
        for (int64_t j = 0; j < n; ++j)
          if (*reinterpret_cast<const bool*>(r + j * sj)) row[j] = kNegInf;
      } else if (sj == int64_t(sizeof(T))) {
        const T* a = reinterpret_cast<const T*>(r);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] += a[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += *reinterpret_cast<const T*>(r + j * sj);
      }
    }
    if (pad) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] += pad[j];
    }
  }
};

// The masks of (batch b, head h); the key padding row is written into pad_buf.
template <class T>
RowMasks<T> row_masks(const AttentionMask& am, int64_t b, int64_t h, int64_t Tn, std::vector<T>& pad_buf) {
  RowMasks<T> r;
  if (am.key_padding.defined()) {
    const bool* kp = static_cast<const bool*>(am.key_padding.data_ptr()) + b * Tn;
    pad_buf.resize(size_t(Tn));
    for (int64_t j = 0; j < Tn; ++j) pad_buf[size_t(j)] = kp[j] ? -std::numeric_limits<T>::infinity() : T(0);
    r.pad = pad_buf.data();
  }
  if (am.mask.defined()) {
    const Tensor& m = am.mask;  // (B, H, T, T) elements
    const int64_t es = int64_t(dtype_size(m.dtype()));
    r.m = static_cast<const char*>(m.data_ptr()) + (b * m.stride(0) + h * m.stride(1)) * es;
    r.si = m.stride(2) * es;
    r.sj = m.stride(3) * es;
    r.m_bool = m.dtype() == DType::b8;
  }
  return r;
}

// Keys [0, vis) of a block's row i (from r0), of the n the block computed.
SNUG_INLINE int64_t visible(bool causal, int64_t r0, int64_t i, int64_t n) { return causal ? r0 + i + 1 : n; }

// Forward's softmax of one block (m rows of n keys; row i sees keys [0,
// visible(...)), the masks already applied): rows become their unnormalized
// exps, lse[i] the logsumexp, inv[i] 1 / sum. A row with no key left (max
// -inf) becomes zeros with lse -inf and inv 0.
template <class T>
void block_softmax(T* S, int64_t m, int64_t n, int64_t r0, bool causal, T* lse, T* inv) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = S + i * n;
    const int64_t vis = visible(causal, r0, i, n);
    const T mx = row_max<T>(row, vis);
    if (mx == -std::numeric_limits<T>::infinity()) {
      std::fill_n(row, n, T(0));
      lse[i] = mx;
      inv[i] = T(0);
      continue;
    }
    const T s = exp_row<T>(row, vis, n, mx);
    lse[i] = softmax_row::logsumexp(mx, s);
    inv[i] = softmax_row::inverse_sum<T>(s);
  }
}

template <class T>
struct Scratch {
  std::vector<T> s, dp;
  std::vector<T> kt, vt;          // the head's K^T and V^T (D, T)
  std::vector<T> qc, kc, vc, gc;  // the head's Q, K, V, dO as dense (T, D)
  std::vector<T> dk, dv;          // backward's dK and dV sums, dense (T, D)
  std::vector<T> yd, dq;          // 16-bit storage: forward's O and backward's dQ, dense (T, D)
  std::vector<T> pad;             // the batch's key padding as 0 / -inf (T)
};

// The head's (T, D) slice of a (B, T, *) tensor, copied dense. Read in place
// with its row stride of 3C (or C) floats, every row of a 32-row tile product
// lands in the same few L1 sets and evicts the others (measured: O = P V at a
// third of the speed of the dense copy).
template <class T>
T* dense(std::vector<T>& buf, int64_t Tn, int64_t D, const T* src, int64_t ld) {
  buf.resize(size_t(Tn * D));
  T* dst = buf.data();
  // A plain loop, not std::copy_n: rows are a head wide (32 floats), and a
  // memmove call per row cost more than the copy (`perf`: 0.5% of a step).
  for (int64_t i = 0; i < Tn; ++i)
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) dst[i * D + d] = src[i * ld + d];
  return dst;
}
// dense() for storage S: T itself (copied), or 16-bit floats of `kind`
// widened as they are copied (NOTE [ 16-bit attention ]).
template <class T, class S>
T* dense_in(std::vector<T>& buf, int64_t Tn, int64_t D, const S* src, int64_t ld, Half16 kind) {
  if constexpr (std::is_same_v<S, T>) {
    (void)kind;
    return dense(buf, Tn, D, src, ld);
  } else {
    static_assert(std::is_same_v<S, uint16_t> && std::is_same_v<T, float>, "16-bit storage computes in f32");
    buf.resize(size_t(Tn * D));
    for (int64_t i = 0; i < Tn; ++i) kernels::detail::widen16(kind, src + i * ld, buf.data() + i * D, D);
    return buf.data();
  }
}

// Dense (T, D) rows out to the head's slice of a (B, T, *) tensor of storage
// S: copied, or rounded to 16 bits once.
template <class T, class S>
void rows_out(const T* src, int64_t Tn, int64_t D, S* dst, int64_t ld, Half16 kind) {
  for (int64_t i = 0; i < Tn; ++i) {
    if constexpr (std::is_same_v<S, T>) {
      (void)kind;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) dst[i * ld + d] = src[i * D + d];
    } else {
      kernels::detail::narrow16(kind, src + i * D, dst + i * ld, D);
    }
  }
}

template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// S: the storage of qkv and y, T itself or 16-bit floats of `kind` (computed
// in T = f32: each head's slices are widened as they are made dense, and its
// output rounded once as it is written; lse is T either way).
template <class T, class S = T>
void forward_impl(const Tensor& qkv, int64_t H, double scale_d, const AttentionMask& am, const Tensor& y,
                  const Tensor& lse, Half16 kind = Half16::bf16) {
  constexpr bool kSame = std::is_same_v<S, T>;
  const int64_t B = qkv.size(0), Tn = qkv.size(1), C3 = qkv.size(2), C = C3 / 3, D = C / H;
  const S* base = static_cast<const S*>(qkv.data_ptr());
  S* yp = static_cast<S*>(y.data_ptr());
  T* lp = static_cast<T*>(lse.data_ptr());
  const T scale = T(scale_d);
  const int64_t work = B * H;
#pragma omp parallel for schedule(dynamic, 1) if (work > 1 && B * Tn * C > kParallelGrain)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t b = w / H, h = w % H;
    const S* Q = base + b * Tn * C3 + h * D;
    const S* K = Q + C;
    const S* V = Q + 2 * C;
    S* Y = yp + b * Tn * C + h * D;
    T* Lr = lp + w * Tn;
    auto& sc = scratch<T>();
    sc.s.resize(size_t(kAttentionBlockRows * Tn));
    sc.kt.resize(size_t(D * Tn));
    T *S_ = sc.s.data(), *Kt = sc.kt.data();
    T inv[kAttentionBlockRows];
    const RowMasks<T> rm = row_masks<T>(am, b, h, Tn, sc.pad);
    // Q and O: read and written in place for T storage (row stride 3C and C),
    // dense (T, D) copies for 16-bit storage.
    const T* Qr;
    T* Yr;
    int64_t q_ld, y_ld;
    if constexpr (kSame) {
      kernels::transpose<T>(Tn, D, K, C3, Kt, Tn);  // (D, T): every block's S = Q K^T reads rows of it
      Qr = Q, q_ld = C3, Yr = Y, y_ld = C;
    } else {
      const T* Kd = dense_in<T>(sc.kc, Tn, D, K, C3, kind);
      kernels::transpose<T>(Tn, D, Kd, D, Kt, Tn);
      Qr = dense_in<T>(sc.qc, Tn, D, Q, C3, kind), q_ld = D;
      sc.yd.resize(size_t(Tn * D));
      Yr = sc.yd.data(), y_ld = D;
    }
    const T* Vd = dense_in<T>(sc.vc, Tn, D, V, C3, kind);  // (T, D)
    for (int64_t r0 = 0; r0 < Tn; r0 += kAttentionBlockRows) {
      // keys 0..kv-1 are visible to some row of the block
      const int64_t m = std::min(kAttentionBlockRows, Tn - r0), kv = am.causal ? r0 + m : Tn;
      mm<T>(m, kv, D, scale, Qr + r0 * q_ld, q_ld, 1, Kt, Tn, false, S_, kv);  // S (m, kv)
      if (rm.any())
        for (int64_t i = 0; i < m; ++i) rm.apply(S_ + i * kv, r0 + i, visible(am.causal, r0, i, kv));
      block_softmax<T>(S_, m, kv, r0, am.causal, Lr + r0, inv);  // S -> exp(S - max), unnormalized
      mm<T>(m, D, kv, T(1), S_, kv, 1, Vd, D, false, Yr + r0 * y_ld, y_ld);  // O = P V (m, D), then
      for (int64_t i = 0; i < m; ++i) {                                      // rows times 1 / sum
        T* o = Yr + (r0 + i) * y_ld;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) o[d] = softmax_row::normalize(o[d], inv[i]);
      }
    }
    if constexpr (!kSame) rows_out(Yr, Tn, D, Y, C, kind);
  }
}

template <class T, class S = T>
void backward_impl(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t H, double scale_d,
                   const AttentionMask& am, const Tensor& dqkv, Half16 kind = Half16::bf16) {
  constexpr bool kSame = std::is_same_v<S, T>;
  const int64_t B = qkv.size(0), Tn = qkv.size(1), C3 = qkv.size(2), C = C3 / 3, D = C / H;
  const S* base = static_cast<const S*>(qkv.data_ptr());
  (void)y;  // not read: the correction term comes from P and dP (below)
  const T* lp = static_cast<const T*>(lse.data_ptr());
  const S* gp = static_cast<const S*>(gy.data_ptr());
  S* dp = static_cast<S*>(dqkv.data_ptr());
  const T scale = T(scale_d);
  const int64_t work = B * H;
#pragma omp parallel for schedule(dynamic, 1) if (work > 1 && B * Tn * C > kParallelGrain)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t b = w / H, h = w % H;
    const int64_t off = b * Tn * C3 + h * D;
    const S *Q = base + off, *K = Q + C, *V = Q + 2 * C;
    S *dQ = dp + off, *dK = dQ + C, *dV = dQ + 2 * C;
    const S* G = gp + b * Tn * C + h * D;
    const T* Lr = lp + w * Tn;
    auto& sc = scratch<T>();
    sc.s.resize(size_t(kAttentionBlockRows * Tn));
    sc.dp.resize(size_t(kAttentionBlockRows * Tn));
    sc.kt.resize(size_t(D * Tn));
    sc.vt.resize(size_t(D * Tn));
    T *P = sc.s.data(), *dP = sc.dp.data(), *Kt = sc.kt.data(), *Vt = sc.vt.data();
    const T* Qd = dense_in<T>(sc.qc, Tn, D, Q, C3, kind);  // (T, D) each
    const T* Kd = dense_in<T>(sc.kc, Tn, D, K, C3, kind);
    const T* Gd = dense_in<T>(sc.gc, Tn, D, G, C, kind);
    // Q, dO and dQ: in place for T storage (row strides 3C, C, 3C); for
    // 16-bit storage the dense copies, and dQ dense until it is rounded.
    const T *Qr, *Gr;
    T* dQr;
    int64_t q_ld, g_ld;  // dQr's is q_ld too
    if constexpr (kSame) {
      kernels::transpose<T>(Tn, D, K, C3, Kt, Tn);  // (D, T)
      kernels::transpose<T>(Tn, D, V, C3, Vt, Tn);  // (D, T)
      Qr = Q, Gr = G, dQr = dQ, q_ld = C3, g_ld = C;
    } else {
      kernels::transpose<T>(Tn, D, Kd, D, Kt, Tn);
      kernels::transpose<T>(Tn, D, dense_in<T>(sc.vc, Tn, D, V, C3, kind), D, Vt, Tn);
      sc.dq.resize(size_t(Tn * D));
      Qr = Qd, Gr = Gd, dQr = sc.dq.data(), q_ld = D, g_ld = D;
    }
    // dK and dV are sums over blocks: kept dense in scratch and written out
    // once at the end. Summed in place, every block's tile read and wrote rows
    // 3C floats apart, and zeroing them first took a memset call per row.
    sc.dk.assign(size_t(Tn * D), T(0));
    sc.dv.assign(size_t(Tn * D), T(0));
    T *dKd = sc.dk.data(), *dVd = sc.dv.data();
    const RowMasks<T> rm = row_masks<T>(am, b, h, Tn, sc.pad);
    for (int64_t r0 = 0; r0 < Tn; r0 += kAttentionBlockRows) {
      const int64_t m = std::min(kAttentionBlockRows, Tn - r0), kv = am.causal ? r0 + m : Tn;
      mm<T>(m, kv, D, scale, Qr + r0 * q_ld, q_ld, 1, Kt, Tn, false, P, kv);  // S (m, kv)
      for (int64_t i = 0; i < m; ++i) {  // P = exp(S - lse) on the visible part, 0 past it
        T* row = P + i * kv;
        const int64_t vis = visible(am.causal, r0, i, kv);
        const T l = Lr[r0 + i];
        if (l == -std::numeric_limits<T>::infinity()) {  // a row without keys: no gradient
          std::fill_n(row, kv, T(0));
          continue;
        }
        if (rm.any()) rm.apply(row, r0 + i, vis);
        exp_row<T>(row, vis, kv, l);
      }
      mm<T>(m, kv, D, T(1), Gr + r0 * g_ld, g_ld, 1, Vt, Tn, false, dP, kv);  // dP = dO V^T (m, kv)
      for (int64_t i = 0; i < m; ++i) {
        T* pr = P + i * kv;
        T* dr = dP + i * kv;
        // Softmax backward's correction term, rowsum(P o dP) = dO . (P V) = dO . O:
        // a block holds every visible key of its rows, so it is taken here, from
        // rows in L1, instead of from O and dO, which backward would read from
        // memory (the row dots over O waited on it: 20% of this loop's samples).
        const T c = correction<T>(pr, dr, kv);
#pragma omp simd
        for (int64_t j = 0; j < kv; ++j) dr[j] = attention_row::score_grad(pr[j], dr[j], c);  // dS
      }
      mm<T>(kv, D, m, T(1), P, 1, kv, Gd + r0 * D, D, true, dVd, D);                 // dV += P^T dO (kv, D)
      mm<T>(m, D, kv, scale, dP, kv, 1, Kd, D, false, dQr + r0 * q_ld, q_ld);         // dQ = scale dS K (m, D)
      mm<T>(kv, D, m, scale, dP, 1, kv, Qd + r0 * D, D, true, dKd, D);               // dK += scale dS^T Q (kv, D)
    }
    if constexpr (!kSame) rows_out(dQr, Tn, D, dQ, C3, kind);
    rows_out(dKd, Tn, D, dK, C3, kind);
    rows_out(dVd, Tn, D, dV, C3, kind);
  }
}

void check_args(const char* what, const Tensor& qkv, int64_t heads, const AttentionMask& am) {
  SNUG_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError, what, ": expected qkv (B, T, 3C), got ",
             shape_str(qkv.shape()));
  SNUG_CHECK(heads > 0 && (qkv.size(2) / 3) % heads == 0, ValueError, what, ": ", heads,
             " heads do not divide the width ", qkv.size(2) / 3);
  SNUG_CHECK(qkv.is_contiguous(), ValueError, what, ": qkv must be contiguous");
  const bool half = qkv.dtype() == DType::f16 || qkv.dtype() == DType::bf16;
  SNUG_CHECK(qkv.dtype() == DType::f32 || qkv.dtype() == DType::f64 || half, DTypeError, what,
             ": float32, float64, float16 or bfloat16 only, got ", dtype_name(qkv.dtype()));
  SNUG_CHECK(!half || !am.mask.defined() || am.mask.dtype() == DType::b8, DTypeError, what,
             ": an additive mask with ", dtype_name(qkv.dtype()), " qkv is widened by the caller (CpuBackend::attention)");
  const int64_t B = qkv.size(0), T = qkv.size(1);
  if (am.key_padding.defined())
    SNUG_CHECK(am.key_padding.dtype() == DType::b8 && am.key_padding.shape() == (Shape{B, T}) &&
                   am.key_padding.is_contiguous() && am.key_padding.device() == qkv.device(),
               ValueError, what, ": key_padding must be a contiguous (", B, ", ", T, ") bool tensor on ",
               qkv.device().str(), ", got ", dtype_name(am.key_padding.dtype()), " ", shape_str(am.key_padding.shape()));
  if (am.mask.defined())
    SNUG_CHECK((am.mask.dtype() == DType::b8 || am.mask.dtype() == qkv.dtype()) &&
                   am.mask.shape() == (Shape{B, heads, T, T}) && am.mask.device() == qkv.device(),
               ValueError, what, ": mask must be (", B, ", ", heads, ", ", T, ", ", T, ") bool or ",
               dtype_name(qkv.dtype()), " on ", qkv.device().str(), ", got ", dtype_name(am.mask.dtype()), " ",
               shape_str(am.mask.shape()));
}

}  // namespace

void attention_forward(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                       const Tensor& lse) {
  check_args("attention_forward", qkv, heads, mask);
  if (qkv.numel() == 0) return;
  switch (qkv.dtype()) {
    case DType::f32: forward_impl<float>(qkv, heads, scale, mask, y, lse); break;
    case DType::f64: forward_impl<double>(qkv, heads, scale, mask, y, lse); break;
    case DType::bf16: forward_impl<float, uint16_t>(qkv, heads, scale, mask, y, lse, Half16::bf16); break;
    default: forward_impl<float, uint16_t>(qkv, heads, scale, mask, y, lse, Half16::f16); break;
  }
}

void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, const AttentionMask& mask, const Tensor& dqkv) {
  check_args("attention_backward", qkv, heads, mask);
  if (qkv.numel() == 0) return;
  switch (qkv.dtype()) {
    case DType::f32: backward_impl<float>(qkv, y, lse, gy, heads, scale, mask, dqkv); break;
    case DType::f64: backward_impl<double>(qkv, y, lse, gy, heads, scale, mask, dqkv); break;
    case DType::bf16: backward_impl<float, uint16_t>(qkv, y, lse, gy, heads, scale, mask, dqkv, Half16::bf16); break;
    default: backward_impl<float, uint16_t>(qkv, y, lse, gy, heads, scale, mask, dqkv, Half16::f16); break;
  }
}

double attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal) {
  double computed = 0;  // (rows x keys) products computed over all blocks of one head
  for (int64_t r0 = 0; r0 < T; r0 += kAttentionBlockRows) {
    const int64_t m = std::min(kAttentionBlockRows, T - r0);
    computed += double(m) * double(causal ? r0 + m : T);
  }
  return 2.0 * 2.0 * computed * double(D) * double(B * heads);  // two GEMMs, 2 flops per multiply-add
}

}  // namespace snug::SNUG_CPU_LEVEL::cpu

// ---- CpuBackend's attention entries (core/backend.h) ------------------------------------
namespace snug::inline SNUG_CPU_LEVEL {

namespace {
bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }
}  // namespace

// NOTE [ 16-bit attention ]
// 16-bit qkv (an autocast region's) takes the fused kernels too, on both
// devices (this file and cuda/attention.cpp): they compute in f32, and what
// backward keeps is the 16-bit qkv and y (y is the output, which the next
// Linear keeps anyway) plus the f32 lse. The composed attention would keep
// (B, H, T, T) scores and probabilities. On the CPU each (batch, head) work
// item widens its head's Q, K, V (and dO) as it makes its dense (T, D) copies,
// which it makes for f32 as well, and rounds its outputs once as it writes
// them: no f32 copy of qkv, y or a gradient exists (those whole-tensor
// conversions were a third of the bf16 attention's backward time on W-GPT at
// AVX2, and 3x its f32 workspace). An additive mask (in qkv's dtype) still
// takes the widened copies below: the kernels read an additive mask as floats.
void CpuBackend::attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                           const Tensor& lse) {
  const DType dt = qkv.dtype();
  const bool additive = mask.mask.defined() && mask.mask.dtype() != DType::b8;
  if (dt == DType::f32 || dt == DType::f64 || (is_half(dt) && !additive && y.dtype() == dt && y.is_contiguous())) {
    cpu::attention_forward(qkv, heads, scale, mask, y, lse);
    return;
  }
  if (!is_half(dt)) {
    Backend::attention(qkv, heads, scale, mask, y, lse);
    return;
  }
  Tensor x32, y32;  // (B, T, 3C), (B, T, C)
  AttentionMask m32 = mask;
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32);
    y32 = empty(y.shape(), x32.options());
    if (additive) m32.mask = raw::to_dtype(mask.mask, DType::f32);
  }
  cpu::attention_forward(x32, heads, scale, m32, y32, lse);
  copy(y32, y);  // rounded once
}

void CpuBackend::attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y,
                                    int64_t heads, double scale, const AttentionMask& mask, const Tensor& grad_qkv) {
  const DType dt = qkv.dtype();
  const bool additive = mask.mask.defined() && mask.mask.dtype() != DType::b8;
  if (dt == DType::f32 || dt == DType::f64 || (is_half(dt) && !additive && grad_y.dtype() == dt && grad_qkv.dtype() == dt &&
                                                        grad_qkv.is_contiguous())) {
    cpu::attention_backward(qkv, y, lse, grad_y.is_contiguous() ? grad_y : raw::contiguous(grad_y), heads, scale, mask,
                            grad_qkv);
    return;
  }
  if (!is_half(dt)) {
    Backend::attention_backward(qkv, y, lse, grad_y, heads, scale, mask, grad_qkv);
    return;
  }
  Tensor x32, y32, g32, d32;  // NOTE [ 16-bit attention ]: f32 workspace (an additive mask)
  AttentionMask m32 = mask;
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32), y32 = raw::to_dtype(y, DType::f32);
    g32 = raw::contiguous(raw::to_dtype(grad_y, DType::f32));
    d32 = empty(qkv.shape(), x32.options());
    if (additive) m32.mask = raw::to_dtype(mask.mask, DType::f32);
  }
  cpu::attention_backward(x32, y32, lse, g32, heads, scale, m32, d32);
  copy(d32, grad_qkv);
}

}  // namespace snug::SNUG_CPU_LEVEL
