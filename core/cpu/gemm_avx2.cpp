// SPDX-License-Identifier: MIT
// The packed AVX2 + FMA float32 GEMM behind snug::kernels::gemm_f32 at the
// avx2 level (NOTE [ CPU levels ]); the AVX-512 one is core/cpu/gemm_avx512.cpp.
//
// NOTE [ AVX2 GEMM blocking ]
// The Goto/BLIS loops, in row-major terms, simpler than the AVX-512 file's:
//
//   for jc over N in NC columns        (the B block: KC x NC, packed by this thread)
//     for pc over K in KC              (one K block)
//       for ic over M in MC rows       (the A block: MC x KC, in L2)
//         for each NR-column panel     (16 columns x KC: 32 KiB, stays in L1)
//           for each MR-row panel      (streamed from L2)
//             6 x 16 micro-kernel: 12 ymm accumulators, per k two vector
//             loads of B, 6 broadcasts of A, 12 FMAs
//
// 16 ymm registers hold the 12 accumulators, the two B vectors and one
// broadcast: 6 x 16 is the largest tile that fits, and 12 independent FMAs
// cover the FMA latency (4-5 cycles) at two FMAs per cycle. Both operands are
// packed and zero-padded to whole tiles, so the kernel never branches; an edge
// tile goes through a small buffer.
//
// Threads: each takes a rectangle of C (its own column panels when N has at
// least one per thread, else its own row panels) and runs the loops above on
// it alone, packing what it reads. No barrier: a first version shared the
// packing between threads with an omp for per block, and its ~70 barriers
// per 1024^3 product (each a futex wake-up under OMP_WAIT_POLICY=passive) cost
// 15-20% of the product's time on 2 threads. A split by columns packs A once
// per thread, a small price (M x K against M x N x K FMAs). Every C element
// sums its K blocks in the same order whatever the grid, so results do not
// depend on the thread count (test_gemm checks bit for bit).
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
// KC 512 rather than 256: C is loaded and stored once per K block, and at 256
// that and the tile's set-up were ~6% of a 1024^3 product (84% of peak on one
// thread at 512, 78% at 256).
constexpr int64_t KC = 512, MC = 16 * MR, NC = 1024;  // A block 96 x 512 (192 KiB), B block 512 x 1024
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
  if (!ta && m == MR && !sums) {  // the common case: six rows read side by side, the panel written in order
    const float* r[MR];
    for (int i = 0; i < MR; ++i) r[i] = A + (i0 + i) * lda + p0;
    for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 6
      for (int i = 0; i < MR; ++i) dst[k * MR + i] = r[i][k];
    return;
  }
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

// One register tile: C[0:m, 0:n] (m <= MR, n <= NR) = alpha * sum_k a[k * MR
// + i] * b[k * NR + j] + beta * C (+ bias[j]), over one K block. The first K
// block gets the caller's beta and the bias; later ones beta 1 and no bias.
// The accumulators are locals of this one function so that they stay in
// registers through the k loop; an edge tile stores through a buffer.
void tile(int64_t kc, const float* __restrict a, const float* __restrict b, int m, int n, float* c, int64_t ldc,
          float alpha, float beta, const float* bias) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
    a += MR;
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

}  // namespace

bool gemm_f32_packed_available() { return true; }

void gemm_f32_packed(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                     float* a_sums, GemmAct act, float* pre) {
  // The grid of threads: split the column panels when there are enough, else
  // the row panels (NOTE [ AVX2 GEMM blocking ]).
  const int64_t col_panels = (N + NR - 1) / NR, row_panels = (M + MR - 1) / MR;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(nthreads, col_panels * row_panels)));
  const int tn = int(std::min<int64_t>(nt, col_panels)), tm = nt / tn;
  std::vector<double> sums(a_sums ? size_t(M) : 0, 0.0);
  const bool with_act = act != GemmAct::none || pre != nullptr;

  // One thread's rectangle of C: rows [i_lo, i_hi), columns [j_lo, j_hi).
  auto rectangle = [&](int t) {
    const int tr = t / tn, tc = t % tn;
    if (tr >= tm) return;  // nt not a multiple of tn: the spare thread idles
    const int64_t i_lo = std::min(M, row_panels * tr / tm * MR), i_hi = std::min(M, row_panels * (tr + 1) / tm * MR);
    const int64_t j_lo = std::min(N, col_panels * tc / tn * NR), j_hi = std::min(N, col_panels * (tc + 1) / tn * NR);
    if (i_lo >= i_hi || j_lo >= j_hi) return;
    const int64_t kc_max = std::min<int64_t>(KC, K);
    float* bblock = tl_b.get(size_t(kc_max * std::min<int64_t>(NC, (j_hi - j_lo + NR - 1) / NR * NR)));
    float* ablock = tl_a.get(size_t(kc_max * std::min<int64_t>(MC, (i_hi - i_lo + MR - 1) / MR * MR)));
    for (int64_t jc = j_lo; jc < j_hi; jc += NC) {
      const int64_t nc = std::min(NC, j_hi - jc), npanels = (nc + NR - 1) / NR;
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        const bool first = pc == 0, last = pc + kc == K;
        for (int64_t jp = 0; jp < npanels; ++jp) pack_b_panel(tb, B, ldb, j_hi, pc, kc, jc + jp * NR, bblock + jp * kc * NR);
        for (int64_t ic = i_lo; ic < i_hi; ic += MC) {
          const int64_t mc = std::min(MC, i_hi - ic), mpanels = (mc + MR - 1) / MR;
          // The row sums once: by the first column of threads, in the first column block.
          double* row_sums = a_sums && tc == 0 && jc == j_lo ? sums.data() : nullptr;
          for (int64_t ip = 0; ip < mpanels; ++ip)
            pack_a_panel(ta, A, lda, i_hi, pc, kc, ic + ip * MR, ablock + ip * kc * MR, row_sums);
          for (int64_t jp = 0; jp < npanels; ++jp)
            for (int64_t ip = 0; ip < mpanels; ++ip) {
              const int64_t i0 = ic + ip * MR, j0 = jc + jp * NR;
              const int m = int(std::min<int64_t>(MR, i_hi - i0)), n = int(std::min<int64_t>(NR, j_hi - j0));
              float* c = C + i0 * ldc + j0;
              tile(kc, ablock + ip * kc * MR, bblock + jp * kc * NR, m, n, c, ldc, alpha, first ? beta : 1.0f,
                   first && bias ? bias + j0 : nullptr);
              // The activation right after the tile's last K block, while it is in L1
              // (NOTE [ The activation in the GEMM's store ] in gemm_avx512.cpp).
              if (last && with_act) apply_act(act, m, n, c, pre ? pre + i0 * ldc + j0 : nullptr, ldc);
            }
        }
      }
    }
  };
  if (nt == 1) {
    rectangle(0);
  } else {
#pragma omp parallel num_threads(nt)
    {
      // The runtime may give fewer threads than asked: each takes every
      // team-size-th rectangle.
      for (int t = omp_get_thread_num(); t < nt; t += omp_get_num_threads()) rectangle(t);
    }
  }
  for (size_t i = 0; i < sums.size(); ++i) a_sums[i] = float(sums[i]);
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

#endif
