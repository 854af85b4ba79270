// SPDX-License-Identifier: MIT
// CPU batched matmul on snug's GEMM (core/cpu/gemm.h). Strided operands are
// passed as transposes where their layout allows, so views such as x.t()
// or k.transpose(-2, -1) never need a copy.
#include <algorithm>
#include <vector>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {
// How a (B, R, C) operand maps onto GEMM arguments.
struct GemmOperand {
  Tensor t;  // possibly a contiguous copy
  bool trans = false;
  int64_t ld = 0, batch_stride = 0;
};

GemmOperand as_gemm_operand(const Tensor& x) {
  // x is (B, R, C)
  int64_t R = x.size(1), C = x.size(2);
  const Strides& s = x.strides();
  if ((s[2] == 1 || C == 1) && s[1] >= std::max<int64_t>(C, 1)) return {x, false, s[1], s[0]};
  if ((s[1] == 1 || R == 1) && s[2] >= std::max<int64_t>(R, 1)) return {x, true, s[2], s[0]};
  Tensor c = raw::contiguous(x);
  return {c, false, std::max<int64_t>(C, 1), R * C};
}
// NOTE [ Half-precision matmul ]
// f16/bf16 operands are stored in half precision and multiplied by the f32
// GEMM (accumulation in f32, one rounding of each result). b is widened once
// (for a Linear it is the weight); the result is produced a block of rows at
// a time and rounded back, and a is widened per block too when its rows are
// contiguous, so the f32 copies stay near 1 MiB plus b's: a full-size f32
// output would cost twice the half output it produces. The f32 copies are
// scratch, tagged workspace. An operand is widened in its own layout (a
// transposed view stays transposed and goes to the GEMM as a transpose), so
// every conversion runs on contiguous rows with the bulk AVX-512 converters
// (core/cpu/half_convert.cpp, through copy()).
//
// widen(x): x (B, R, C) half -> f32 copy; trans says the copy holds x^T.
GemmOperand widen(const Tensor& x) {
  const int64_t R = x.size(1), C = x.size(2);
  const Strides& s = x.strides();
  const bool transposed = s[2] != 1 && C > 1 && (s[1] == 1 || R == 1);
  if (!transposed) return as_gemm_operand(raw::contiguous(raw::to_dtype(x, DType::f32)));
  Tensor t = raw::to_dtype(raw::transpose(x, 1, 2), DType::f32);  // (B, C, R) contiguous
  return {t, true, std::max<int64_t>(R, 1), R * C};
}

void matmul_half(const Tensor& a, const Tensor& b, const Tensor& out) {
  // a (B,M,K), b (B,K,N) -> out (B,M,N) contiguous, all f16 or all bf16
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  memory::TagScope tag(memory::Tag::workspace);
  const TensorOptions f32(DType::f32, out.device());
  const GemmOperand Bm = widen(b);
  const float* bp = static_cast<const float*>(Bm.t.data_ptr());
  const int64_t rows = std::min<int64_t>(M, std::max<int64_t>(64, (int64_t(1) << 18) / std::max<int64_t>(N, 1)));
  // a with contiguous rows is widened block by block; otherwise whole, in its layout.
  const bool a_rows = a.stride(2) == 1 || K == 1;
  GemmOperand Am;
  if (!a_rows) Am = widen(a);
  Tensor a32 = a_rows ? empty({rows, K}, f32) : Tensor(), c32 = empty({rows, N}, f32);
  Tensor out2 = raw::view(out, {B * M, N});
  for (int64_t i = 0; i < B; ++i) {
    Tensor ai = a_rows ? raw::select(a, 0, i) : Tensor();  // (M, K)
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
      const int64_t r = std::min(rows, M - m0);
      Tensor cb = r == rows ? c32 : raw::slice(c32, 0, 0, r, 1);
      const float* ap;
      int64_t lda;
      if (a_rows) {
        Tensor ab = r == rows ? a32 : raw::slice(a32, 0, 0, r, 1);
        CpuBackend().copy(raw::slice(ai, 0, m0, m0 + r, 1), ab);
        ap = static_cast<const float*>(ab.data_ptr());
        lda = K;
      } else {
        // rows m0.. of op(A): columns m0.. of the stored transpose, or rows m0.. of a copy
        const float* base = static_cast<const float*>(Am.t.data_ptr()) + i * Am.batch_stride;
        ap = Am.trans ? base + m0 : base + m0 * Am.ld;
        lda = Am.ld;
      }
      kernels::gemm_f32(!a_rows && Am.trans, Bm.trans, r, N, K, 1.0f, ap, lda, bp + i * Bm.batch_stride, Bm.ld, 0.0f,
                        static_cast<float*>(cb.data_ptr()), N);
      CpuBackend().copy(cb, raw::slice(out2, 0, i * M + m0, i * M + m0 + r, 1));
    }
  }
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  // a (B,M,K), b (B,K,N) -> out (B,M,N) contiguous
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (out.numel() == 0) return;
  if (K == 0) {
    fill(out, 0);
    return;
  }
  auto run = [&](const Tensor& a32, const Tensor& b32, const Tensor& o32) {
    GemmOperand A = as_gemm_operand(a32), Bm = as_gemm_operand(b32);
    if (o32.dtype() == DType::f64) {
      kernels::gemm_f64_batched(A.trans, Bm.trans, M, N, K, 1.0, static_cast<const double*>(A.t.data_ptr()), A.ld,
                                A.batch_stride, static_cast<const double*>(Bm.t.data_ptr()), Bm.ld, Bm.batch_stride,
                                0.0, static_cast<double*>(o32.data_ptr()), N, M * N, B);
    } else {
      kernels::gemm_f32_batched(A.trans, Bm.trans, M, N, K, 1.0f, static_cast<const float*>(A.t.data_ptr()), A.ld,
                                A.batch_stride, static_cast<const float*>(Bm.t.data_ptr()), Bm.ld, Bm.batch_stride,
                                0.0f, static_cast<float*>(o32.data_ptr()), N, M * N, B);
    }
  };
  switch (out.dtype()) {
    case DType::f32:
    case DType::f64:
      run(a, b, out);
      break;
    case DType::f16:
    case DType::bf16:
      matmul_half(a, b, out);
      break;
    default:
      throw DTypeError(str("matmul: expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(out.dtype())));
  }
}

}  // namespace snug::SNUG_CPU_LEVEL
