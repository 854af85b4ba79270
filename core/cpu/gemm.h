// SPDX-License-Identifier: MIT
// Raw, tensor-free matrix multiply: the one float32 GEMM every snug matmul goes
// through on the CPU (Linear, batched matmul, conv via im2col), its float64
// sibling for gradchecks, and a plain triple loop kept beside them as the
// reference the tests compare against.
//
// Conventions (BLAS-like, row-major):
//   C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C
//   op(X) = X when trans_x is false, X^T when it is true.
//   A is stored M x K (lda >= K) or, transposed, K x M (lda >= M); the same for B.
//   Leading dimensions are in elements. beta == 0 means C is not read (it may
//   hold NaN or garbage); alpha == 0 or K == 0 means A and B are not read.
//
// See docs/lab/cpu-performance-log.md for how the fast path is built and how fast
// it is (docs/performance.md: the current numbers).
#pragma once
#include <cstdint>

#include <snug/core/cpu/level.h>
#include <snug/core/cpu/threads.h>

namespace snug {
// What gemm_f32_bias_act applies to each element of C as it stores it. The
// _grad values are the activations' derivatives for backward (gemm_f32_act_grad).
// One type for every level (NOTE [ CPU levels ] in core/cpu/level.h).
enum class GemmAct : int { none, relu, gelu, gelu_tanh, relu_grad, gelu_grad, gelu_tanh_grad };
// The derivative of a forward activation (relu, gelu, gelu_tanh), and
// whether an act is one of the derivatives.
constexpr GemmAct grad_of(GemmAct a) {
  return a == GemmAct::relu ? GemmAct::relu_grad : a == GemmAct::gelu ? GemmAct::gelu_grad : GemmAct::gelu_tanh_grad;
}
constexpr bool is_grad(GemmAct a) {
  return a == GemmAct::relu_grad || a == GemmAct::gelu_grad || a == GemmAct::gelu_tanh_grad;
}
// The storage of gemm_half's operands: IEEE half or bfloat16 bits.
enum class Half16 : int { f16, bf16 };
// gemm_half's optional 16-bit store (NOTE [ 16-bit GEMM ]).
struct HalfOut {
  // out = round(C), or with a forward act round(act(round(C))), or with a
  // _grad act round(round(C) * act'(z)): the values of the composed 16-bit
  // ops (matmul or Linear, then the elementwise op on 16-bit storage) bit
  // for bit, since each of those rounds its result once and computes in f32.
  uint16_t* out = nullptr;
  int64_t ldo = 0;
  uint16_t* pre = nullptr;  // receives round(C), before a forward act, when not null
  int64_t ldp = 0;
  GemmAct act = GemmAct::none;
  const uint16_t* z = nullptr;  // the saved pre-activation (M x N) a _grad act reads
  int64_t ldz = 0;
  // When not null, a_sums (M floats) = the sum over k of each row of op(A)
  // (not scaled by alpha), in f64 then rounded, as gemm_f32_a_sums: a Linear
  // layer's bias gradient read off the weight gradient's packed panels of
  // grad_out (CpuBackend::linear_backward). out may be null then (no 16-bit store).
  float* a_sums = nullptr;
};
}  // namespace snug

namespace snug::inline SNUG_CPU_LEVEL::kernels {

using snug::GemmAct;
using snug::Half16;
using snug::HalfOut;

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C (M x N) = alpha * op(A) * op(B) + bias, bias (N) added to every row: a
// Linear layer's forward in one pass (the bias is added where the GEMM stores
// its first K block, so no separate pass over C). C is not read. bias may be
// null (then it is gemm_f32 with beta = 0).
void gemm_f32_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias);

// C = act(alpha * op(A) * op(B) + bias): a Linear layer and the activation
// after it in one pass. The activation runs on each row panel of C right after
// its last K block is stored, while the panel is still in cache, instead of as
// a separate pass over C (NOTE [ The activation in the GEMM's store ] in
// core/cpu/gemm_avx512.cpp). When pre is not null, pre (M x N, row stride ldc)
// receives the values before the activation (what GELU's backward needs).
// The activations are core/functors.h's ReluF, GeluF and GeluTanhF, so the
// values equal those of gemm_f32_bias followed by the elementwise op.
void gemm_f32_bias_act(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias, GemmAct act,
                       float* pre);

// C = (alpha * op(A) * op(B)) * act'(z) elementwise, z (M x N, row stride
// ldc) the activation's input saved by the forward: the gradient of a Linear
// layer's input times the derivative of the activation before it, in one pass
// (act: relu, gelu or gelu_tanh). The same values as gemm_f32 followed by the
// elementwise backward (ReluBackwardF, GeluBackwardF, GeluTanhBackwardF).
void gemm_f32_act_grad(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, GemmAct act, const float* z);

// gemm_f32, and a_sums (M) = the sums over k of each row of op(A) (not
// scaled by alpha), in float within each K block of 256 and in double across
// blocks, in a fixed order: a Linear layer's
// weight and bias gradients in one pass, gW = g^T x with gb = sum_rows(g)
// (trans_a = true, A = g), the bias gradient read off the packed panels of g
// instead of a second pass over it. Thread count does not change the bits.
void gemm_f32_a_sums(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* a_sums);

// Correctness over speed (Eigen underneath); used by the f64 gradchecks.
void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// `batch` independent GEMMs; matrix b uses A + b*stride_a, B + b*stride_b,
// C + b*stride_c. Small matrices are spread across threads one whole matrix
// each; large ones are each split across all threads.
void gemm_f32_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                      float* C, int64_t ldc, int64_t stride_c, int64_t batch);
void gemm_f64_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                      int64_t lda, int64_t stride_a, const double* B, int64_t ldb, int64_t stride_b, double beta,
                      double* C, int64_t ldc, int64_t stride_c, int64_t batch);

// The plain triple loop (accumulating in double), single-threaded. The tests'
// ground truth; never used on a hot path.
void gemm_f32_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_f64_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                        int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// NOTE [ 16-bit GEMM ]
// C (M x N, f32) = alpha * op(A) op(B) + beta * C (+ bias), A and B 16-bit
// (both f16 or both bf16, `kind`), accumulated in f32: the products of
// autocast (matmul, Linear) without f32 copies of their operands. The
// conversion happens where the operands are packed into the GEMM's panels
// (core/cpu/gemm_half.cpp):
//   bf16 on a CPU with AVX512-BF16: the panels stay bf16, in pairs along k,
//     and vdpbf16ps multiplies a pair per float lane (twice the f32 FMA's
//     multiply-adds per instruction). It treats denormal inputs as zero and
//     flushes denormal results (values below ~1e-38), as oneDNN's bf16 does.
//   otherwise (f16 everywhere, bf16 without AVX512-BF16): each panel is
//     widened to f32 as it is packed (F16C or shifts) and the level's f32
//     register tile runs on it. Products of 16-bit values are exact in f32,
//     so this is the f32 GEMM of the widened operands up to summation order.
// C is f32 so that a product over several K blocks is rounded to 16 bits
// once. lda/ldb as in gemm_f32, in elements. With `out`, each tile of C is
// also rounded into 16-bit outputs (HalfOut) as soon as its last K block is
// stored, in the thread that computed it, while it is in L1: autocast's
// Linear and matmul write their 16-bit results with no pass after the GEMM.
// C then serves as the f32 scratch.
void gemm_half(Half16 kind, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const float* bias, const HalfOut* out = nullptr);

// Which implementation gemm_half uses for `kind` at the CPU level in use:
// "avx512_bf16", "avx512", "avx2", "neon" (packed, f32 tiles fed by
// converting packers), or "widen" (the operands widened whole, then gemm_f32:
// the baseline level, which has no packed GEMM).
const char* gemm_half_backend(Half16 kind);

// snug's CPU thread count (OpenMP), the same for every level: core/cpu/threads.h.
using cpu_threads::get_num_threads;
using cpu_threads::set_num_threads;

// Which implementation gemm_f32 uses at the CPU level in use: "avx512",
// "avx2" or "neon" (snug's packed kernels), or "eigen" (the portable fallback).
const char* gemm_f32_backend();

}  // namespace snug::SNUG_CPU_LEVEL::kernels
