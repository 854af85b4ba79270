// CPU batched matmul on snug's GEMM (core/gemm.h). Strided operands are
// passed as transposes where their layout allows, so views such as x.t()
// or k.transpose(-2, -1) never need a copy.
#include <vector>

#include "core/cpu_backend.h"
#include "core/gemm.h"
#include "core/raw_ops.h"

namespace snug {

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
    case DType::bf16: {
      // Stored in half precision, computed (and accumulated) in f32.
      Tensor o32 = empty(out.shape(), TensorOptions(DType::f32, out.device()));
      run(raw::to_dtype(a, DType::f32), raw::to_dtype(b, DType::f32), o32);
      copy(o32, out);
      break;
    }
    default:
      throw DTypeError(str("matmul: expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(out.dtype())));
  }
}

}  // namespace snug
