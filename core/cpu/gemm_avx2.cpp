// SPDX-License-Identifier: MIT
// The packed AVX2 + FMA float32 GEMM behind snug::kernels::gemm_f32 at the
// avx2 level (NOTE [ CPU levels ]); the AVX-512 one is core/cpu/gemm_avx512.cpp.
//
// NOTE [ AVX2 GEMM blocking ]
// The Goto/BLIS loops, in row-major terms, simpler than the AVX-512 file's:
//
//   for jc over N in NC columns        (the B block: KC x NC, packed by all threads)
//     for pc over K in KC              (one K block)
//       for ic over M in MC rows       (the A block: MC x KC, packed by all threads, in L2)
//         for each NR-column panel     (16 columns x KC: 16 KiB, stays in L1)
//           for each MR-row panel      (streamed from L2)
//             6 x 16 micro-kernel: 12 ymm accumulators, per k two vector
//             loads of B, 6 broadcasts of A, 12 FMAs
//
// 16 ymm registers hold the 12 accumulators, the two B vectors and one
// broadcast: 6 x 16 is the largest tile that fits, and 12 independent FMAs
// cover the FMA latency (4-5 cycles) at two FMAs per cycle. Both operands are
// packed and zero-padded to whole tiles, so the kernel never branches; an edge
// tile goes through a small buffer. Threads share the packing (an omp for
// over panels) and split the (NR panel, MR panel) grid of each A block, column
// panels first so each keeps its B panel in L1. Every C element sums its K
// blocks in the same order whatever the thread count, so results do not
// depend on it (test_gemm checks bit for bit).
#include <snug/core/cpu/gemm_detail.h>

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

namespace {

constexpr int MR = 6;                                   // rows of the register tile
constexpr int NR = 16;                                  // columns: two ymm
constexpr int64_t KC = 256, MC = 24 * MR, NC = 1024;    // A block 144 x 256 (144 KiB), B block 256 x 1024
static_assert(NC % NR == 0, "NC must be a multiple of NR");

// Grow-only, 64-byte aligned scratch, one per thread (packing scratch is not
// tensor memory, so it does not go through the caching allocator). The
// calling thread's scratch holds the blocks its team shares.
struct Scratch {
  float* p = nullptr;
  size_t n = 0;
  float* get(size_t floats) {
    if (floats > n) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64));
      if (!p) throw std::bad_alloc();
      n = floats;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch tl_a, tl_b;

// dst[k * NR + j] = op(B)(p0 + k, j0 + j) for k < kc, j < NR (0 past N).
// op(B) is K x N: B[k * ldb + j], or B[j * ldb + k] when transposed.
void pack_b_panel(bool tb, const float* B, int64_t ldb, int64_t N, int64_t p0, int64_t kc, int64_t j0, float* dst) {
  const int n = int(std::min<int64_t>(NR, N - j0));
  if (!tb && n == NR) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (p0 + k) * ldb + j0;
      _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(src));
      _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(src + 8));
    }
    return;
  }
  for (int64_t k = 0; k < kc; ++k)
    for (int j = n; j < NR; ++j) dst[k * NR + j] = 0.0f;
  if (!tb) {
    for (int64_t k = 0; k < kc; ++k)
      for (int j = 0; j < n; ++j) dst[k * NR + j] = B[(p0 + k) * ldb + j0 + j];
  } else {
    for (int j = 0; j < n; ++j) {  // each column of op(B) is a contiguous row of B
      const float* src = B + (j0 + j) * ldb + p0;
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
    }
  }
}

// dst[k * MR + i] = op(A)(i0 + i, p0 + k) for k < kc, i < MR (0 past M); op(A)
// is M x K: A[i * lda + k], or A[k * lda + i] when transposed. With sums,
// sums[i0 + i] += the row's values, k upward (gemm_f32_a_sums).
void pack_a_panel(bool ta, const float* A, int64_t lda, int64_t M, int64_t p0, int64_t kc, int64_t i0, float* dst,
                  double* sums) {
  const int m = int(std::min<int64_t>(MR, M - i0));
  for (int i = 0; i < MR; ++i) {
    if (i >= m) {
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
      continue;
    }
    double s = 0;
    if (!ta) {
      const float* src = A + (i0 + i) * lda + p0;
      for (int64_t k = 0; k < kc; ++k) {
        dst[k * MR + i] = src[k];
        s += src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float v = A[(p0 + k) * lda + i0 + i];
        dst[k * MR + i] = v;
        s += v;
      }
    }
    if (sums) sums[i0 + i] += s;
  }
}

// acc[i][v] = sum_k a[k * MR + i] * b[k * NR + 8 v : +8], over one K block.
inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, __m256 acc[MR][2]) {
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MR;
    b += NR;
  }
}

// C tile (m x n, m <= MR, n <= NR) = alpha * acc + beta * C (+ bias per column).
// The first K block uses the caller's beta and adds the bias; later ones beta 1.
void store_tile(__m256 acc[MR][2], int m, int n, float* c, int64_t ldc, float alpha, float beta, const float* bias) {
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (m == MR && n == NR) {
    const __m256 bias0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 bias1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      float* p = c + i * ldc;
      __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
      if (beta == 1.0f) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(p));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(p + 8));
      } else if (beta != 0.0f) {
        r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), r0);
        r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p + 8), r1);
      }
      if (bias) {
        r0 = _mm256_add_ps(r0, bias0);
        r1 = _mm256_add_ps(r1, bias1);
      }
      _mm256_storeu_ps(p, r0);
      _mm256_storeu_ps(p + 8, r1);
    }
    return;
  }
  // An edge tile: the same arithmetic in vectors, through a buffer.
  alignas(32) float in[NR], out[NR], bias_row[NR] = {};
  if (bias)
    for (int j = 0; j < n; ++j) bias_row[j] = bias[j];
  const __m256 bias0 = _mm256_load_ps(bias_row), bias1 = _mm256_load_ps(bias_row + 8);
  for (int i = 0; i < m; ++i) {
    float* p = c + i * ldc;
    for (int j = 0; j < NR; ++j) in[j] = j < n && beta != 0.0f ? p[j] : 0.0f;
    __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
    if (beta == 1.0f) {
      r0 = _mm256_add_ps(r0, _mm256_load_ps(in));
      r1 = _mm256_add_ps(r1, _mm256_load_ps(in + 8));
    } else if (beta != 0.0f) {
      r0 = _mm256_fmadd_ps(vb, _mm256_load_ps(in), r0);
      r1 = _mm256_fmadd_ps(vb, _mm256_load_ps(in + 8), r1);
    }
    if (bias) {
      r0 = _mm256_add_ps(r0, bias0);
      r1 = _mm256_add_ps(r1, bias1);
    }
    _mm256_store_ps(out, r0);
    _mm256_store_ps(out + 8, r1);
    for (int j = 0; j < n; ++j) p[j] = out[j];
  }
}

}  // namespace

bool gemm_f32_packed_available() { return true; }

void gemm_f32_packed(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                     float* a_sums, GemmAct act, float* pre) {
  const int64_t nc_max = std::min<int64_t>(NC, (N + NR - 1) / NR * NR);
  const int64_t mc_max = std::min<int64_t>(MC, (M + MR - 1) / MR * MR);
  const int64_t kc_max = std::min<int64_t>(KC, K);
  float* bblock = tl_b.get(size_t(kc_max * nc_max));
  float* ablock = tl_a.get(size_t(kc_max * mc_max));
  std::vector<double> sums(a_sums ? size_t(M) : 0, 0.0);
  const bool with_act = act != GemmAct::none || pre != nullptr;
  // No point in more threads than register tiles.
  const int64_t tiles = ((M + MR - 1) / MR) * ((N + NR - 1) / NR);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(nthreads, tiles)));

#pragma omp parallel num_threads(nt) if (nt > 1)
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc), npanels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool first = pc == 0, last = pc + kc == K;
#pragma omp for schedule(static)
      for (int64_t jp = 0; jp < npanels; ++jp) pack_b_panel(tb, B, ldb, N, pc, kc, jc + jp * NR, bblock + jp * kc * NR);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic), mpanels = (mc + MR - 1) / MR;
#pragma omp for schedule(static)
        for (int64_t ip = 0; ip < mpanels; ++ip)
          pack_a_panel(ta, A, lda, M, pc, kc, ic + ip * MR, ablock + ip * kc * MR,
                       a_sums && jc == 0 ? sums.data() : nullptr);
#pragma omp for collapse(2) schedule(static)
        for (int64_t jp = 0; jp < npanels; ++jp)
          for (int64_t ip = 0; ip < mpanels; ++ip) {
            const int64_t i0 = ic + ip * MR, j0 = jc + jp * NR;
            const int m = int(std::min<int64_t>(MR, M - i0)), n = int(std::min<int64_t>(NR, N - j0));
            __m256 acc[MR][2];
            micro_kernel(kc, ablock + ip * kc * MR, bblock + jp * kc * NR, acc);
            float* c = C + i0 * ldc + j0;
            store_tile(acc, m, n, c, ldc, alpha, first ? beta : 1.0f, first && bias ? bias + j0 : nullptr);
            // The activation right after the tile's last K block, while it is in L1
            // (NOTE [ The activation in the GEMM's store ] in gemm_avx512.cpp).
            if (last && with_act) apply_act(act, m, n, c, pre ? pre + i0 * ldc + j0 : nullptr, ldc);
          }
      }
    }
  }
  for (size_t i = 0; i < sums.size(); ++i) a_sums[i] = float(sums[i]);
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
