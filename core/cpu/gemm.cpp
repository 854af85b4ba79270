// SPDX-License-Identifier: MIT
// Entry points of core/cpu/gemm.h: argument handling, threading policy, the
// reference loop; Eigen (core/cpu/gemm_eigen.cpp) for float64 and where the
// level has no packed float32 kernel. The fast float32 kernel itself is in
// core/cpu/gemm_avx512.cpp (see NOTE [ GEMM blocking ] there).
#include <snug/core/cpu/gemm.h>


#include <omp.h>

#include <snug/base/error.h>
#include <snug/core/cpu/gemm_detail.h>
#include <snug/core/cpu/gemm_eigen.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels {

namespace detail {

// Below this many multiply-adds a GEMM runs on one thread: waking the team
// costs a few microseconds, about what 2^18 MACs take on one core.
constexpr int64_t kParallelMacs = int64_t(1) << 18;

void check_gemm_args(const char* op, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb,
                     int64_t ldc) {
  SNUG_CHECK(M >= 0 && N >= 0 && K >= 0, ValueError, op, ": negative size (M=", M, ", N=", N, ", K=", K, ")");
  const int64_t a_cols = ta ? M : K, b_cols = tb ? K : N;
  SNUG_CHECK(lda >= std::max<int64_t>(1, a_cols), ValueError, op, ": lda=", lda, " is smaller than the ", a_cols,
             " columns of A as stored (trans_a=", ta, ")");
  SNUG_CHECK(ldb >= std::max<int64_t>(1, b_cols), ValueError, op, ": ldb=", ldb, " is smaller than the ", b_cols,
             " columns of B as stored (trans_b=", tb, ")");
  SNUG_CHECK(ldc >= std::max<int64_t>(1, N), ValueError, op, ": ldc=", ldc, " is smaller than the N=", N,
             " columns of C");
}

int gemm_threads(int64_t M, int64_t N, int64_t K) {
  if (omp_in_parallel()) return 1;  // already inside someone's team: stay serial
  if (M * N * K < kParallelMacs) return 1;
  return get_num_threads();
}

}  // namespace detail

namespace {

using detail::check_gemm_args;
using detail::gemm_threads;
using detail::kParallelMacs;

// C = beta * C, without reading C when beta == 0 (BLAS semantics).
template <class T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0))
      for (int64_t j = 0; j < N; ++j) c[j] = T(0);
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
}

template <class T>
void reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      double r = double(alpha) * s;
      if (beta != T(0)) r += double(beta) * C[i * ldc + j];
      C[i * ldc + j] = T(r);
    }
}

// gemm_f32 with an explicit thread count (1 inside the batched loop).
void gemm_f32_nt(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nt) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_c(M, N, beta, C, ldc);
  if (detail::gemm_f32_packed_available())
    detail::gemm_f32_packed(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nt);
  else
    eigen_gemm::gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

const char* gemm_f32_backend() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#elif defined(__aarch64__) && defined(__ARM_NEON)
  return "neon";
#else
  return "eigen";
#endif
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_gemm_args("gemm_f32", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  gemm_f32_nt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, gemm_threads(M, N, K));
}

void gemm_f32_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias) {
  check_gemm_args("gemm_f32_bias", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (bias && K > 0 && alpha != 0.0f && detail::gemm_f32_packed_available()) {
    detail::gemm_f32_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, gemm_threads(M, N, K), bias);
    return;
  }
  gemm_f32_nt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, gemm_threads(M, N, K));
  if (bias)  // Eigen fallback, K == 0 or alpha == 0: a second pass
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += bias[j];
}

void gemm_f32_bias_act(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias, GemmAct act,
                       float* pre) {
  check_gemm_args("gemm_f32_bias_act", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K > 0 && alpha != 0.0f && detail::gemm_f32_packed_available()) {
    detail::gemm_f32_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, gemm_threads(M, N, K), bias,
                            nullptr, act, pre);
    return;
  }
  // Eigen fallback, K == 0 or alpha == 0: the activation in a second pass.
  gemm_f32_bias(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias);
  detail::apply_act(act, M, N, C, pre, ldc);
}

void gemm_f32_act_grad(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, GemmAct act, const float* z) {
  SNUG_CHECK(act == GemmAct::relu || act == GemmAct::gelu || act == GemmAct::gelu_tanh, ValueError,
             "gemm_f32_act_grad: act must be relu, gelu or gelu_tanh");
  SNUG_CHECK(z != nullptr || M == 0 || N == 0, ValueError, "gemm_f32_act_grad: z is null");
  // The _grad activations only read `pre` (detail::apply_act).
  gemm_f32_bias_act(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, nullptr, grad_of(act),
                    const_cast<float*>(z));
}

void gemm_f32_a_sums(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* a_sums) {
  check_gemm_args("gemm_f32_a_sums", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  SNUG_CHECK(a_sums != nullptr || M == 0, ValueError, "gemm_f32_a_sums: a_sums is null");
  if (M == 0) return;
  if (N > 0 && K > 0 && alpha != 0.0f && detail::gemm_f32_packed_available()) {
    detail::gemm_f32_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, gemm_threads(M, N, K),
                            nullptr, a_sums);
    return;
  }
  // Eigen fallback or an empty product: the sums in their own pass, k upward.
  gemm_f32_nt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, gemm_threads(M, N, K));
  for (int64_t i = 0; i < M; ++i) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += trans_a ? A[k * lda + i] : A[i * lda + k];
    a_sums[i] = float(s);
  }
}

void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  check_gemm_args("gemm_f64", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0) return scale_c(M, N, beta, C, ldc);
  eigen_gemm::gemm_f64(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f32_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                      float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  check_gemm_args("gemm_f32_batched", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  SNUG_CHECK(batch >= 0, ValueError, "gemm_f32_batched: negative batch ", batch);
  if (batch == 0 || M == 0 || N == 0) return;
  const int nt = omp_in_parallel() ? 1 : get_num_threads();
  // One whole matrix per thread when the batch divides well or the matrices
  // are too small to split; otherwise split each matrix across the team.
  const bool across = nt > 1 && batch >= nt && (batch % nt == 0 || batch >= 4 * nt || M * N * K < kParallelMacs);
  if (across) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      gemm_f32_nt(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
                  C + b * stride_c, ldc, 1);
  } else {
    const int per = M * N * K < kParallelMacs ? 1 : nt;
    for (int64_t b = 0; b < batch; ++b)
      gemm_f32_nt(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
                  C + b * stride_c, ldc, per);
  }
}

void gemm_f64_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                      int64_t lda, int64_t stride_a, const double* B, int64_t ldb, int64_t stride_b, double beta,
                      double* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  check_gemm_args("gemm_f64_batched", M, N, K, trans_a, trans_b, lda, ldb, ldc);
  SNUG_CHECK(batch >= 0, ValueError, "gemm_f64_batched: negative batch ", batch);
  for (int64_t b = 0; b < batch; ++b)
    gemm_f64(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta, C + b * stride_c,
             ldc);
}

void gemm_f32_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  reference<float>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_f64_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                        int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  reference<double>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels
