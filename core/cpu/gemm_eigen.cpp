// SPDX-License-Identifier: MIT
#include <snug/core/cpu/gemm_eigen.h>

#include <Eigen/Core>

namespace snug::eigen_gemm {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  MutMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  ConstMap<T> a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
  ConstMap<T> b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
  auto run = [&](const auto& oa, const auto& ob) {
    if (beta == T(0)) {
      c.noalias() = alpha * (oa * ob);
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * (oa * ob);
    }
  };
  if (!ta && !tb)
    run(a, b);
  else if (ta && !tb)
    run(a.transpose(), b);
  else if (!ta && tb)
    run(a, b.transpose());
  else
    run(a.transpose(), b.transpose());
}

}  // namespace

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void set_threads(int n) { Eigen::setNbThreads(n); }

}  // namespace snug::eigen_gemm
