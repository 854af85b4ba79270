// SPDX-License-Identifier: MIT
// Eigen's GEMM on the caller's row-major memory: the float64 GEMM (gradchecks)
// and the float32 GEMM of a level without a packed kernel of its own.
// Compiled once, for the baseline, outside the CPU levels (NOTE [ CPU levels ]
// in core/cpu/level.h): Eigen's templates have the same names in every copy,
// so compiling them per level would leave the linker to pick one of them.
#pragma once
#include <cstdint>

namespace snug::eigen_gemm {

// C = alpha * op(A) * op(B) + beta * C (the conventions of core/cpu/gemm.h).
// Preconditions: M, N, K > 0 and alpha != 0 (gemm.cpp handles the rest).
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// Eigen's own thread count (core/cpu/threads.cpp keeps it equal to snug's).
void set_threads(int n);

}  // namespace snug::eigen_gemm
