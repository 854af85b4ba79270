// SPDX-License-Identifier: MIT
// The packed AVX-512 float32 GEMM behind snug::kernels::gemm_f32.
//
// NOTE [ GEMM blocking ]
// The classic Goto/BLIS structure, in row-major terms:
//
//   for jc over N in NC columns            (B block: KC x NC, lives in L2)
//     for pc over K in KC                  (pack the B block once, all threads share it)
//       for each MR-row panel of A         (pack 14 x KC of op(A): lives in L1)
//         for each NR-column panel of B    (stream 32-wide panels from L2)
//           14 x 32 micro-kernel: 28 zmm accumulators, per k two vector loads
//           of B and 14 broadcasts of A, 28 FMAs
//
// The micro-kernel keeps C in registers over the whole KC loop and touches C
// once at the end (alpha/beta applied there; beta only on the first K block).
// Packing makes every micro-kernel read unit-stride whatever the transposes and
// leading dimensions are, and zero-pads B panels so the kernel never branches
// on N; the M edge uses a kernel instantiated for exactly the rows left and the
// N edge masks the C stores.
//
// Threads: the (MR-panel x NR-panel) grid of each NC block is cut into a
// tm x tn grid of rectangles, one per thread, chosen to balance the work
// (tall problems split M, wide ones split N). Each thread packs the B panels
// of its own columns, so there is no barrier inside the product; a split of M
// packs those panels once per thread row, which the grid choice counts.
#include <snug/core/cpu/gemm_detail.h>
#include <snug/core/cpu/simd_avx512.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include <omp.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

#if defined(__AVX512F__)

namespace {

constexpr int MR = 14;  // rows of the register tile
constexpr int NR = 32;  // columns of the register tile (two zmm)
#ifndef SNUG_GEMM_KC    // overridable at compile time for tuning experiments
#define SNUG_GEMM_KC 256
#endif
#ifndef SNUG_GEMM_NC
#define SNUG_GEMM_NC 1024
#endif
constexpr int64_t KC = SNUG_GEMM_KC;  // depth of a packed block
constexpr int64_t NC = SNUG_GEMM_NC;  // width of a packed B block (multiple of NR)
static_assert(NC % NR == 0, "NC must be a multiple of NR");

// NOTE [ Copying A's rows ]
// A row-major A (activations x in x W^T, output gradients g in g W) has to be
// transposed into the k-major panel, 16 x 16 at a time in registers: about 64
// shuffles per 256 floats, on the port that also does half the FMAs. With N
// small (W-GPT: 128 columns, four register tiles per panel) that was 7-11% of
// the kernels' time, `pack_transposed16` 4% of a step. The kernel does not
// need the k-major layout: it broadcasts one float per row and k either way.
// So the rows are copied unchanged into a panel with a fixed row stride AS;
// with AS a compile-time constant, each row's broadcast is one instruction
// with a constant displacement (the in-place kRowsA needs lda at run time, 14
// addresses to keep). AS = KC + 16: rows 1,088 bytes apart fall in different
// L1 sets.
constexpr int64_t AS = KC + 16;

thread_local Scratch tl_a_panel;
thread_local Scratch tl_b_block;
thread_local Scratch tl_a_block;               // packed A panels of one K block (transposed A)
constexpr int64_t kABlockFloats = 192 * 1024;  // 768 KiB: W-GPT's 512-row weight gradients on one thread
constexpr int64_t kAllBFloats = 128 * 1024;    // 512 KiB: all of B for NOTE [ Panels on demand ]

// Transposing copy used by both packers: src holds `rows` (<= 16) rows of
// `len` contiguous floats, row stride ld. Writes dst[k * dst_stride + r] =
// src[r * ld + k] for k < len and all 16 r (rows >= `rows` read as zero). Each
// k writes 16 floats, so dst must have 16 floats of slack past the last k and,
// when dst_stride < 16, k must go upward (later k overwrite the spill).
inline void pack_transposed16(const float* src, int64_t ld, int rows, int64_t len, float* dst, int64_t dst_stride) {
  __m512 r[16];
  for (int64_t k0 = 0; k0 < len; k0 += 16) {
    int64_t w = std::min<int64_t>(16, len - k0);
    __mmask16 m = head_mask(w);
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + i * ld + k0) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t c = 0; c < w; ++c) _mm512_storeu_ps(dst + (k0 + c) * dst_stride, r[c]);
  }
}

// Pack rows [i0, i0+mr) x depth [p0, p0+kc) of op(A) as dst[k * MR + i].
void pack_a(bool trans_a, const float* A, int64_t lda, int64_t i0, int mr, int64_t p0, int64_t kc, float* dst) {
  if (!trans_a) {
    // op(A)(i, k) = A[i * lda + k]: rows are contiguous in k, so transpose.
    pack_transposed16(A + i0 * lda + p0, lda, mr, kc, dst, MR);
  } else {
    // op(A)(i, k) = A[k * lda + i]: already k-major, copy mr floats per k.
    __mmask16 m = head_mask(mr);
    const float* s = A + p0 * lda + i0;
    for (int64_t k = 0; k < kc; ++k) _mm512_storeu_ps(dst + k * MR, _mm512_maskz_loadu_ps(m, s + k * lda));
  }
}

// NOTE [ Packing a transposed A by rows ]
// A transposed A (the weight gradients g^T x: A = g is K x M) packed one panel
// at a time reads, per k, 14 floats from rows lda floats apart: a panel's K
// block touches 256 lines spread over hundreds of KiB, a stride the hardware
// prefetcher does not follow across pages, so the loads waited on memory with
// little overlap (the packing was 15-22% of the kernels' time on
// 384 x 128 x 2048, `perf`; software prefetching of the next panel did not
// help, the prefetches queue for the same fill buffers). Packing all of a
// thread's panels of a K block at once reads each row of A left to right, one
// stream the prefetcher follows: three times faster in a microbenchmark with
// A in memory. Panel p goes to dst + p * stride, stride = kc * MR + 16: the
// padding keeps the panels' rows, written together, out of one L1 set.
void pack_a_block_trans(const float* A, int64_t lda, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int64_t stride,
                        float* dst) {
  const int64_t full = rows / MR;  // whole panels; a last partial one is masked
  const int tail = int(rows - full * MR);
  const __mmask16 m = head_mask(MR), mt = head_mask(tail);
  // 16 rows at a time: the rows' next 56 bytes stay in L1 from one panel to
  // the next, and each panel receives 16 consecutive rows, 896 bytes in a run.
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t k1 = std::min(kc, k0 + 16);
    for (int64_t p = 0; p <= full; ++p) {
      if (p == full && !tail) break;
      const __mmask16 ml = p < full ? m : mt;
      const float* s = A + (p0 + k0) * lda + i0 + p * MR;
      float* d = dst + p * stride + k0 * MR;
      for (int64_t k = k0; k < k1; ++k, s += lda, d += MR) _mm512_mask_storeu_ps(d, m, _mm512_maskz_loadu_ps(ml, s));
    }
  }
}

// Copy rows [i0, i0+mr) x depth [p0, p0+kc) of a row-major A as dst[i * AS + k]
// (NOTE [ Copying A's rows ]).
void copy_a_rows(const float* A, int64_t lda, int64_t i0, int mr, int64_t p0, int64_t kc, float* dst) {
  const __mmask16 mt = head_mask(kc % 16);
  for (int i = 0; i < mr; ++i) {
    const float* s = A + (i0 + i) * lda + p0;
    float* d = dst + i * AS;
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(s + k));
    if (k < kc) _mm512_mask_storeu_ps(d + k, mt, _mm512_maskz_loadu_ps(mt, s + k));
  }
}

// Pack depth [p0, p0+kc) x columns [j0, j0+nr) of a transposed B (op(B)(k, j)
// = B[j * ldb + k]) as dst[k * NR + j], zero-padded to NR columns: 16 columns
// at a time through a transpose. A plain B goes through pack_b_block.
void pack_b_trans(const float* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int nr, float* dst) {
  for (int h = 0; h < 2; ++h) {
    int rows = std::max(0, std::min(16, nr - 16 * h));
    pack_transposed16(B + (j0 + 16 * h) * ldb + p0, ldb, rows, kc, dst + 16 * h, NR);
  }
}

// Pack depth [p0, p0+kc) x columns [j0, j0+ncols) of a non-transposed B as
// consecutive panels (panel q at dst + q * kc * NR), 16 rows at a time: the
// per-panel packing read 256 rows of 128 bytes each, rows ldb floats apart (one
// page apart at ldb = 1024), which the hardware prefetcher does not follow;
// by chunks of rows, each row is read left to right across all the panels
// (NOTE [ Packing a transposed A by rows ] has the same problem for A).
void pack_b_block(const float* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t ncols, float* dst) {
  const int64_t np = (ncols + NR - 1) / NR;
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t k1 = std::min(kc, k0 + 16);
    for (int64_t q = 0; q < np; ++q) {
      const int64_t nr = std::min<int64_t>(NR, ncols - q * NR);
      const __mmask16 m0 = head_mask(nr), m1 = head_mask(nr > 16 ? nr - 16 : 0);
      const float* s = B + (p0 + k0) * ldb + j0 + q * NR;
      float* d = dst + q * kc * NR + k0 * NR;
      for (int64_t k = k0; k < k1; ++k, s += ldb, d += NR) {
        _mm512_store_ps(d, _mm512_maskz_loadu_ps(m0, s));
        _mm512_store_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      }
    }
  }
}

// sums[0, mr) += sum over k < kc of the packed panel's rows. Four float
// accumulators (k mod 4): one running sum would be a chain of dependent adds,
// 4 cycles per k, which measured as slow as the separate sum it replaces. The
// four are folded in a fixed order and added to the double totals per block.
void add_panel_sums(const float* panel, int mr, int64_t kc, double* sums) {
  const __mmask16 m = head_mask(mr);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4)
    for (int u = 0; u < 4; ++u) acc[u] = _mm512_add_ps(acc[u], _mm512_maskz_loadu_ps(m, panel + (k + u) * MR));
  for (; k < kc; ++k) acc[0] = _mm512_add_ps(acc[0], _mm512_maskz_loadu_ps(m, panel + k * MR));
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  for (int i = 0; i < mr; ++i) sums[i] += double(t[i]);
}

// Where the micro-kernel reads op(A)[i][k] (NOTE [ Unpacked A ]):
//   kPackedA: a packed panel, a[k * MR + i];
//   kColsA:   op(A) stored transposed (A is K x M), a[k * lda + i], read in place;
//   kRowsA:   op(A) stored as is (M x K), a[i * lda + k], read in place.
//   kRowCopyA: rows copied as they are, a[i * AS + k] (NOTE [ Copying A's rows ]).
enum ALayout : int { kPackedA = 0, kColsA = 1, kRowsA = 2, kRowCopyA = 3 };

// The register tile: C[0:R, 0:16*NV] (masked to n columns) =
//   alpha * sum_k a[k][0:R] x b[k][0:16*NV] + beta * C (+ bias[0:16*NV] per row).
template <int R, int NV, int AL>
void micro_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b, float* c, int64_t ldc,
                  float alpha, float beta, int n, const float* bias) {
  // Pull the C tile towards L1 while the FMAs run; it is touched only at the end.
  for (int i = 0; i < R; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    if (NV > 1) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  __m512 acc[R][NV];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();

#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_load_ps(b);
    __m512 b1 = NV > 1 ? _mm512_load_ps(b + 16) : b0;
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      __m512 ai = _mm512_set1_ps(AL == kRowsA ? a[i * lda] : AL == kRowCopyA ? a[i * AS] : a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      if constexpr (NV > 1) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += AL == kPackedA ? MR : (AL == kColsA ? lda : 1);  // kRowsA, kRowCopyA: next column
    b += NR;
  }

  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 m[2] = {head_mask(n), head_mask(n > 16 ? n - 16 : 0)};
  __m512 bv[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  if (bias)
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], bias + 16 * v);
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* p = c + i * ldc + 16 * v;
      __m512 r = _mm512_mul_ps(va, acc[i][v]);
      if (beta == 1.0f)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], p));
      else if (beta != 0.0f)
        r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], p), r);
      if (bias) r = _mm512_add_ps(r, bv[v]);
      _mm512_mask_storeu_ps(p, m[v], r);
    }
  }
}

using KernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, float, float, int,
                          const float*);

template <int... Rs>
constexpr auto make_table(std::integer_sequence<int, Rs...>) {
  struct Table {
    KernelFn k[4][MR][2];
  } t{};
  ((t.k[kPackedA][Rs][0] = &micro_kernel<Rs + 1, 1, kPackedA>,
    t.k[kPackedA][Rs][1] = &micro_kernel<Rs + 1, 2, kPackedA>, t.k[kColsA][Rs][0] = &micro_kernel<Rs + 1, 1, kColsA>,
    t.k[kColsA][Rs][1] = &micro_kernel<Rs + 1, 2, kColsA>, t.k[kRowsA][Rs][0] = &micro_kernel<Rs + 1, 1, kRowsA>,
    t.k[kRowsA][Rs][1] = &micro_kernel<Rs + 1, 2, kRowsA>, t.k[kRowCopyA][Rs][0] = &micro_kernel<Rs + 1, 1, kRowCopyA>,
    t.k[kRowCopyA][Rs][1] = &micro_kernel<Rs + 1, 2, kRowCopyA>),
   ...);
  return t;
}

// NOTE [ Unpacked A ]
// Packing an A panel costs about as much as the FMAs that use it when N is
// small: each packed element feeds N / 16 vector FMAs, so at N = 128 (W-GPT's
// projections, most of its backward) the transposing pack of a row-major A
// was ~10% of a training step. The micro-kernel can instead read op(A) where
// it lies: a transposed A already has the packed layout up to its leading
// dimension (kColsA), and a row-major A can be read row by row (kRowsA; 14
// rows of one K block are 14 KiB, within L1).
// Reading in place has a cost too: one K block of a transposed A is 256 rows
// lda floats apart, which fall into a few of L1's 64 sets (all of them 4 KiB
// apart into one), so the panel does not stay in L1 while B panels stream
// past. Since each thread packs its own B panels (no barriers), packing A
// measured faster: W-GPT's step, whose weight gradients are the transposed-A
// products, 2-6% (three runs of 7-9 alternating pairs, docs/lab/cpu-performance-log.md).
// So the default packs a transposed A, and copies a row-major A's rows as
// they are (NOTE [ Copying A's rows ]). SNUG_GEMM_A (read once) picks: 0 the
// default, 1 read a transposed A in place when its rows are at most 4 KiB
// apart, 2 also read a row-major A in place, 3 transpose-pack a row-major A
// too (the default until the eighth session). Tests run all four.
int a_layout_choice() {
  static const int v = [] {
    const char* e = std::getenv("SNUG_GEMM_A");
    return e ? std::atoi(e) : 0;
  }();
  return v;
}
int a_layout(bool ta, int64_t lda) {
  const int c = a_layout_choice();
  if (c == 3) return kPackedA;  // the transposing pack for a row-major A too
  if (!ta && c != 2) return kRowCopyA;
  if (c == 0) return kPackedA;
  if (ta) return lda <= 1024 || c >= 2 ? kColsA : kPackedA;
  return c >= 2 ? kRowsA : kPackedA;
}
constexpr auto kKernels = make_table(std::make_integer_sequence<int, MR>{});

// Split nt threads into a tm x tn grid over (pm MR-panels) x (pn NR-panels),
// minimising the largest share of per-k work, in rough cycles: a full register
// tile is 14 cycles of FMAs; packing a B panel (32 floats) or an A panel (14,
// through a transpose) about 2. Each thread packs the B panels of its own
// columns, so a split of M packs them once per row of threads, and a split of
// N packs each A panel once per column of threads. Ties go to splitting M.
void choose_grid(int nt, int64_t pm, int64_t pn, bool packs_a, int& tm, int& tn) {
  int64_t best = -1;
  for (int a = 1; a <= nt; ++a) {
    if (nt % a) continue;
    int b = nt / a;
    const int64_t rows = (pm + a - 1) / a, cols = (pn + b - 1) / b;
    const int64_t cost = rows * cols * 14 + cols * 2 + (packs_a ? rows * 2 : 0);
    if (best < 0 || cost < best || (cost == best && a > tm)) {
      best = cost;
      tm = a;
      tn = b;
    }
  }
}

struct Problem {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float* C;
  int64_t ldc;
  const float* bias;                 // N floats added to every row with the first K block, or null
  double* a_sums;                    // M running sums of op(A)'s rows, or null (gemm_f32_a_sums)
  std::atomic<int64_t>* next_panel;  // the shared row-panel counter of NOTE [ Panels on demand ]
  GemmAct act;  // applied to each row panel after its last K block (NOTE [ The activation in the GEMM's store ])
  float* pre;   // receives C before the activation, or null
};

// NOTE [ The activation in the GEMM's store ]
// A Linear layer followed by an activation (W-MLP's and W-CNN's ReLUs,
// W-GPT's GELU) was a GEMM that wrote C, then an elementwise pass that read C
// back from memory and wrote a second tensor. Here the activation runs on a
// row panel (up to 14 rows of the thread's columns: at most 56 KiB at N =
// 1024) right after the panel's last K block is stored, while those rows are
// still in L1/L2. The values before it (GELU's backward needs them) are copied
// out in the same sweep. Not inside the micro-kernel: the activations are the
// elementwise functors (core/functors.h), compiled to SIMD by the compiler,
// so the fused and the unfused paths give the same values.
void panel_act(const Problem& P, int64_t i0, int mr, int64_t j0, int64_t j1) {
  if ((P.act == GemmAct::none && !P.pre) || j1 <= j0) return;
  apply_act(P.act, mr, j1 - j0, P.C + i0 * P.ldc + j0, P.pre ? P.pre + i0 * P.ldc + j0 : nullptr, P.ldc);
}

// NOTE [ Panels on demand ]
// On a shared machine a thread is sometimes descheduled for milliseconds
// (this VM: 10-40% steal time). With a fixed split of the rows, the other
// thread then finishes its half and waits, and the product takes as long as
// the slow half. When the grid splits only M (every thread packs all of B
// anyway), N fits one NC block, and either K fits one K block or all of B's
// K blocks fit in 512 KiB with a row-major A (W-GPT's forward products and
// input gradients), each thread packs all of B and then takes row panels two
// at a time from a shared counter: a running thread takes over the panels of
// a stalled one. A panel's K blocks are run by the thread that took it, in
// order, exactly as in the fixed split, so the bits do not depend on which
// thread computed a tile. The weight gradients (transposed A, K = 2048) keep
// the fixed split and their block-wise packing of A.
constexpr int64_t kPanelsPerTake = 2;

// Pack depth [pc, pc+kc) x columns [j0, j0+ncols) of op(B) as consecutive
// NR-wide panels (panel q at dst + q * kc * NR).
void pack_b_panels(const Problem& P, int64_t pc, int64_t kc, int64_t j0, int64_t ncols, float* dst) {
  if (!P.tb) {
    pack_b_block(P.B, P.ldb, pc, kc, j0, ncols, dst);
    return;
  }
  for (int64_t q = 0; q * NR < ncols; ++q)
    pack_b_trans(P.B, P.ldb, pc, kc, j0 + q * NR, int(std::min<int64_t>(NR, ncols - q * NR)), dst + q * kc * NR);
}

// Where the kernel reads rows [i0, i0+mr) x depth [pc, pc+kc) of op(A) in
// layout al: packed or copied into apanel, or A itself when read in place.
const float* a_panel(const Problem& P, int al, int64_t i0, int mr, int64_t pc, int64_t kc, float* apanel) {
  if (al == kPackedA) {
    pack_a(P.ta, P.A, P.lda, i0, mr, pc, kc, apanel);
    return apanel;
  }
  if (al == kRowCopyA) {
    copy_a_rows(P.A, P.lda, i0, mr, pc, kc, apanel);
    return apanel;
  }
  return al == kColsA ? P.A + pc * P.lda + i0 : P.A + i0 * P.lda + pc;
}

// One thread's share of the work: a rectangle of register tiles of each NC
// block, over all of K. The thread packs the B panels of its own columns into
// its own buffer, so the team never waits on itself: with
// OMP_WAIT_POLICY=passive (docs/performance.md) a barrier can put a thread to
// sleep, and the two per KC block the shared B block needed cost the 2-thread
// weight-gradient products (128 x 128 x 2048) about half their speed-up.
// NOTE [ Panels on demand ]: the thread packs all of B (every K block), then
// takes row panels from the shared counter and runs each over all of K.
void run_on_demand(const Problem& P, int al) {
  const int64_t pm = (P.M + MR - 1) / MR, pn = (P.N + NR - 1) / NR;
  float* apanel = tl_a_panel.get(MR * AS + 32);
  float* bbuf = tl_b_block.get(size_t(P.K * pn * NR) + 32);
  auto bblock = [&](int64_t pc) { return bbuf + pc * pn * NR; };  // block pc's panels, kc * NR floats apart
  for (int64_t pc = 0; pc < P.K; pc += KC) pack_b_panels(P, pc, std::min(KC, P.K - pc), 0, P.N, bblock(pc));
  for (int64_t p0; (p0 = P.next_panel->fetch_add(kPanelsPerTake, std::memory_order_relaxed)) < pm;) {
    for (int64_t p = p0; p < std::min(pm, p0 + kPanelsPerTake); ++p) {
      const int64_t i0 = p * MR;
      const int mr = int(std::min<int64_t>(MR, P.M - i0));
      for (int64_t pc = 0; pc < P.K; pc += KC) {  // in order: C adds the K blocks one after another
        const int64_t kc = std::min(KC, P.K - pc);
        const float* a = a_panel(P, al, i0, mr, pc, kc, apanel);
        if (P.a_sums) add_panel_sums(a, mr, kc, P.a_sums + i0);
        const float beta = pc == 0 ? P.beta : 1.0f;
        for (int64_t q = 0; q < pn; ++q) {
          const int64_t j0 = q * NR;
          const int nr = int(std::min<int64_t>(NR, P.N - j0));
          kKernels.k[al][mr - 1][nr > 16](kc, a, P.lda, bblock(pc) + q * kc * NR, P.C + i0 * P.ldc + j0, P.ldc, P.alpha,
                                          beta, nr, pc == 0 && P.bias ? P.bias + j0 : nullptr);
        }
      }
      panel_act(P, i0, mr, 0, P.N);
    }
  }
}

void run_thread(const Problem& P, int tid, int nt) {
  const int64_t pm = (P.M + MR - 1) / MR;
  // Row sums are taken from the packed panels, so they force packing.
  const int al = P.a_sums ? int(kPackedA) : a_layout(P.ta, P.lda);
  if (nt > 1 && P.next_panel && P.N <= NC) {
    // NOTE [ Panels on demand ]: when the grid splits M only, and all of B fits
    // in a quarter of L2 (or there is one K block). A transposed A over several
    // K blocks keeps the fixed split, where it is packed a block at a time.
    const int64_t pn = (P.N + NR - 1) / NR;
    int tm = 1, tn = 1;
    choose_grid(nt, pm, pn, al == kPackedA || al == kRowCopyA, tm, tn);
    if (tn == 1 && (P.K <= KC || (!P.ta && P.K * pn * NR <= kAllBFloats))) {
      run_on_demand(P, al);
      return;
    }
  }
  float* apanel = tl_a_panel.get(MR * AS + 32);
  for (int64_t jc = 0; jc < P.N; jc += NC) {
    const int64_t nc = std::min(NC, P.N - jc);
    const int64_t pn = (nc + NR - 1) / NR;
    int tm = 1, tn = 1;
    choose_grid(nt, pm, pn, al == kPackedA || al == kRowCopyA, tm, tn);
    const int ti = tid / tn, tj = tid % tn;
    const int64_t m_lo = pm * ti / tm, m_hi = pm * (ti + 1) / tm;
    const int64_t n_lo = pn * tj / tn, n_hi = pn * (tj + 1) / tn;
    if (m_lo == m_hi || n_lo == n_hi) continue;
    float* bbuf = tl_b_block.get(size_t(std::min(P.K, KC) * (n_hi - n_lo) * NR) + 32);
    // A transposed A is packed a whole K block at a time while the thread's
    // panels fit in 768 KiB (NOTE [ Packing a transposed A by rows ]).
    const int64_t a_rows = std::min(m_hi * MR, P.M) - m_lo * MR;
    const int64_t a_stride = std::min(P.K, KC) * MR + 16;
    const bool a_block = al == kPackedA && P.ta && (m_hi - m_lo) * a_stride <= kABlockFloats;
    float* ablock = a_block ? tl_a_block.get(size_t((m_hi - m_lo) * a_stride) + 32) : nullptr;
    for (int64_t pc = 0; pc < P.K; pc += KC) {
      const int64_t kc = std::min(KC, P.K - pc);
      pack_b_panels(P, pc, kc, jc + n_lo * NR, std::min(nc, n_hi * NR) - n_lo * NR, bbuf);
      const float beta = pc == 0 ? P.beta : 1.0f;
      if (a_block) pack_a_block_trans(P.A, P.lda, m_lo * MR, a_rows, pc, kc, a_stride, ablock);
      for (int64_t p = m_lo; p < m_hi; ++p) {
        const int64_t i0 = p * MR;
        const int mr = int(std::min<int64_t>(MR, P.M - i0));
        const float* a = a_block ? ablock + (p - m_lo) * a_stride : a_panel(P, al, i0, mr, pc, kc, apanel);
        // Each panel's K block is packed once per thread column and NC block;
        // one of them (first block, the thread holding the first columns)
        // adds it to the row sums, always in pc order.
        if (P.a_sums && jc == 0 && n_lo == 0) add_panel_sums(a, mr, kc, P.a_sums + i0);
        for (int64_t q = n_lo; q < n_hi; ++q) {
          const int64_t j0 = jc + q * NR;
          const int nr = int(std::min<int64_t>(NR, P.N - j0));
          kKernels.k[al][mr - 1][nr > 16](kc, a, P.lda, bbuf + (q - n_lo) * kc * NR, P.C + i0 * P.ldc + j0, P.ldc,
                                          P.alpha, beta, nr, pc == 0 && P.bias ? P.bias + j0 : nullptr);
        }
        if (pc + kc >= P.K) panel_act(P, i0, mr, jc + n_lo * NR, std::min(P.N, jc + n_hi * NR));
      }
    }
  }
}

}  // namespace

bool gemm_f32_packed_available() { return true; }

namespace {

// NOTE [ Splitting K for a small C ]
// The weight gradients (g^T x: 128-512 x 128-512 outputs over K = 2048) have
// few register tiles and many K blocks. Split over M, each thread packed all
// of B (x) for every K block, and a few rows of panels split unevenly (10
// panels of 128 rows: 5 against 4 and a sliver): 0.50-0.71 of the peak on two
// threads against 0.73-0.87 for the other W-GPT products. These products are
// instead computed as two halves of K, C = (A B)[K0] + (A B)[K1]: one half
// into C, the other into scratch, then added. Two threads take a half each,
// so each packs half of B and A and neither waits on an uneven row split. The
// split depends on the shape only (one thread computes the same two halves
// and the same sum), so results stay bit-identical for any thread count.
bool split_k(int64_t M, int64_t N, int64_t K) {
  const int64_t tiles = ((M + MR - 1) / MR) * ((N + NR - 1) / NR);
  return K >= 4 * KC && N <= NC && tiles <= 256;
}
thread_local Scratch tl_c_half;  // the second half's C (NOTE [ Splitting K for a small C ])

void gemm_split_k(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                  float* a_sums, GemmAct act, float* pre) {
  const int64_t nb = (K + KC - 1) / KC, kmid = (nb + 1) / 2 * KC;  // halves [0, kmid) and [kmid, K)
  float* C1 = tl_c_half.get(size_t(M * N) + 16);
  std::vector<double> s0(a_sums ? size_t(M) : 0, 0.0), s1(s0.size(), 0.0);
  const Problem P0{
      trans_a, trans_b,       M,      N, kmid, alpha, beta, A, lda, B, ldb, C, ldc, bias, a_sums ? s0.data() : nullptr,
      nullptr, GemmAct::none, nullptr};
  const Problem P1{trans_a,
                   trans_b,
                   M,
                   N,
                   K - kmid,
                   alpha,
                   0.0f,
                   trans_a ? A + kmid * lda : A + kmid,
                   lda,
                   trans_b ? B + kmid : B + kmid * ldb,
                   ldb,
                   C1,
                   N,
                   nullptr,
                   a_sums ? s1.data() : nullptr,
                   nullptr,
                   GemmAct::none,
                   nullptr};
  if (nthreads <= 1) {
    run_thread(P0, 0, 1);
    run_thread(P1, 0, 1);
  } else {
#pragma omp parallel num_threads(nthreads)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      if (n == 1) {
        run_thread(P0, 0, 1);
        run_thread(P1, 0, 1);
      } else {
        const int h = n / 2;  // threads [0, h) take the first half, [h, n) the second
        if (t < h)
          run_thread(P0, t, h);
        else
          run_thread(P1, t - h, n - h);
      }
    }
  }
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    const float* c1 = C1 + i * N;
#pragma omp simd
    for (int64_t j = 0; j < N; ++j) c[j] += c1[j];
    apply_act(act, 1, N, c, pre ? pre + i * ldc : nullptr, ldc);  // the whole sum, row by row while in cache
  }
  for (size_t i = 0; i < s0.size(); ++i) a_sums[i] = float(s0[i] + s1[i]);
}

}  // namespace

void gemm_f32_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                     const float* bias, float* a_sums, GemmAct act, float* pre) {
  if (split_k(M, N, K)) {
    gemm_split_k(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, a_sums, act, pre);
    return;
  }
  const int64_t ncols = (std::min(N, NC) + NR - 1) / NR * NR;
  std::vector<double> sums(a_sums ? size_t(M) : 0, 0.0);
  std::atomic<int64_t> next_panel{0};
  Problem P{trans_a,     trans_b, M,  N, K, alpha, beta, A, lda, B, ldb, C, ldc, bias, a_sums ? sums.data() : nullptr,
            &next_panel, act,     pre};
  // No point in more threads than register tiles in one block.
  const int64_t tiles = ((M + MR - 1) / MR) * (ncols / NR);
  int nt = int(std::max<int64_t>(1, std::min<int64_t>(nthreads, tiles)));
  if (nt == 1) {
    run_thread(P, 0, 1);
  } else {
#pragma omp parallel num_threads(nt)
    {
      // The runtime may give us fewer threads than asked; the grid follows.
      run_thread(P, omp_get_thread_num(), omp_get_num_threads());
    }
  }
  for (size_t i = 0; i < sums.size(); ++i) a_sums[i] = float(sums[i]);
}

#elif !(defined(__AVX2__) && defined(__FMA__)) && !(defined(__aarch64__) && defined(__ARM_NEON))
// Neither AVX-512, AVX2 (core/cpu/gemm_avx2.cpp) nor NEON (core/cpu/gemm_neon.cpp): Eigen.

bool gemm_f32_packed_available() { return false; }
void gemm_f32_packed(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                     float*, int64_t, int, const float*, float*, GemmAct, float*) {
  std::abort();  // unreachable: gemm_f32 checks gemm_f32_packed_available()
}

#endif

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail
