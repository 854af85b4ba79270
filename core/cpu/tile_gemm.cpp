// SPDX-License-Identifier: MIT
// tile_gemm_f32: see core/cpu/tile_gemm.h.
#include <snug/core/cpu/tile_gemm.h>

#include <algorithm>
#include <array>
#include <utility>

#if defined(__AVX512F__)
#include <snug/core/cpu/simd_avx512.h>
#elif defined(__AVX2__)
#include <snug/core/cpu/simd_avx2.h>
#endif

namespace snug::inline SNUG_CPU_LEVEL::kernels {

void transpose_f32(int64_t rows, int64_t cols, const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
#if defined(__AVX512F__)
  __m512 r[16];
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const int64_t ni = std::min<int64_t>(16, rows - i0);
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const int64_t nj = std::min<int64_t>(16, cols - j0);
      const __mmask16 mj = detail::head_mask(nj), mi = detail::head_mask(ni);
      for (int i = 0; i < 16; ++i)
        r[i] = i < ni ? _mm512_maskz_loadu_ps(mj, src + (i0 + i) * ld_src + j0) : _mm512_setzero_ps();
      detail::transpose16(r);
      for (int j = 0; j < nj; ++j) _mm512_mask_storeu_ps(dst + (j0 + j) * ld_dst + i0, mi, r[j]);
    }
  }
#else
  transpose_scalar(rows, cols, src, ld_src, dst, ld_dst);
#endif
}

void tile_gemm_f32_reference(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                             const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(A[r * a_row + k * a_col]) * double(B[k * ldb + c]);
      const float v = float(double(alpha) * s);
      C[r * ldc + c] = accumulate ? C[r * ldc + c] + v : v;
    }
}

namespace {

// C = alpha * A B (+ C), row by row: the inner loop runs over C's columns.
template <class T>
void loops(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb,
           bool accumulate, T* C, int64_t ldc) {
  for (int64_t r = 0; r < M; ++r) {
    T* c = C + r * ldc;
    if (!accumulate) std::fill_n(c, N, T(0));
    for (int64_t k = 0; k < K; ++k) {
      const T a = alpha * A[r * a_row + k * a_col];
      const T* b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

}  // namespace

void tile_gemm_f64(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t a_row, int64_t a_col,
                   const double* B, int64_t ldb, bool accumulate, double* C, int64_t ldc) {
  loops<double>(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}

#if defined(__AVX512F__)

namespace {

// The loops over a tile's rows and vectors must be unrolled: GCC keeps a
// __m512 array indexed by a loop variable in memory, and then stores every
// accumulator to the stack on every step of k (half the speed or less).
#if defined(__clang__)
#define SNUG_UNROLL _Pragma("unroll")
#else
#define SNUG_UNROLL _Pragma("GCC unroll 16")
#endif

// One RR x (16 NV) tile of C, whole K. The last of the NV vectors is masked
// with `last` (all ones when the tile's width is a multiple of 16), so B and C
// are never touched past column N.
template <int RR, int NV>
void tile(int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t ldb,
          bool accumulate, float* C, int64_t ldc, __mmask16 last) {
  __m512 acc[RR][NV];
  SNUG_UNROLL
  for (int r = 0; r < RR; ++r) SNUG_UNROLL
  for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
    SNUG_UNROLL
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
    const float* a = A + k * a_col;
    SNUG_UNROLL
    for (int r = 0; r < RR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * a_row]);
      SNUG_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  SNUG_UNROLL
  for (int r = 0; r < RR; ++r) SNUG_UNROLL
  for (int v = 0; v < NV; ++v) {
    float* c = C + r * ldc + 16 * v;
    const __mmask16 m = v == NV - 1 ? last : __mmask16(0xffff);
    __m512 x = _mm512_mul_ps(al, acc[r][v]);
    if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), x);
    _mm512_mask_storeu_ps(c, m, x);
  }
}

using TileFn = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, bool, float*, int64_t,
                        __mmask16);

template <int NV, int... R>
constexpr auto row_table(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&tile<R + 1, NV>...};
}

// kTiles[NV - 1][RR - 1]
constexpr std::array<std::array<TileFn, 8>, 4> kTiles = {
    row_table<1>(std::make_integer_sequence<int, 8>{}), row_table<2>(std::make_integer_sequence<int, 8>{}),
    row_table<3>(std::make_integer_sequence<int, 8>{}), row_table<4>(std::make_integer_sequence<int, 8>{})};

}  // namespace

void tile_gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  for (int64_t c0 = 0; c0 < N; c0 += 64) {
    const int64_t cols = std::min<int64_t>(64, N - c0);
    const int nv = int((cols + 15) / 16);
    const __mmask16 last = cols % 16 ? __mmask16((1u << (cols % 16)) - 1) : __mmask16(0xffff);
    // Up to 16 accumulators: 8 rows of a 32-wide tile (the head-size case),
    // 4 rows of a 48- or 64-wide one. Each step of k then issues at most 12
    // loads (B's vectors plus A's broadcasts) for 16 FMAs.
    const int64_t rows = nv <= 2 ? 8 : 4;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t rr = std::min(rows, M - r0);
      kTiles[nv - 1][rr - 1](K, alpha, A + r0 * a_row, a_row, a_col, B + c0, ldb, accumulate, C + r0 * ldc + c0, ldc,
                             last);
    }
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

namespace {

#define SNUG_UNROLL _Pragma("GCC unroll 16")

// The AVX2 twin of the AVX-512 tiles above: one RR x (8 NV) tile of C, whole
// K, 8-float vectors; the last vector has `tail` (1 to 8) lanes, the rest
// masked (vmaskmovps), so B and C are never touched past column N. Masked
// only when it is partial (Masked): on Zen 4 the 12 masked stores of a 3 x 32
// tile were a fifth of its time in W-GPT's attention (`perf annotate`).
template <int RR, int NV, bool Masked>
void tile_of(int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t ldb,
             bool accumulate, float* C, int64_t ldc, int tail) {
  const __m256i last = detail::head_mask8(tail);
  const auto load = [&](const float* p, bool edge) {
    return Masked && edge ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
  };
  __m256 acc[RR][NV];
  SNUG_UNROLL
  for (int r = 0; r < RR; ++r) SNUG_UNROLL
  for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m256 bv[NV];
    SNUG_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = load(b + 8 * v, v == NV - 1);
    const float* a = A + k * a_col;
    SNUG_UNROLL
    for (int r = 0; r < RR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * a_row);
      SNUG_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha);
  SNUG_UNROLL
  for (int r = 0; r < RR; ++r) SNUG_UNROLL
  for (int v = 0; v < NV; ++v) {
    float* c = C + r * ldc + 8 * v;
    const bool edge = v == NV - 1;
    __m256 x = _mm256_mul_ps(al, acc[r][v]);
    if (accumulate) x = _mm256_add_ps(load(c, edge), x);
    if (Masked && edge)
      _mm256_maskstore_ps(c, last, x);
    else
      _mm256_storeu_ps(c, x);
  }
}

template <int RR, int NV>
void tile(int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t ldb,
          bool accumulate, float* C, int64_t ldc, int tail) {
  if (tail == 8)
    tile_of<RR, NV, false>(K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc, tail);
  else
    tile_of<RR, NV, true>(K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc, tail);
}

using TileFn = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, bool, float*, int64_t,
                        int);

template <int NV, int... R>
constexpr auto row_table(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&tile<R + 1, NV>...};
}

// kTiles[NV - 1][RR - 1]
constexpr std::array<std::array<TileFn, 6>, 4> kTiles = {
    row_table<1>(std::make_integer_sequence<int, 6>{}), row_table<2>(std::make_integer_sequence<int, 6>{}),
    row_table<3>(std::make_integer_sequence<int, 6>{}), row_table<4>(std::make_integer_sequence<int, 6>{})};

}  // namespace

void tile_gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  for (int64_t c0 = 0; c0 < N; c0 += 32) {
    const int64_t cols = std::min<int64_t>(32, N - c0);
    const int nv = int((cols + 7) / 8), tail = int(cols % 8);
    // Up to 12 accumulators of 16 ymm: 6 rows of a 16-wide tile, 3 rows of a
    // 24- or 32-wide one.
    const int64_t rows = nv <= 2 ? 6 : 3;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t rr = std::min(rows, M - r0);
      kTiles[nv - 1][rr - 1](K, alpha, A + r0 * a_row, a_row, a_col, B + c0, ldb, accumulate, C + r0 * ldc + c0, ldc,
                             tail ? tail : 8);
    }
  }
}

#else  // neither AVX-512 nor AVX2: the plain loops (their inner loop over columns vectorizes)

void tile_gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  loops<float>(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}

#endif

}  // namespace snug::SNUG_CPU_LEVEL::kernels
