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
// f16/bf16 operands are stored in half precision and multiplied by
// kernels::gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h), which reads
// them where they lie, converting as it packs its panels, and accumulates in
// f32. It runs a block of rows at a time over an f32 scratch of about 1 MiB
// (tagged workspace) and rounds each tile once into the 16-bit output as it
// finishes: a full-size f32 result would cost twice the output it produces.
void matmul_half(const Tensor& a, const Tensor& b, const Tensor& out) {
  // a (B,M,K), b (B,K,N) -> out (B,M,N) contiguous, all f16 or all bf16
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const Half16 kind = out.dtype() == DType::f16 ? Half16::f16 : Half16::bf16;
  memory::TagScope tag(memory::Tag::workspace);
  const GemmOperand Am = as_gemm_operand(a), Bm = as_gemm_operand(b);
  const uint16_t* ap = static_cast<const uint16_t*>(Am.t.data_ptr());
  const uint16_t* bp = static_cast<const uint16_t*>(Bm.t.data_ptr());
  const int64_t rows = std::min<int64_t>(M, std::max<int64_t>(64, (int64_t(1) << 18) / std::max<int64_t>(N, 1)));
  Tensor c32 = empty({rows, N}, TensorOptions(DType::f32, out.device()));
  uint16_t* op = static_cast<uint16_t*>(out.data_ptr());  // (B*M, N) contiguous
  for (int64_t i = 0; i < B; ++i) {
    const uint16_t* base = ap + i * Am.batch_stride;
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
      const int64_t r = std::min(rows, M - m0);
      HalfOut store;
      store.out = op + (i * M + m0) * N;
      store.ldo = N;
      // rows m0.. of op(A): columns m0.. of a stored transpose, or rows m0..
      kernels::gemm_half(kind, Am.trans, Bm.trans, r, N, K, 1.0f, Am.trans ? base + m0 : base + m0 * Am.ld, Am.ld,
                         bp + i * Bm.batch_stride, Bm.ld, 0.0f, static_cast<float*>(c32.data_ptr()), N, nullptr,
                         &store);
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
