// SPDX-License-Identifier: MIT
// gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h): the entry point, and
// at the AVX-512 level its two register tiles in the blocked driver of
// core/cpu/gemm_blocked.h:
//   Bf16DotTile: 14 x 32, bf16 pairs multiplied by vdpbf16ps (AVX512-BF16,
//     checked at run time; a function-level target, as the VNNI int8 kernel);
//   Avx512Tile: 14 x 32 f32 FMAs on panels widened as they are packed
//     (vcvtph2ps for f16; bf16 without AVX512-BF16 by a shift).
// The AVX2 and NEON levels supply their widening path beside their f32
// tiles (gemm_avx2.cpp, gemm_neon.cpp); the baseline widens whole operands.
#include <snug/core/cpu/gemm_detail.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#if defined(__AVX512F__)
#include <cpuid.h>
#include <immintrin.h>

#include <snug/core/cpu/gemm_blocked.h>
#include <snug/core/cpu/half_simd_avx512.h>
#include <snug/core/cpu/simd_avx512.h>
#endif

namespace snug::inline SNUG_CPU_LEVEL::kernels {

namespace detail {

#if defined(__AVX512F__)

namespace {

// C[0:m, 0:n] = alpha * acc + beta * C (+ bias), the 14 x 32 accumulators of
// either tile; n <= 32 masks the columns, rows past m are dropped.
__attribute__((always_inline)) inline void store_tile(const __m512 (&acc)[14][2], int m, int n, float* c, int64_t ldc,
                                                      float alpha, float beta, const float* bias) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 mk[2] = {head_mask(n), head_mask(n > 16 ? n - 16 : 0)};
  __m512 bv[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  if (bias)
    for (int v = 0; v < 2; ++v) bv[v] = _mm512_maskz_loadu_ps(mk[v], bias + 16 * v);
  for (int i = 0; i < m; ++i)
    for (int v = 0; v < 2; ++v) {
      float* p = c + i * ldc + 16 * v;
      __m512 r = _mm512_mul_ps(va, acc[i][v]);
      if (beta == 1.0f)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mk[v], p));
      else if (beta != 0.0f)
        r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[v], p), r);
      if (bias) r = _mm512_add_ps(r, bv[v]);
      _mm512_mask_storeu_ps(p, mk[v], r);
    }
}

// Blocks of both tiles: a B panel (32 KiB: 256 k x 32 floats for the f32
// tile, 256 bf16 pairs x 32 for the bf16 tile at KC 512) is reused by the
// MC / 14 A panels of the block, which stream from L2.
struct Avx512Tile {
  static constexpr int MR = 14, NR = 32, KU = 1;
  static constexpr int64_t KC = 256, MC = 8 * MR, NC = 512;

  // kc steps of one float of A per row and 32 of B per k.
  static void run(int64_t kc, const float* __restrict a, const float* __restrict b, int m, int n, float* c,
                  int64_t ldc, float alpha, float beta, const float* bias) {
    __m512 acc[14][2];
#pragma GCC unroll 14
    for (int i = 0; i < 14; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
      for (int i = 0; i < 14; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i]);
        acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      }
      a += MR;
      b += NR;
    }
    store_tile(acc, m, n, c, ldc, alpha, beta, bias);
  }
};

// NOTE [ bf16 pairs ]
// vdpbf16ps adds, in each f32 lane, a0 * b0 + a1 * b1 of the lane's two bf16
// halves. So a packed step holds two consecutive k: the A panel is
// a[s * 14 + i] = (op(A)(i, 2s), op(A)(i, 2s + 1)) in one 32-bit unit, which
// the kernel broadcasts, and the B panel b[s * 32 + j] = (op(B)(2s, j),
// op(B)(2s + 1, j)), the low half the even k. An odd depth pads the last pair
// with 0. One instruction does 32 multiply-adds of a row against 16 columns
// where an f32 FMA does 16; the accumulation stays in f32.
struct Bf16DotTile {
  static constexpr int MR = 14, NR = 32, KU = 2;
  static constexpr int64_t KC = 512, MC = 8 * MR, NC = 512;

  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void run(
      int64_t kp, const float* __restrict a, const float* __restrict b, int m, int n, float* c, int64_t ldc,
      float alpha, float beta, const float* bias) {
    __m512 acc[14][2];
#pragma GCC unroll 14
    for (int i = 0; i < 14; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t s = 0; s < kp; ++s) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 14
      for (int i = 0; i < 14; ++i) {
        const __m512bh ai = (__m512bh)_mm512_castps_si512(_mm512_set1_ps(a[i]));  // one pair, as 32 bits
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
      }
      a += MR;
      b += NR;
    }
    store_tile(acc, m, n, c, ldc, alpha, beta, bias);
  }
};

// Pairs along k from `rows` (<= 16) rows of 16-bit values contiguous in k (a
// row-major A, a transposed B): dst[s * stride + r] = (src[r * ld + 2s],
// src[r * ld + 2s + 1]) for s < ceil(kc / 2), rows >= `rows` zero. A pair is
// 32 bits, so 16 rows x 16 pairs go through transpose16 as floats (shuffles
// only: the bits are untouched). Each s stores 16 units: dst needs 16 units
// of slack past the last s, and later s overwrite the spill of earlier ones.
void pack_pairs_from_rows(const uint16_t* src, int64_t ld, int rows, int64_t kc, float* dst, int64_t stride) {
  const int64_t np = (kc + 1) / 2;
  __m512 r[16];
  for (int64_t s0 = 0; s0 < np; s0 += 16) {
    const int64_t w = std::min<int64_t>(16, np - s0), e = std::min<int64_t>(32, kc - 2 * s0);  // pairs, halves
    const __mmask32 m = e >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << e) - 1u);
    for (int i = 0; i < 16; ++i)
      r[i] = i < rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, src + i * ld + 2 * s0)) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t c = 0; c < w; ++c) _mm512_storeu_ps(dst + (s0 + c) * stride, r[c]);
  }
}

// Pairs along k from rows that run along k (a transposed A, a row-major B):
// dst[s * width + j] = (src[2s * ld + j], src[(2s + 1) * ld + j]) for j < cols
// (<= width, a multiple of 16 or 14), 0 for cols <= j < width.
void pack_pairs_interleave(const uint16_t* src, int64_t ld, int cols, int width, int64_t kc, float* dst) {
  for (int64_t s = 0; s < (kc + 1) / 2; ++s) {
    const uint16_t* lo = src + 2 * s * ld;
    const bool has_hi = 2 * s + 1 < kc;
    for (int j0 = 0; j0 < width; j0 += 16) {
      const int w = std::min(16, width - j0), v = std::max(0, std::min(16, cols - j0));
      const __mmask16 mv = head_mask(v);
      const __m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mv, lo + j0));
      const __m512i h =
          has_hi ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mv, lo + ld + j0)) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(dst + s * width + j0, head_mask(w), _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
    }
  }
}

// 16 values of 16-bit storage (masked: 0 past the mask) widened to floats:
// vcvtph2ps for f16 (exact, as core/half.h), a 16-bit shift for bf16.
template <Half16 kind>
__m512 load_widened(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return kind == Half16::f16 ? simd16::widen_f16(h) : simd16::widen_bf16(h);
}
template <Half16 kind>
__m256i narrowed(__m512 f) {
  return kind == Half16::f16 ? simd16::narrow_f16(f) : simd16::narrow_bf16(f);
}

// store_half_out in registers for a block of the AVX-512 tiles (n <= 1024
// columns): each row rounded to 16 bits (and into pre) and widened back into
// a row buffer, the activation or derivative applied to the whole row in one
// apply_act, and the row rounded into out.
template <Half16 kind>
void store_half_block(const HalfOut& o, int64_t i0, int64_t j0, int m, int n, const float* c, int64_t ldc) {
  constexpr int kMaxCols = 1024;
  if (n > kMaxCols) {  // wider than any block of these tiles (NC 512); kept general
    for (int c0 = 0; c0 < n; c0 += kMaxCols)
      store_half_block<kind>(o, i0, j0 + c0, m, std::min(kMaxCols, n - c0), c + c0, ldc);
    return;
  }
  const bool grad = is_grad(o.act);
  const bool plain = o.act == GemmAct::none && !o.pre;
  alignas(64) float t[kMaxCols], zt[kMaxCols];
  for (int i = 0; i < m; ++i) {
    const float* ci = c + i * ldc;
    uint16_t* out = o.out + (i0 + i) * o.ldo + j0;
    for (int c0 = 0; c0 < n; c0 += 16) {
      const __mmask16 mk = head_mask(n - c0);
      const __m256i r = narrowed<kind>(_mm512_maskz_loadu_ps(mk, ci + c0));
      if (plain) {
        _mm256_mask_storeu_epi16(out + c0, mk, r);
        continue;
      }
      if (o.pre) _mm256_mask_storeu_epi16(o.pre + (i0 + i) * o.ldp + j0 + c0, mk, r);
      _mm512_store_ps(t + c0, kind == Half16::f16 ? simd16::widen_f16(r) : simd16::widen_bf16(r));
      if (grad) _mm512_store_ps(zt + c0, load_widened<kind>(o.z + (i0 + i) * o.ldz + j0 + c0, mk));
    }
    if (plain) continue;
    if (o.act != GemmAct::none) apply_act(o.act, 1, n, t, grad ? zt : nullptr, n);
    for (int c0 = 0; c0 < n; c0 += 16) _mm256_mask_storeu_epi16(out + c0, head_mask(n - c0), narrowed<kind>(_mm512_load_ps(t + c0)));
  }
}

// The widening twins of the pair packers, for Avx512Tile: from `rows` (<= 16)
// rows contiguous in k, dst[k * stride + r] = src[r * ld + k] as float,
// through transpose16 (stores spill as in pack_pairs_from_rows)...
template <Half16 kind>
void pack_widen_from_rows(const uint16_t* src, int64_t ld, int rows, int64_t kc, float* dst, int64_t stride) {
  __m512 r[16];
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t w = std::min<int64_t>(16, kc - k0);
    const __mmask16 m = head_mask(w);
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? load_widened<kind>(src + i * ld + k0, m) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t c = 0; c < w; ++c) _mm512_storeu_ps(dst + (k0 + c) * stride, r[c]);
  }
}

// ...and from rows that run along k: dst[k * width + j] = src[k * ld + j] as
// float for j < cols, 0 for cols <= j < width.
template <Half16 kind>
void pack_widen_rows(const uint16_t* src, int64_t ld, int cols, int width, int64_t kc, float* dst) {
  for (int64_t k = 0; k < kc; ++k)
    for (int j0 = 0; j0 < width; j0 += 16) {
      const int w = std::min(16, width - j0), v = std::max(0, std::min(16, cols - j0));
      _mm512_mask_storeu_ps(dst + k * width + j0, head_mask(w), load_widened<kind>(src + k * ld + j0, head_mask(v)));
    }
}

template <Half16 kind>
void gemm_half_avx512(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                      const float* bias, const HalfOut* out) {
  using T = Avx512Tile;
  gemm_blocked_with<T>(
      M, N, K, alpha, beta, C, ldc, nthreads, bias, out ? out->a_sums : nullptr,
      [&](int64_t pc, int64_t kc, int64_t i0, int64_t i_end, float* dst, double* row_sums) {
        const int m = int(std::min<int64_t>(T::MR, i_end - i0));
        if (!ta)
          pack_widen_from_rows<kind>(A + i0 * lda + pc, lda, m, kc, dst, T::MR);
        else
          pack_widen_rows<kind>(A + pc * lda + i0, lda, m, T::MR, kc, dst);
        if (row_sums) add_panel_sums<T::MR>(dst, kc, m, row_sums + i0);  // HalfOut::a_sums
      },
      [&](int64_t pc, int64_t kc, int64_t j0, int64_t j_end, float* dst) {
        const int n = int(std::min<int64_t>(T::NR, j_end - j0));
        if (tb) {
          for (int h = 0; h < 2; ++h)
            pack_widen_from_rows<kind>(B + (j0 + 16 * h) * ldb + pc, ldb, std::max(0, std::min(16, n - 16 * h)), kc,
                                       dst + 16 * h, T::NR);
        } else {
          pack_widen_rows<kind>(B + pc * ldb + j0, ldb, n, T::NR, kc, dst);
        }
      },
      [&](int64_t i0, int64_t j0, int m, int n, float* c) {
        if (out && out->out) store_half_block<kind>(*out, i0, j0, m, n, c, ldc);
      });
}

bool cpu_has_avx512bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    // SNUG_GEMM_BF16=0 sends bf16 through the widening path (tests run both).
    const char* e = std::getenv("SNUG_GEMM_BF16");
    return ((a >> 5) & 1u) != 0 && !(e && e[0] == '0');
  }();
  return has;
}

void gemm_bf16_dot(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads, const float* bias,
                   const HalfOut* out) {
  using T = Bf16DotTile;
  gemm_blocked_with<T>(
      M, N, K, alpha, beta, C, ldc, nthreads, bias, nullptr,
      [&](int64_t pc, int64_t kc, int64_t i0, int64_t i_end, float* dst, double*) {
        const int m = int(std::min<int64_t>(T::MR, i_end - i0));
        if (!ta)  // op(A)(i, k) = A[i * lda + k]
          pack_pairs_from_rows(A + i0 * lda + pc, lda, m, kc, dst, T::MR);
        else  // op(A)(i, k) = A[k * lda + i]
          pack_pairs_interleave(A + pc * lda + i0, lda, m, T::MR, kc, dst);
      },
      [&](int64_t pc, int64_t kc, int64_t j0, int64_t j_end, float* dst) {
        const int n = int(std::min<int64_t>(T::NR, j_end - j0));
        if (tb) {  // op(B)(k, j) = B[j * ldb + k]: two halves of 16 columns
          for (int h = 0; h < 2; ++h)
            pack_pairs_from_rows(B + (j0 + 16 * h) * ldb + pc, ldb, std::max(0, std::min(16, n - 16 * h)), kc,
                                 dst + 16 * h, T::NR);
        } else {  // op(B)(k, j) = B[k * ldb + j]
          pack_pairs_interleave(B + pc * ldb + j0, ldb, n, T::NR, kc, dst);
        }
      },
      [&](int64_t i0, int64_t j0, int m, int n, float* c) {
        if (out && out->out) store_half_block<Half16::bf16>(*out, i0, j0, m, n, c, ldc);
      });
}

}  // namespace

bool gemm_half_widened(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int nthreads,
                       const float* bias, const HalfOut* out) {
  (kind == Half16::f16 ? gemm_half_avx512<Half16::f16> : gemm_half_avx512<Half16::bf16>)(
      ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nthreads, bias, out);
  return true;
}

#elif !(defined(__AVX2__) && defined(__FMA__)) && !(defined(__aarch64__) && defined(__ARM_NEON))

// The baseline: no packed f32 GEMM (gemm_half widens whole operands).
bool gemm_half_widened(Half16, bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                       const uint16_t*, int64_t, float, float*, int64_t, int, const float*, const HalfOut*) {
  return false;
}

#endif

// Rows of up to 256 columns through `t`: round C into 16 bits and back
// (exact), then the forward activation or the derivative on those values, as
// the elementwise op on 16-bit storage computes it (core/cpu/loop.h widens
// its operands and rounds its result once), then the final rounding.
void store_half_out(const HalfOut& o, Half16 kind, int64_t i0, int64_t j0, int64_t m, int64_t n, const float* c,
                    int64_t ldc) {
  const bool grad = is_grad(o.act);
  alignas(64) float t[256], zt[256];
  alignas(64) uint16_t r[256];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c0 = 0; c0 < n; c0 += 256) {
      const int64_t w = std::min<int64_t>(256, n - c0);
      const int64_t row = i0 + i, col = j0 + c0;
      uint16_t* dst = o.out + row * o.ldo + col;
      if (o.act == GemmAct::none && !o.pre) {  // round(C)
        narrow16(kind, c + i * ldc + c0, dst, w);
        continue;
      }
      uint16_t* rounded = o.pre ? o.pre + row * o.ldp + col : r;
      narrow16(kind, c + i * ldc + c0, rounded, w);
      widen16(kind, rounded, t, w);
      if (grad) {
        widen16(kind, o.z + row * o.ldz + col, zt, w);
        apply_act(o.act, 1, w, t, zt, w);  // t *= act'(z)
      } else if (o.act != GemmAct::none) {
        apply_act(o.act, 1, w, t, nullptr, w);
      }
      narrow16(kind, t, dst, w);
    }
}

}  // namespace detail

namespace {

bool use_bf16_dot(Half16 kind) {
#if defined(__AVX512F__)
  return kind == Half16::bf16 && detail::cpu_has_avx512bf16();
#else
  (void)kind;
  return false;
#endif
}

// HalfOut::a_sums where the GEMM does not sum its packed panels (the bf16
// pairs of the dot-product tile, the baseline, K or alpha 0): the rows of
// op(A) (M x K) widened a piece at a time and summed k upward in f64, the
// order of the panel sums.
void row_sums16(Half16 kind, bool ta, const uint16_t* A, int64_t lda, int64_t M, int64_t K, float* a_sums) {
  std::vector<double> sums(size_t(M), 0.0);
  float t[256];
  if (!ta) {  // op(A)(i, k) = A[i * lda + k]
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k0 = 0; k0 < K; k0 += 256) {
        const int64_t w = std::min<int64_t>(256, K - k0);
        detail::widen16(kind, A + i * lda + k0, t, w);
        for (int64_t k = 0; k < w; ++k) sums[size_t(i)] += t[k];
      }
  } else {  // op(A)(i, k) = A[k * lda + i]
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i0 = 0; i0 < M; i0 += 256) {
        const int64_t w = std::min<int64_t>(256, M - i0);
        detail::widen16(kind, A + k * lda + i0, t, w);
        for (int64_t i = 0; i < w; ++i) sums[size_t(i0 + i)] += t[i];
      }
  }
  for (int64_t i = 0; i < M; ++i) a_sums[i] = float(sums[size_t(i)]);
}

// op(X) of a stored R x C 16-bit matrix (leading dimension ld) widened whole
// into a dense f32 copy of the same layout: the baseline's path.
std::vector<float> widen_whole(Half16 kind, const uint16_t* X, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    detail::widen16(kind, X + r * ld, out.data() + r * cols, cols);
  return out;
}

}  // namespace

const char* gemm_half_backend(Half16 kind) {
  if (use_bf16_dot(kind)) return "avx512_bf16";
  const char* f = gemm_f32_backend();
  return std::string_view(f) == "eigen" ? "widen" : f;
}

void gemm_half(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
               const HalfOut* out) {
  detail::check_gemm_args("gemm_half", M, N, K, ta, tb, lda, ldb, ldc);
  if (M == 0 || N == 0) {
    if (M > 0 && out && out->a_sums) row_sums16(kind, ta, A, lda, M, K, out->a_sums);
    return;
  }
  const bool store = out && out->out;
  if (K == 0 || alpha == 0.0f) {  // C = beta * C + bias; B is not read
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& c = C[i * ldc + j];
        c = (beta == 0.0f ? 0.0f : beta * c) + (bias ? bias[j] : 0.0f);
      }
    if (store) detail::store_half_out(*out, kind, 0, 0, M, N, C, ldc);
    if (out && out->a_sums) row_sums16(kind, ta, A, lda, M, K, out->a_sums);
    return;
  }
  const int nt = detail::gemm_threads(M, N, K);
#if defined(__AVX512F__)
  if (use_bf16_dot(kind)) {
    if (out && out->a_sums) row_sums16(kind, ta, A, lda, M, K, out->a_sums);  // its panels hold bf16 pairs
    return detail::gemm_bf16_dot(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nt, bias, out);
  }
#endif
  if (detail::gemm_half_widened(kind, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nt, bias, out)) return;
  if (out && out->a_sums) row_sums16(kind, ta, A, lda, M, K, out->a_sums);
  // The baseline: both operands widened whole, in their stored layouts.
  const std::vector<float> a = widen_whole(kind, A, ta ? K : M, ta ? M : K, lda);
  const std::vector<float> b = widen_whole(kind, B, tb ? N : K, tb ? K : N, ldb);
  if (bias) {
    std::vector<float> t(size_t(M * N));
    gemm_f32(ta, tb, M, N, K, alpha, a.data(), ta ? M : K, b.data(), tb ? K : N, 0.0f, t.data(), N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& c = C[i * ldc + j];
        c = (beta == 0.0f ? 0.0f : beta * c) + t[i * N + j] + bias[j];
      }
  } else {
    gemm_f32(ta, tb, M, N, K, alpha, a.data(), ta ? M : K, b.data(), tb ? K : N, beta, C, ldc);
  }
  if (store) detail::store_half_out(*out, kind, 0, 0, M, N, C, ldc);
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels
