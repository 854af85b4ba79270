// SPDX-License-Identifier: MIT
// The blocked GEMM driver of the levels without AVX-512 (NOTE [ CPU levels ]):
// packing, blocking and threads around a register tile the level supplies
// (core/cpu/gemm_avx2.cpp: 6 x 16 in AVX2 + FMA; core/cpu/gemm_neon.cpp:
// 8 x 12 in NEON). Internal to core/cpu/; included by those files only.
//
// NOTE [ Blocked GEMM ]
// The Goto/BLIS loops, in row-major terms, simpler than core/cpu/gemm_avx512.cpp's:
//
//   for jc over N in NC columns        (the B block: KC x NC, packed by this thread)
//     for pc over K in KC              (one K block)
//       for ic over M in MC rows       (the A block: MC x KC, in L2)
//         for each NR-column panel     (NR columns x KC: stays in L1)
//           for each MR-row panel      (streamed from L2)
//             the MR x NR register tile (Tile::run)
//
// Both operands are packed and zero-padded to whole tiles, so a tile's k loop
// never branches; an edge tile stores through a small buffer. Tile::run does
// C = alpha * acc + beta * C (+ bias) for one K block: the first block gets
// the caller's beta and the bias, later ones beta 1.
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
#pragma once
#include <snug/core/cpu/gemm_detail.h>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

// The blocks' packing scratch (gemm_detail.h); the calling thread's holds its rectangle's blocks.
inline thread_local Scratch tl_blocked_a, tl_blocked_b;

// dst[k * NR + j] = op(B)(p0 + k, j0 + j) for k < kc, j < NR (0 past N).
// op(B) is K x N: B[k * ldb + j], or B[j * ldb + k] when transposed.
template <int NR>
void pack_b_panel(bool tb, const float* B, int64_t ldb, int64_t N, int64_t p0, int64_t kc, int64_t j0, float* dst) {
  const int n = int(std::min<int64_t>(NR, N - j0));
  if (!tb && n == NR) {  // whole rows of the panel: vector moves
    // memcpy of a constant size, which GCC inlines (std::copy_n became a call
    // to memmove through the PLT for each k).
    for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * NR, B + (p0 + k) * ldb + j0, sizeof(float) * NR);
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

// A Tile's A panel layouts: k-major, dst[k * MR + i], always; a Tile with
// Tile::AS (at least KC) also takes a row-major A's rows as they are,
// dst[i * AS + k] (NOTE [ Copying A's rows ] in gemm_avx512.cpp), and its
// Tile::run takes a last bool, true for a k-major panel. A transposed A is
// packed k-major either way: its rows give a panel's MR values in order.
template <class Tile>
constexpr int64_t a_row_stride() {
  if constexpr (requires { Tile::AS; })
    return Tile::AS;
  else
    return 0;
}
// Whether op(A) goes to Tile in the row layout.
template <class Tile>
constexpr bool a_by_rows(bool ta) {
  return a_row_stride<Tile>() > 0 && !ta;
}
// Floats of one packed A panel of kp steps (enough for either layout).
template <class Tile>
constexpr int64_t a_panel_floats(int64_t kp) {
  return a_row_stride<Tile>() > 0 ? Tile::MR * a_row_stride<Tile>() : kp * Tile::MR;
}

// sums[i] += the sum of a k-major panel's row i (i < m), k upward in f64, as
// for a row-major A's rows. The rows' sums advance side by side: one row at a
// time, each sum was a chain of dependent f64 adds, K = 2048 long for W-GPT's
// weight gradients (a third of this packer's time on Zen 3); side by side
// the chains overlap, and each row's order, so its result, is unchanged.
template <int MR>
void add_panel_sums(const float* dst, int64_t kc, int m, double* sums) {
  double s[MR] = {};
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i) s[i] += dst[k * MR + i];  // rows past m are zeros: unused
  for (int i = 0; i < m; ++i) sums[i] += s[i];
}

// sums[i] += the sum of row i (i < m) of a row-layout panel (dst[i * AS +
// k]), k upward in f64.
template <int64_t AS>
void add_row_panel_sums(const float* dst, int64_t kc, int m, double* sums) {
  for (int i = 0; i < m; ++i) {
    double s = 0;
    for (int64_t k = 0; k < kc; ++k) s += dst[i * AS + k];
    sums[i] += s;
  }
}

// dst[k * MR + i] (AS 0) or, for a row-major A only, dst[i * AS + k] (AS > 0)
// = op(A)(i0 + i, p0 + k) for k < kc, i < MR (0 past M); op(A) is M x K:
// A[i * lda + k], or A[k * lda + i] when transposed. With sums, sums[i0 + i]
// += the row's values, k upward (gemm_f32_a_sums).
template <int MR, int64_t AS = 0>
void pack_a_panel(bool ta, const float* A, int64_t lda, int64_t M, int64_t p0, int64_t kc, int64_t i0, float* dst,
                  double* sums) {
  const int m = int(std::min<int64_t>(MR, M - i0));
  if constexpr (AS > 0) {  // a row-major A (a_by_rows): rows copied as they are, vector moves
    for (int i = 0; i < MR; ++i) {
      if (i < m)
        std::copy_n(A + (i0 + i) * lda + p0, kc, dst + i * AS);
      else
        std::fill_n(dst + i * AS, kc, 0.0f);
    }
    if (sums) add_row_panel_sums<AS>(dst, kc, m, sums + i0);
    return;
  } else if (!ta && m == MR && !sums) {  // the common case: MR rows read side by side, the panel written in order
    const float* r[MR];
    for (int i = 0; i < MR; ++i) r[i] = A + (i0 + i) * lda + p0;
    for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) dst[k * MR + i] = r[i][k];
    return;
  }
  if (ta && m == MR && i0 + 8 <= M && MR <= 8) {
    // A whole panel of a transposed A: MR contiguous floats per k, moved as
    // one 8-float copy each (the MR scalar moves per k were 7% of a W-GPT
    // step at AVX2, its weight-gradient products having K = 2048). The 8 - MR
    // floats past each step are written over by the next step, the last
    // step's by the next panel or the buffer's slack (gemm_blocked_with);
    // i0 + 8 <= M keeps the reads inside A. Each k reads another row of A,
    // lda floats on: the row 8 steps ahead is asked for now (the load stalls
    // were a quarter of this packer's time on Zen 3, `perf annotate`).
    for (int64_t k = 0; k < kc; ++k) {
      if (k + 8 < kc) __builtin_prefetch(A + (p0 + k + 8) * lda + i0);
      float tmp[8];
      std::copy_n(A + (p0 + k) * lda + i0, 8, tmp);
      std::copy_n(tmp, 8, dst + k * MR);
    }
    if (sums) add_panel_sums<MR>(dst, kc, m, sums + i0);
    return;
  }
  if (ta) {  // op(A)(i, k) = A[k * lda + i]: m contiguous floats per k, read in order
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (p0 + k) * lda + i0;
      for (int i = 0; i < m; ++i) dst[k * MR + i] = src[i];
      for (int i = m; i < MR; ++i) dst[k * MR + i] = 0.0f;
    }
    if (sums) add_panel_sums<MR>(dst, kc, m, sums + i0);
    return;
  }
  for (int i = 0; i < MR; ++i) {
    if (i >= m) {
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
      continue;
    }
    double s = 0;
    const float* src = A + (i0 + i) * lda + p0;
    for (int64_t k = 0; k < kc; ++k) {
      dst[k * MR + i] = src[k];
      s += src[k];
    }
    if (sums) sums[i0 + i] += s;
  }
}

// The blocked loops over Tile with the caller's packers, for any operand
// storage (gemm_blocked below: float; core/cpu/gemm_half.cpp: 16-bit):
//   pack_a(pc, kc, i0, i_end, dst, row_sums): rows [i0, i0 + MR) x depth
//     [pc, pc + kc) of op(A) as Tile wants its A panel, rows at or past i_end
//     zero; with row_sums (float operands only), row_sums[i] += each row's sum;
//   pack_b(pc, kc, j0, j_end, dst): depth [pc, pc + kc) x columns [j0, j0 + NR)
//     of op(B), columns at or past j_end zero;
//   store(i0, j0, m, n, c): called for each block of m <= MC rows and n <= NC
//     columns of C (at c, row stride ldc) right after its last K block, while
//     it is in L2: the activation (NOTE [ The activation in the GEMM's store ]
//     in gemm_avx512.cpp) or gemm_half's rounding into 16-bit outputs.
// A panel holds ceil(kc / Tile::KU) packed steps of MR (NR) 4-byte units: a
// float each for the f32 tiles (KU 1), a pair of 16-bit values along k for
// the bf16 dot-product tile (KU 2); Tile::run gets the step count.
// a_kmajor: pack_a writes k-major panels (tiles with Tile::AS only; see a_by_rows).
template <class Tile, class PackA, class PackB, class Store>
void gemm_blocked_with(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, float* a_sums, PackA pack_a, PackB pack_b, Store store,
                       bool a_kmajor = false) {
  constexpr int MR = Tile::MR, NR = Tile::NR, KU = Tile::KU;
  constexpr int64_t KC = Tile::KC, MC = Tile::MC, NC = Tile::NC;
  static_assert(NC % NR == 0 && MC % MR == 0 && KC % KU == 0, "blocks are whole panels");
  // The grid of threads (NOTE [ Blocked GEMM ]): tm x tn rectangles, the
  // split with the least work per thread counted per k as register-tile
  // multiply-adds (MR * NR each) plus packing, about 8 of them per element
  // packed: each thread packs the A rows and B columns of its own rectangle,
  // so a column split packs all of A in every thread. W-GPT's products (2048
  // rows, 128 columns) split their rows; a square one splits its columns.
  const int64_t col_panels = (N + NR - 1) / NR, row_panels = (M + MR - 1) / MR;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(nthreads, col_panels * row_panels)));
  int tm = 1, tn = nt;
  {
    int64_t best = -1;
    for (int a = 1; a <= nt; ++a) {
      if (nt % a) continue;
      const int b = nt / a;
      if (a > row_panels || b > col_panels) continue;
      const int64_t rows = (row_panels + a - 1) / a, cols = (col_panels + b - 1) / b;
      const int64_t cost = rows * cols * MR * NR + 8 * (rows * MR + cols * NR);
      if (best < 0 || cost < best) {
        best = cost;
        tm = a;
        tn = b;
      }
    }
    if (best < 0) tm = 1, tn = int(std::min<int64_t>(nt, col_panels));  // nt > panels both ways: columns
  }
  std::vector<double> sums(a_sums ? size_t(M) : 0, 0.0);

  // One thread's rectangle of C: rows [i_lo, i_hi), columns [j_lo, j_hi).
  auto rectangle = [&](int t) {
    const int tr = t / tn, tc = t % tn;
    if (tr >= tm) return;  // nt not a multiple of tn: the spare thread idles
    const int64_t i_lo = std::min(M, row_panels * tr / tm * MR), i_hi = std::min(M, row_panels * (tr + 1) / tm * MR);
    const int64_t j_lo = std::min(N, col_panels * tc / tn * NR), j_hi = std::min(N, col_panels * (tc + 1) / tn * NR);
    if (i_lo >= i_hi || j_lo >= j_hi) return;
    // Packed steps of the deepest block; 32 floats of slack past each buffer
    // for packers that store whole vectors (core/cpu/gemm_half.cpp).
    const int64_t kp_max = (std::min<int64_t>(KC, K) + KU - 1) / KU;
    float* bblock = tl_blocked_b.get(size_t(kp_max * std::min<int64_t>(NC, (j_hi - j_lo + NR - 1) / NR * NR)) + 32);
    float* ablock =
        tl_blocked_a.get(size_t(a_panel_floats<Tile>(kp_max) * std::min<int64_t>(MC / MR, (i_hi - i_lo + MR - 1) / MR)) +
                         32);
    for (int64_t jc = j_lo; jc < j_hi; jc += NC) {
      const int64_t nc = std::min(NC, j_hi - jc), npanels = (nc + NR - 1) / NR;
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc), kp = (kc + KU - 1) / KU;
        const bool first = pc == 0, last = pc + kc == K;
        for (int64_t jp = 0; jp < npanels; ++jp) pack_b(pc, kc, jc + jp * NR, j_hi, bblock + jp * kp * NR);
        for (int64_t ic = i_lo; ic < i_hi; ic += MC) {
          const int64_t mc = std::min(MC, i_hi - ic), mpanels = (mc + MR - 1) / MR;
          // The row sums once: by the first column of threads, in the first column block.
          double* row_sums = a_sums && tc == 0 && jc == j_lo ? sums.data() : nullptr;
          const int64_t ap = a_panel_floats<Tile>(kp);  // floats per A panel
          for (int64_t ip = 0; ip < mpanels; ++ip) pack_a(pc, kc, ic + ip * MR, i_hi, ablock + ip * ap, row_sums);
          for (int64_t jp = 0; jp < npanels; ++jp)
            for (int64_t ip = 0; ip < mpanels; ++ip) {
              const int64_t i0 = ic + ip * MR, j0 = jc + jp * NR;
              const int m = int(std::min<int64_t>(MR, i_hi - i0)), n = int(std::min<int64_t>(NR, j_hi - j0));
              float* c = C + i0 * ldc + j0;
              if constexpr (a_row_stride<Tile>() > 0)
                Tile::run(kp, ablock + ip * ap, bblock + jp * kp * NR, m, n, c, ldc, alpha, first ? beta : 1.0f,
                          first && bias ? bias + j0 : nullptr, a_kmajor);
              else
                Tile::run(kp, ablock + ip * ap, bblock + jp * kp * NR, m, n, c, ldc, alpha, first ? beta : 1.0f,
                          first && bias ? bias + j0 : nullptr);
            }
          // The store over the whole mc x nc block (in L2), row by row: per
          // tile, its rows were 64-byte pieces of the arrays the store reads
          // (a saved pre-activation in backward), which the prefetcher does
          // not follow; at AVX2 the loads waited on memory for 40% of the
          // fused GELU's time.
          if (last) store(ic, jc, int(mc), int(nc), C + ic * ldc + jc);
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

// The packed float GEMM (gemm_detail.h's gemm_f32_packed contract) over an
// f32 Tile (KU 1): Tile::MR, NR (the register tile), KC, MC, NC (the blocks)
// and Tile::run(kc, a_panel, b_panel, m, n, c, ldc, alpha, beta, bias).
template <class Tile>
void gemm_blocked(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                  float* a_sums, GemmAct act, float* pre) {
  static_assert(Tile::KU == 1, "float operands go to an f32 tile");
  const bool with_act = act != GemmAct::none || pre != nullptr;
  gemm_blocked_with<Tile>(
      M, N, K, alpha, beta, C, ldc, nthreads, bias, a_sums,
      [&](int64_t pc, int64_t kc, int64_t i0, int64_t i_end, float* dst, double* row_sums) {
        if (a_by_rows<Tile>(ta))
          pack_a_panel<Tile::MR, a_row_stride<Tile>()>(ta, A, lda, i_end, pc, kc, i0, dst, row_sums);
        else
          pack_a_panel<Tile::MR, 0>(ta, A, lda, i_end, pc, kc, i0, dst, row_sums);
      },
      [&](int64_t pc, int64_t kc, int64_t j0, int64_t j_end, float* dst) {
        pack_b_panel<Tile::NR>(tb, B, ldb, j_end, pc, kc, j0, dst);
      },
      [&](int64_t i0, int64_t j0, int m, int n, float* c) {
        if (with_act) apply_act(act, m, n, c, pre ? pre + i0 * ldc + j0 : nullptr, ldc);
      },
      !a_by_rows<Tile>(ta));
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail
