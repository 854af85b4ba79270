// SPDX-License-Identifier: MIT
// Internals shared by core/cpu/gemm.cpp and the packed GEMMs (gemm_avx512.cpp,
// gemm_avx2.cpp). Not public API.
#pragma once
#include <snug/core/cpu/level.h>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu/half_convert.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

// True when this level has a packed GEMM: core/cpu/gemm_avx512.cpp (AVX-512)
// core/cpu/gemm_avx2.cpp (AVX2 + FMA) or core/cpu/gemm_neon.cpp (aarch64);
// the x86 baseline falls back to Eigen.
bool gemm_f32_packed_available();

// Grow-only, 64-byte aligned scratch for the packed GEMMs' panels, one per
// thread (OpenMP reuses threads, so these live for the program). Packing
// scratch is not tensor memory, so it does not go through the caching allocator.
struct Scratch {
  float* p = nullptr;
  size_t n = 0;
  float* get(size_t floats) {
    if (floats > n) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64));
      if (!p) throw std::bad_alloc();
      n = floats;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};

// The packed, cache-blocked GEMM of this level. Preconditions (checked by gemm_f32):
// M, N, K > 0 and alpha != 0. Runs on up to `nthreads` OpenMP threads; with
// nthreads == 1 it opens no parallel region (safe inside one). A non-null
// bias (N floats) is added to every row of C with the first K block. A
// non-null a_sums (M floats) receives sum_k op(A)(i, k), taken from the packed
// A panels (gemm_f32_a_sums). An act other than none is applied to each row
// panel after its last K block, pre (when not null) receiving the values
// before it (gemm_f32_bias_act).
void gemm_f32_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                     const float* bias = nullptr, float* a_sums = nullptr, GemmAct act = GemmAct::none,
                     float* pre = nullptr);

// n contiguous 16-bit values of `kind` to float and back, with the level's
// bulk converters (core/cpu/half_convert.cpp).
inline void widen16(Half16 kind, const uint16_t* src, float* dst, int64_t n) {
  (kind == Half16::f16 ? half_to_float_array : bf16_to_float_array)(src, dst, n);
}
inline void narrow16(Half16 kind, const float* src, uint16_t* dst, int64_t n) {
  (kind == Half16::f16 ? float_to_half_array : float_to_bf16_array)(src, dst, n);
}

// The argument checks of every gemm_* entry (a snug::ValueError naming `op`
// and the bad size or leading dimension), and the thread count for an
// M x N x K product: 1 inside a parallel region or below 2^18 multiply-adds,
// else snug's thread count (core/cpu/gemm.cpp).
void check_gemm_args(const char* op, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb,
                     int64_t ldc);
int gemm_threads(int64_t M, int64_t N, int64_t K);

// gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h) through this level's
// f32 register tile, the operands widened to f32 as they are packed
// (core/cpu/gemm_half_pack.h); M, N, K > 0, alpha != 0. False, doing
// nothing, when the level has no packed f32 GEMM (the x86 baseline).
bool gemm_half_widened(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, const HalfOut* out);

// gemm_half's 16-bit store (HalfOut in core/cpu/gemm.h) of the m x n block of
// C at rows i0.., columns j0.. (c points at it, row stride ldc), rows at a
// time through a small f32 buffer (core/cpu/gemm_half.cpp).
void store_half_out(const HalfOut& o, Half16 kind, int64_t i0, int64_t j0, int64_t m, int64_t n, const float* c,
                    int64_t ldc);

// c[j] = act(c[j]) for j < n in each of `rows` rows (row stride ld), the
// values before it copied to pre's rows first when pre is not null. For the
// _grad values, c[j] = c[j] * act'(pre[j]) instead (pre read, not written).
void apply_act(GemmAct act, int64_t rows, int64_t n, float* c, float* pre, int64_t ld);

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail
