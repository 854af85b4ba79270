// SPDX-License-Identifier: MIT
// The widening packers of gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h):
// panels of 16-bit operands converted to f32 as they are packed, for the f32
// register tiles of core/cpu/gemm_blocked.h. Internal to core/cpu/; included by
// the files that define detail::gemm_half_widened (gemm_half.cpp for AVX-512,
// gemm_avx2.cpp, gemm_neon.cpp).
#pragma once
#include <snug/core/cpu/gemm_blocked.h>

#include <algorithm>
#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

// 8 values of `kind` to float, in registers where the level converts in one
// or two instructions (F16C's vcvtph2ps or AVX2's shift; NEON's fcvtl or
// shll), else through widen16. The packers below widen 8 or 16 values per k:
// a call into the bulk converter for each cost more than the conversion did
// (half_to_float_array was 12% of W-GPT's f16 autocast step at AVX2 on Zen 3).
// The same values as widen16: vcvtph2ps is what half_to_float_array runs.
inline void widen8(Half16 kind, const uint16_t* src, float* dst) {
#if defined(__F16C__) && defined(__AVX2__)
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256 f = kind == Half16::f16 ? _mm256_cvtph_ps(h)
                                        : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  _mm256_storeu_ps(dst, f);
#elif defined(__aarch64__) && defined(__ARM_NEON)
  const uint16x8_t h = vld1q_u16(src);
  if (kind == Half16::f16) {
    // fcvtl quiets a signalling NaN where the scalar conversion keeps it:
    // a NaN either way, and a NaN operand makes a NaN product.
    const float16x8_t x = vreinterpretq_f16_u16(h);
    vst1q_f32(dst, vcvt_f32_f16(vget_low_f16(x)));
    vst1q_f32(dst + 4, vcvt_high_f32_f16(x));
  } else {
    vst1q_f32(dst, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
    vst1q_f32(dst + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
  }
#else
  widen16(kind, src, dst, 8);
#endif
}

// n values (n <= NR, whole vectors of 8 inline, the rest through widen16).
inline void widen_short(Half16 kind, const uint16_t* src, float* dst, int n) {
  int j = 0;
  for (; j + 8 <= n; j += 8) widen8(kind, src + j, dst + j);
  if (j < n) widen16(kind, src + j, dst + j, n - j);
}

// A panel's rows widened one contiguous run at a time, straight into the
// panel where its layout matches the source's (a row-major A into a
// row-layout panel, a transposed A into a k-major one), else through a small
// f32 staging copy and pack_a_panel (widen16: core/cpu/gemm_detail.h).
inline thread_local Scratch tl_widen_stage;

// op(A)(i0 + i, p0 + k) as float (0 past M) in the panel layout of
// pack_a_panel<MR, AS> (AS > 0: a row-major A only).
template <int MR, int64_t AS>
void pack_a_panel_half(Half16 kind, bool ta, const uint16_t* A, int64_t lda, int64_t M, int64_t p0, int64_t kc,
                       int64_t i0, float* dst) {
  const int m = int(std::min<int64_t>(MR, M - i0));
  if constexpr (AS > 0) {  // rows as they are: widened straight into the panel
    for (int i = 0; i < MR; ++i) {
      if (i < m)
        widen16(kind, A + (i0 + i) * lda + p0, dst + i * AS, kc);
      else
        std::fill_n(dst + i * AS, kc, 0.0f);
    }
  } else if (ta && m == MR && MR <= 8 && i0 + 8 <= M) {
    // A whole panel of a transposed A: 8 values widened per k, one vector of
    // the AVX2 and NEON converters (MR = 6 left them all to the scalar tail:
    // those conversions were 14% of W-GPT's bf16 step at AVX2 on Zen 3). The
    // 8 - MR floats past each step are written over by the next step, the
    // last step's by the next panel or the buffer's slack, as in pack_a_panel.
    // Each k reads another row of A: the row 8 steps ahead is asked for now.
    for (int64_t k = 0; k < kc; ++k) {
      if (k + 8 < kc) __builtin_prefetch(A + (p0 + k + 8) * lda + i0);
      widen8(kind, A + (p0 + k) * lda + i0, dst + k * MR);
    }
  } else if (ta) {  // op(A)(i, k) = A[k * lda + i]: m contiguous values per k, k-major like the panel
    for (int64_t k = 0; k < kc; ++k) {
      widen_short(kind, A + (p0 + k) * lda + i0, dst + k * MR, m);
      std::fill(dst + k * MR + m, dst + (k + 1) * MR, 0.0f);
    }
  } else {  // a k-major panel of a row-major A: through a staging copy in A's layout
    float* st = tl_widen_stage.get(size_t(MR * kc));  // m rows of kc floats
    for (int i = 0; i < m; ++i) widen16(kind, A + (i0 + i) * lda + p0, st + i * kc, kc);
    pack_a_panel<MR, 0>(false, st, kc, m, 0, kc, 0, dst, nullptr);
  }
}

// dst[k * NR + j] = op(B)(p0 + k, j0 + j) as float (0 past N), as pack_b_panel.
template <int NR>
void pack_b_panel_half(Half16 kind, bool tb, const uint16_t* B, int64_t ldb, int64_t N, int64_t p0, int64_t kc,
                       int64_t j0, float* dst) {
  const int n = int(std::min<int64_t>(NR, N - j0));
  if (!tb) {  // op(B)(k, j) = B[k * ldb + j]: n contiguous values per k, each k another row (prefetched 8 ahead)
    for (int64_t k = 0; k < kc; ++k) {
      if (k + 8 < kc) __builtin_prefetch(B + (p0 + k + 8) * ldb + j0);
      widen_short(kind, B + (p0 + k) * ldb + j0, dst + k * NR, n);
      std::fill(dst + k * NR + n, dst + (k + 1) * NR, 0.0f);
    }
    return;
  }
  float* st = tl_widen_stage.get(size_t(NR * kc));  // n columns of op(B), kc floats each
  for (int j = 0; j < n; ++j) widen16(kind, B + (j0 + j) * ldb + p0, st + j * kc, kc);
  pack_b_panel<NR>(true, st, kc, n, 0, kc, 0, dst);
}

// gemm_half over an f32 Tile (KU 1) with the packers above.
template <class Tile>
void gemm_half_blocked(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, const HalfOut* out) {
  static_assert(Tile::KU == 1, "widened operands go to an f32 tile");
  constexpr int64_t AS = a_row_stride<Tile>();
  gemm_blocked_with<Tile>(
      M, N, K, alpha, beta, C, ldc, nthreads, bias, out ? out->a_sums : nullptr,
      [&](int64_t pc, int64_t kc, int64_t i0, int64_t i_end, float* dst, double* row_sums) {
        if (a_by_rows<Tile>(ta))
          pack_a_panel_half<Tile::MR, AS>(kind, ta, A, lda, i_end, pc, kc, i0, dst);
        else
          pack_a_panel_half<Tile::MR, 0>(kind, ta, A, lda, i_end, pc, kc, i0, dst);
        if (row_sums) {  // HalfOut::a_sums, off the widened panel as pack_a_panel sums float rows
          const int m = int(std::min<int64_t>(Tile::MR, i_end - i0));
          if (a_by_rows<Tile>(ta))
            add_row_panel_sums<AS>(dst, kc, m, row_sums + i0);
          else
            add_panel_sums<Tile::MR>(dst, kc, m, row_sums + i0);
        }
      },
      [&](int64_t pc, int64_t kc, int64_t j0, int64_t j_end, float* dst) {
        pack_b_panel_half<Tile::NR>(kind, tb, B, ldb, j_end, pc, kc, j0, dst);
      },
      [&](int64_t i0, int64_t j0, int m, int n, float* c) {
        if (out && out->out) store_half_out(*out, kind, i0, j0, m, n, c, ldc);
      },
      !a_by_rows<Tile>(ta));
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail
