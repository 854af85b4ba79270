// SPDX-License-Identifier: MIT
// The packed NEON float32 GEMM behind snug::kernels::gemm_f32 at the neon
// level (aarch64; NOTE [ CPU levels ]): an 8 x 12 register tile in the blocked
// driver of core/cpu/gemm_blocked.h (NOTE [ Blocked GEMM ]).
//
// aarch64 has 32 128-bit registers: 24 hold the accumulators (8 rows of
// three 4-float vectors), three the B row, two the eight A values of the
// step, whose lanes the FMAs read directly (fmla by element), so A needs no
// broadcasts. 24 independent FMAs cover the FMA latency (4 cycles) at up to
// four FMA pipes (Neoverse V1/V2, Apple cores; two on Cortex-A7x).
#include <snug/core/cpu/gemm_detail.h>

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>

#include <algorithm>

#include <snug/core/cpu/gemm_blocked.h>
#include <snug/core/cpu/gemm_half_pack.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

namespace {

struct NeonTile {
  static constexpr int MR = 8, NR = 12, KU = 1;  // three q registers per row; one float per k
  // KC 256: the B panel, 256 x 12 floats, is 12 KiB of a 64 KiB (or 32 KiB) L1.
  static constexpr int64_t KC = 256, MC = 16 * MR, NC = 1008;  // A block 128 x 256 (128 KiB); NC: 84 panels

  // C[0:m, 0:n] (m <= MR, n <= NR) = alpha * sum_k a[k * MR + i] * b[k * NR +
  // j] + beta * C (+ bias[j]) over one K block (NOTE [ Blocked GEMM ]).
  static void run(int64_t kc, const float* __restrict a, const float* __restrict b, int m, int n, float* c,
                  int64_t ldc, float alpha, float beta, const float* bias) {
    float32x4_t acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < kc; ++k) {
      const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
      const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);  // rows 0-3, 4-7
#define SNUG_NEON_ROW(i, av, lane)                             \
  acc[i][0] = vfmaq_laneq_f32(acc[i][0], b0, av, lane);        \
  acc[i][1] = vfmaq_laneq_f32(acc[i][1], b1, av, lane);        \
  acc[i][2] = vfmaq_laneq_f32(acc[i][2], b2, av, lane)
      SNUG_NEON_ROW(0, a0, 0);
      SNUG_NEON_ROW(1, a0, 1);
      SNUG_NEON_ROW(2, a0, 2);
      SNUG_NEON_ROW(3, a0, 3);
      SNUG_NEON_ROW(4, a1, 0);
      SNUG_NEON_ROW(5, a1, 1);
      SNUG_NEON_ROW(6, a1, 2);
      SNUG_NEON_ROW(7, a1, 3);
#undef SNUG_NEON_ROW
      a += MR;
      b += NR;
    }
    float bias_row[NR] = {};
    if (bias) std::copy_n(bias, n, bias_row);
    const bool full = n == NR;
    float in[NR], out[NR];
    for (int i = 0; i < m; ++i) {
      float* p = c + i * ldc;
      const float* src = p;
      if (!full) {  // an edge tile: the same arithmetic, through a buffer
        for (int j = 0; j < NR; ++j) in[j] = j < n && beta != 0.0f ? p[j] : 0.0f;
        src = in;
      }
      float* dst = full ? p : out;
      for (int v = 0; v < 3; ++v) {
        float32x4_t r = vmulq_n_f32(acc[i][v], alpha);
        if (beta == 1.0f)
          r = vaddq_f32(r, vld1q_f32(src + 4 * v));
        else if (beta != 0.0f)
          r = vfmaq_n_f32(r, vld1q_f32(src + 4 * v), beta);
        if (bias) r = vaddq_f32(r, vld1q_f32(bias_row + 4 * v));
        vst1q_f32(dst + 4 * v, r);
      }
      if (!full) std::copy_n(out, n, p);
    }
  }
};

}  // namespace

bool gemm_f32_packed_available() { return true; }

void gemm_f32_packed(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                     float* a_sums, GemmAct act, float* pre) {
  gemm_blocked<NeonTile>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, a_sums, act, pre);
}

// 16-bit operands: the same tile, panels widened as they are packed (NOTE [ 16-bit GEMM ]).
bool gemm_half_widened(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, const HalfOut* out) {
  gemm_half_blocked<NeonTile>(kind, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, out);
  return true;
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
