// SPDX-License-Identifier: MIT
// How a batched row-major matmul maps onto a column-major cuBLAS call. Plain
// C++ (no CUDA header) so tests/test_cuda_host.cpp checks the mapping on the
// CPU against a reference column-major GEMM.
//
// NOTE [ Row-major matmul through cuBLAS ]
// out (B,M,N) row-major is, read column-major, out^T (N,M). Since
// out^T = b^T a^T, cuBLAS computes C = op(A') op(B') with m = N, n = M, k = K,
// A' = b's memory and B' = a's memory. A (R,C) operand stored row-major with
// row stride ld (stride (ld, 1)) is, column-major, its transpose with leading
// dim ld: op N. Stored "transposed" (stride (1, ld), e.g. x.t()) it is,
// column-major, itself: op T. Anything else (both strides > 1) must be made
// contiguous first. The batch stride may be 0 (a broadcast operand).
#pragma once
#include <algorithm>
#include <cstdint>

namespace snug::cuda {

struct GemmOperandPlan {
  bool ok = false;     // false: copy to contiguous first, then plan again
  bool trans = false;  // cuBLAS op T for this operand
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// x is (B, R, C) with strides s[3] (elements).
inline GemmOperandPlan plan_gemm_operand(const int64_t* shape, const int64_t* s) {
  const int64_t R = shape[1], C = shape[2];
  GemmOperandPlan p;
  p.batch_stride = shape[0] == 1 ? 0 : s[0];
  // Row-major rows: column-major needs ld >= C (the stored matrix has C rows).
  if ((s[2] == 1 || C == 1) && (R == 1 || s[1] >= std::max<int64_t>(C, 1))) {
    p.ok = true;
    p.trans = false;
    p.ld = std::max<int64_t>(R == 1 ? C : s[1], 1);
    return p;
  }
  if ((s[1] == 1 || R == 1) && (C == 1 || s[2] >= std::max<int64_t>(R, 1))) {
    p.ok = true;
    p.trans = true;
    p.ld = std::max<int64_t>(C == 1 ? R : s[2], 1);
    return p;
  }
  return p;
}

struct GemmPlan {
  // The cuBLAS call: C (m,n) col-major = op(A') (m,k) op(B') (k,n).
  bool trans_a = false, trans_b = false;  // ops on A' (= b) and B' (= a)
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t batch = 0;
};

// a (B,M,K), b (B,K,N), out (B,M,N) contiguous; both operands planned ok.
inline GemmPlan plan_gemm(int64_t B, int64_t M, int64_t N, int64_t K, const GemmOperandPlan& a,
                          const GemmOperandPlan& b) {
  GemmPlan g;
  g.trans_a = b.trans;
  g.trans_b = a.trans;
  g.m = N;
  g.n = M;
  g.k = K;
  g.lda = b.ld;
  g.ldb = a.ld;
  g.ldc = std::max<int64_t>(N, 1);
  g.stride_a = b.batch_stride;
  g.stride_b = a.batch_stride;
  g.stride_c = M * N;
  g.batch = B;
  return g;
}

// Reference column-major strided-batched GEMM with cuBLAS semantics (beta 0),
// for tests: C = op(A) op(B).
template <class T, class Acc = double>
void reference_gemm(const GemmPlan& g, const T* A, const T* Bm, T* C) {
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) {
        Acc acc = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const T av = g.trans_a ? A[b * g.stride_a + p + i * g.lda] : A[b * g.stride_a + i + p * g.lda];
          const T bv = g.trans_b ? Bm[b * g.stride_b + j + p * g.ldb] : Bm[b * g.stride_b + p + j * g.ldb];
          acc += Acc(av) * Acc(bv);
        }
        C[b * g.stride_c + i + j * g.ldc] = T(acc);
      }
}

}  // namespace snug::cuda
