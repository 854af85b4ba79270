// SPDX-License-Identifier: MIT
// core/raw_int8.h: checks, then the CPU backend's int8 GEMM (core/cpu/gemm_int8.cpp).
#include <snug/core/raw_int8.h>

#include <snug/core/cpu/gemm_int8.h>
#include <snug/core/raw_ops.h>

namespace snug::raw {

namespace {
void check_cpu_2d(const char* op, const char* name, const Tensor& t, DType want) {
  SNUG_CHECK(t.defined(), ValueError, op, ": ", name, " is undefined");
  SNUG_CHECK(t.device().is_cpu(), DeviceError, op, ": ", name, " is on ", t.device().str(),
             "; the int8 GEMM runs on the CPU");
  SNUG_CHECK(t.dim() == 2, ShapeError, op, ": expected ", name, " (rows, K), got ", shape_str(t.shape()));
  SNUG_CHECK(t.dtype() == want, DTypeError, op, ": expected ", name, " in ", dtype_name(want), ", got ",
             dtype_name(t.dtype()));
}
// t as the kernels read it: rows of unit stride, lda = the row stride >= K.
Tensor rows_contiguous(const Tensor& t) {
  return t.stride(1) == 1 && t.stride(0) >= t.size(1) ? t : raw::contiguous(t);
}
}  // namespace

int64_t PackedInt8Weight::rows() const { return packed_ ? packed_->N : 0; }
int64_t PackedInt8Weight::cols() const { return packed_ ? packed_->K : 0; }
std::size_t PackedInt8Weight::nbytes() const { return packed_ ? packed_->nbytes() : 0; }

PackedInt8Weight pack_int8_weight(const Tensor& w) {
  check_cpu_2d("pack_int8_weight", "the weight", w, DType::i8);
  const Tensor wc = raw::contiguous(w);
  const int64_t N = wc.size(0), K = wc.size(1);
  PackedInt8Weight p;
  p.packed_ = std::make_shared<const PackedInt8B>(kernels::pack_int8_b(N, K, wc.data<int8_t>(), K));
  return p;
}

Tensor gemm_u8s8s32(const Tensor& a, const PackedInt8Weight& w) {
  check_cpu_2d("gemm_u8s8s32", "the input", a, DType::u8);
  SNUG_CHECK(w.defined(), ValueError, "gemm_u8s8s32: the packed weight is undefined");
  SNUG_CHECK(a.size(1) == w.cols(), ShapeError, "gemm_u8s8s32: input rows of length ", a.size(1),
             " but the weight expects ", w.cols());
  const Tensor ac = rows_contiguous(a);
  const int64_t M = ac.size(0), N = w.rows();
  Tensor c = empty({M, N}, TensorOptions(DType::i32, a.device()));
  kernels::gemm_u8s8s32_packed(M, ac.data<uint8_t>(), ac.stride(0), *w.packed_, c.data<int32_t>(), N);
  return c;
}

const char* int8_gemm_kernel() { return kernels::gemm_int8_backend(); }

}  // namespace snug::raw
