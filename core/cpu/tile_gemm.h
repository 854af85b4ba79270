// SPDX-License-Identifier: MIT
// A GEMM for the small tiles inside fused kernels (attention's 32-row blocks).
//
// gemm_f32 packs both operands into panels before it multiplies, which pays
// for itself from a few hundred rows and columns up; on attention's tiles (32
// query rows, 32 to 128 keys, head size 32) the packing and the 14x32 tile's
// edges cost as much as the products. tile_gemm_f32 packs nothing: it keeps an
// up-to 8 x 64 tile of C in registers, broadcasts one element of A per row and
// reads one row of B per step of k.
//
//   C[r, c] = alpha * sum_k A(r, k) * B[k * ldb + c]  (+ C[r, c] when accumulate)
//   A(r, k) = A[r * a_row + k * a_col]
//
// for r < M, c < N, k < K. A's two strides make A or A^T equally cheap (one
// scalar read per product row either way); B is row-major with unit column
// stride, so a product with B^T needs B transposed first (the callers
// transpose a head's K or V once and reuse it for every block). Single-threaded;
// results are the same on every call (a fixed summation order over k).
#pragma once
#include <snug/core/cpu/level.h>
#include <cstdint>
#include <type_traits>

namespace snug::inline SNUG_CPU_LEVEL::kernels {

void tile_gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);

// The same in double precision, as plain loops (the f64 attention path, which
// exists for gradient checks, not for speed).
void tile_gemm_f64(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t a_row, int64_t a_col,
                   const double* B, int64_t ldb, bool accumulate, double* C, int64_t ldc);

// The same sum as three plain loops (double accumulator); the tests' reference.
void tile_gemm_f32_reference(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                             const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);

// dst (cols x rows, row stride ld_dst) = src^T, src (rows x cols, row stride ld_src).
template <class T>
void transpose_scalar(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst, int64_t ld_dst) {
  // Blocks of 16 x 16 keep both sides' lines in L1 while they are read and written.
  constexpr int64_t kB = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += kB)
    for (int64_t j0 = 0; j0 < cols; j0 += kB)
      for (int64_t j = j0; j < (cols < j0 + kB ? cols : j0 + kB); ++j)
        for (int64_t i = i0; i < (rows < i0 + kB ? rows : i0 + kB); ++i) dst[j * ld_dst + i] = src[i * ld_src + j];
}

// The same for float, 16 x 16 blocks through AVX-512 registers
// (core/cpu/simd_avx512.h; transpose_scalar without AVX-512). The scalar loops
// make one strided load per float, and attention's K and V transposes (128 x
// 32 from rows 1,536 bytes apart) were a quarter of the fused backward's own
// time (`perf annotate`).
void transpose_f32(int64_t rows, int64_t cols, const float* src, int64_t ld_src, float* dst, int64_t ld_dst);

template <class T>
void transpose(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst, int64_t ld_dst) {
  if constexpr (std::is_same_v<T, float>)
    transpose_f32(rows, cols, src, ld_src, dst, ld_dst);
  else
    transpose_scalar(rows, cols, src, ld_src, dst, ld_dst);
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels
