// SPDX-License-Identifier: MIT
// The packed AVX2 + FMA float32 GEMM behind snug::kernels::gemm_f32 at the
// avx2 level (NOTE [ CPU levels ]): a 6 x 16 register tile in the blocked
// driver of core/cpu/gemm_blocked.h (NOTE [ Blocked GEMM ]); the AVX-512 GEMM
// is core/cpu/gemm_avx512.cpp.
//
// 16 ymm registers hold the 12 accumulators, the two B vectors and one
// broadcast: 6 x 16 is the largest tile that fits, and 12 independent FMAs
// cover the FMA latency (4-5 cycles) at two FMAs per cycle; per k, two vector
// loads of B and 6 broadcasts of A.
#include <snug/core/cpu/gemm_detail.h>

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

#include <immintrin.h>

#include <snug/core/cpu/gemm_blocked.h>
#include <snug/core/cpu/gemm_half_pack.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

namespace {

struct Avx2Tile {
  static constexpr int MR = 6, NR = 16, KU = 1;  // two ymm per row; one float per k
  // KC 256: the B panel (256 x 16 floats, 16 KiB) stays in a 32 KiB L1 (Zen 4's)
  // beside the A panel; at 512 (measured best on a 48 KiB L1, Sapphire Rapids:
  // 84% of peak on 1024^3 against 78%) the 32 KiB panel was evicted, and W-GPT's
  // products ran at 0.54-0.58 of the AVX2 peak on Zen 4 against 0.70-0.81 at 256.
  static constexpr int64_t KC = 256, MC = 16 * MR, NC = 1024;  // A block 96 x 256 (96 KiB)
  // The A panel holds its rows as they are, AS floats apart (NOTE [ Copying
  // A's rows ] in gemm_avx512.cpp): packing a row-major A is a copy, not a
  // 6-row transpose (12% of a W-GPT step at this level), and each broadcast
  // has a constant displacement.
  static constexpr int64_t AS = KC + 16;

  // One register tile: C[0:m, 0:n] (m <= MR, n <= NR) = alpha * sum_k a[i * AS
  // + k] * b[k * NR + j] + beta * C (+ bias[j]), over one K block. The first K
  // block gets the caller's beta and the bias; later ones beta 1 and no bias.
  // The accumulators are locals of this one function so that they stay in
  // registers through the k loop; an edge tile stores through a buffer.
  // The A panel's layout (NOTE [ Blocked GEMM ] in gemm_blocked.h): its rows
  // as they are (a[i * AS + k]) for a row-major A, a copy; k-major (a[k * MR
  // + i]) for a transposed A, whose k-th row gives the panel's 6 values in
  // order (the copy of rows there was 12 scattered moves per k).
  static void run(int64_t kc, const float* __restrict a, const float* __restrict b, int m, int n, float* c, int64_t ldc,
                  float alpha, float beta, const float* bias, bool a_kmajor) {
    if (a_kmajor)
      run_layout<1, MR>(kc, a, b, m, n, c, ldc, alpha, beta, bias);
    else
      run_layout<AS, 1>(kc, a, b, m, n, c, ldc, alpha, beta, bias);
  }
  // a[i * SI + k * SK] is op(A)(i, k) of the panel.
  template <int64_t SI, int64_t SK>
  static void run_layout(int64_t kc, const float* __restrict a, const float* __restrict b, int m, int n, float* c,
                         int64_t ldc, float alpha, float beta, const float* bias) {
    // C's rows are read after the k loop (beta != 0: every K block past the
    // first); asked for now, they arrive while the FMAs run. Without this the
    // load of C missed L2 on 1024^3 (C is 4 MiB): 13% of the product's samples
    // on Zen 3 sat on it (perf annotate).
    if (beta != 0.0f)
      for (int i = 0; i < m; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
      }
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
      __m256 ai = _mm256_broadcast_ss(a + 0 * SI);
      c00 = _mm256_fmadd_ps(ai, b0, c00);
      c01 = _mm256_fmadd_ps(ai, b1, c01);
      ai = _mm256_broadcast_ss(a + 1 * SI);
      c10 = _mm256_fmadd_ps(ai, b0, c10);
      c11 = _mm256_fmadd_ps(ai, b1, c11);
      ai = _mm256_broadcast_ss(a + 2 * SI);
      c20 = _mm256_fmadd_ps(ai, b0, c20);
      c21 = _mm256_fmadd_ps(ai, b1, c21);
      ai = _mm256_broadcast_ss(a + 3 * SI);
      c30 = _mm256_fmadd_ps(ai, b0, c30);
      c31 = _mm256_fmadd_ps(ai, b1, c31);
      ai = _mm256_broadcast_ss(a + 4 * SI);
      c40 = _mm256_fmadd_ps(ai, b0, c40);
      c41 = _mm256_fmadd_ps(ai, b1, c41);
      ai = _mm256_broadcast_ss(a + 5 * SI);
      c50 = _mm256_fmadd_ps(ai, b0, c50);
      c51 = _mm256_fmadd_ps(ai, b1, c51);
      a += SK;
      b += NR;
    }
    const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    alignas(32) float bias_row[NR] = {};
    if (bias)
      for (int j = 0; j < n; ++j) bias_row[j] = bias[j];
    const __m256 bias0 = _mm256_load_ps(bias_row), bias1 = _mm256_load_ps(bias_row + 8);
    const bool full = n == NR;
    alignas(32) float in[NR], out[NR];
    for (int i = 0; i < m; ++i) {
      float* p = c + i * ldc;
      const float* src = p;
      if (!full) {  // an edge tile: the same arithmetic, through a buffer
        for (int j = 0; j < NR; ++j) in[j] = j < n && beta != 0.0f ? p[j] : 0.0f;
        src = in;
      }
      __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
      if (beta == 1.0f) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(src));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(src + 8));
      } else if (beta != 0.0f) {
        r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(src), r0);
        r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(src + 8), r1);
      }
      if (bias) {
        r0 = _mm256_add_ps(r0, bias0);
        r1 = _mm256_add_ps(r1, bias1);
      }
      if (full) {
        _mm256_storeu_ps(p, r0);
        _mm256_storeu_ps(p + 8, r1);
      } else {
        _mm256_store_ps(out, r0);
        _mm256_store_ps(out + 8, r1);
        for (int j = 0; j < n; ++j) p[j] = out[j];
      }
    }
  }
};

}  // namespace

bool gemm_f32_packed_available() { return true; }

void gemm_f32_packed(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                     float* a_sums, GemmAct act, float* pre) {
  gemm_blocked<Avx2Tile>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, a_sums, act, pre);
}

// 16-bit operands: the same tile, panels widened as they are packed (NOTE [ 16-bit GEMM ]).
bool gemm_half_widened(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, const HalfOut* out) {
  gemm_half_blocked<Avx2Tile>(kind, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, out);
  return true;
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
