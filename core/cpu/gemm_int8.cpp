// SPDX-License-Identifier: MIT
#include <snug/core/cpu/gemm_int8.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // Linux's bit for the Armv8.2 dot product (sdot, udot)
#endif
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include <snug/base/error.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels {

// ---- portable -----------------------------------------------------------------------------

void gemm_u8s8s32_portable(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                           int32_t* C, int64_t ldc) {
#pragma omp parallel for schedule(static) if (M * N * K > (1 << 20))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* a = A + m * lda;
      const int8_t* b = B + n * ldb;
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int32_t(a[k]) * int32_t(b[k]);
      C[m * ldc + n] = s;
    }
}

// The VNNI kernel exists in the avx512 level only (NOTE [ CPU levels ]): VNNI
// is an AVX-512 extension, and a level below AVX-512 runs none of it.
bool cpu_has_vnni() {
#if defined(__AVX512F__)
  static const bool has = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

// ---- Arm dot product ------------------------------------------------------------------------
//
// NOTE [ int8 with sdot ]
// sdot (Armv8.2 dotprod, in most Cortex-A75 and later cores, Apple silicon,
// Neoverse) adds four s8 x s8 products into each i32 lane. Our activations
// are u8, so each a is taken as a - 128 (flipping the top bit makes it s8)
// and the difference added back per column: sum a b = sum (a - 128) b +
// 128 sum b. Each partial sum stays exact in i32 under the K bound of
// core/cpu/gemm_int8.h, so the result is the portable loop's bit for bit.
// Four columns share each 16-byte load of the shifted row; the column sums
// of B are taken once per call. Used only after a run-time check of the
// kernel's HWCAP (the level itself is plain Armv8-A).
#if defined(__aarch64__)
bool cpu_has_dotprod() {
  static const bool has = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  return has;
}

namespace {

// One row of C: row holds the row of A shifted to s8 (K values), bsum the
// per-column 128 * sum_k B[n][k].
// (GCC 12 wants the "arch=" form for the dot product; a bare "+dotprod" does
// not enable arm_neon.h's vdotq_s32.)
__attribute__((target("arch=armv8.2-a+dotprod"))) void sdot_row(int64_t N, int64_t K, const int8_t* row,
                                                                 const int8_t* B, int64_t ldb, const int32_t* bsum,
                                                                 int32_t* c) {
  const int64_t K16 = K / 16 * 16;
  int64_t n = 0;
  for (; n + 4 <= N; n += 4) {
    const int8_t* b0 = B + n * ldb;
    int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int64_t k = 0; k < K16; k += 16) {
      const int8x16_t va = vld1q_s8(row + k);
      for (int j = 0; j < 4; ++j) acc[j] = vdotq_s32(acc[j], va, vld1q_s8(b0 + j * ldb + k));
    }
    for (int j = 0; j < 4; ++j) {
      int32_t t = vaddvq_s32(acc[j]);
      for (int64_t k = K16; k < K; ++k) t += int32_t(row[k]) * int32_t(b0[j * ldb + k]);
      c[n + j] = t + bsum[n + j];
    }
  }
  for (; n < N; ++n) {
    const int8_t* b = B + n * ldb;
    int32x4_t acc = vdupq_n_s32(0);
    for (int64_t k = 0; k < K16; k += 16) acc = vdotq_s32(acc, vld1q_s8(row + k), vld1q_s8(b + k));
    int32_t t = vaddvq_s32(acc);
    for (int64_t k = K16; k < K; ++k) t += int32_t(row[k]) * int32_t(b[k]);
    c[n] = t + bsum[n];
  }
}

// The rows spread over threads; the OpenMP region itself carries no target
// attribute (its outlined body would not inherit one), only sdot_row does.
void sdot_gemm(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
               int32_t* C, int64_t ldc) {
  std::vector<int32_t> bsum(size_t(N), 0);  // 128 * sum_k B[n][k]
  for (int64_t n = 0; n < N; ++n) {
    int32_t t = 0;
    for (int64_t k = 0; k < K; ++k) t += B[n * ldb + k];
    bsum[size_t(n)] = 128 * t;
  }
#pragma omp parallel if (M * N * K > (1 << 20))
  {
    std::vector<int8_t> row(size_t(std::max<int64_t>(K, 1)));  // a - 128 as s8
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      const uint8_t* a = A + m * lda;
      for (int64_t k = 0; k < K; ++k) row[size_t(k)] = int8_t(a[k] ^ 0x80u);
      sdot_row(N, K, row.data(), B, ldb, bsum.data(), C + m * ldc);
    }
  }
}

}  // namespace
#else
bool cpu_has_dotprod() { return false; }
#endif

const char* gemm_int8_backend() {
  return cpu_has_vnni() ? "avx512_vnni" : cpu_has_dotprod() ? "neon_dotprod" : "portable";
}

namespace {
// The best kernel for B as given (N x K): VNNI packs it per call; sdot and the
// portable loop read it in place.
void gemm_u8s8s32_unpacked(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                           int64_t ldb, int32_t* C, int64_t ldc) {
#if defined(__aarch64__)
  if (cpu_has_dotprod()) return sdot_gemm(M, N, K, A, lda, B, ldb, C, ldc);
#endif
  gemm_u8s8s32_portable(M, N, K, A, lda, B, ldb, C, ldc);
}
}  // namespace

// ---- VNNI -----------------------------------------------------------------------------------
//
// NOTE [ int8 GEMM blocking ]: B is packed in panels of 16 columns (one zmm of
// i32 lanes); the micro-kernel keeps MR x NV accumulators (6 rows x 4 panels
// = 64 columns, 24 of the 32 zmm registers), and per group of 4 k loads NV
// panels of B and broadcasts 4 bytes of each of the MR rows of A. K is cut in
// blocks of KC so a 64-column block of packed B (64 x KC bytes = 32 KiB)
// stays in L1 while every row strip of A passes over it. Threads take
// 64-column blocks of C.

namespace {
constexpr int kMR = 6, kNV = 4, kNB = 16 * kNV;
constexpr int64_t kKC = 512;  // k per block (a multiple of 4)

int64_t round4(int64_t k) { return (k + 3) / 4 * 4; }

// Packs B (N x K) into VNNI panels: out[(p * Kp/4 + g) * 64 + j * 4 + t] = B[16p + j, 4g + t],
// zero where n >= N or k >= K. Copies 4 bytes at a time.
void pack_panels(int64_t N, int64_t K, const int8_t* B, int64_t ldb, int8_t* out) {
  const int64_t Kp = round4(K), P = (N + 15) / 16, G = Kp / 4, full = K / 4;
#pragma omp parallel for schedule(static) if (N * K > (1 << 20))
  for (int64_t p = 0; p < P; ++p)
    for (int64_t g = 0; g < G; ++g) {
      int8_t* dst = out + (p * G + g) * 64;
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t n = p * 16 + j;
        if (n >= N) {
          std::memset(dst + j * 4, 0, 4);
        } else if (g < full) {
          std::memcpy(dst + j * 4, B + n * ldb + g * 4, 4);
        } else {
          for (int64_t t = 0; t < 4; ++t) dst[j * 4 + t] = g * 4 + t < K ? B[n * ldb + g * 4 + t] : int8_t(0);
        }
      }
    }
}

#if defined(__AVX512F__)
template <int MR, int NV>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void micro(int64_t groups, const uint8_t* A, int64_t lda,
                                                                  const int8_t* Bp, int64_t panel_stride, int32_t* C,
                                                                  int64_t ldc, bool accumulate, int64_t ncols) {
  __m512i acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_si512(Bp + v * panel_stride + g * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, A + r * lda + g * 4, 4);
      const __m512i a = _mm512_set1_epi32(four);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, b[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      const int64_t valid = std::min<int64_t>(16, ncols - v * 16);
      if (valid <= 0) break;
      const __mmask16 mask = valid == 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
      int32_t* c = C + r * ldc + v * 16;
      __m512i out = acc[r][v];
      if (accumulate) out = _mm512_add_epi32(out, _mm512_maskz_loadu_epi32(mask, c));
      _mm512_mask_storeu_epi32(c, mask, out);
    }
}

using Micro = void (*)(int64_t, const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t, bool, int64_t);
template <int MR>
Micro pick_nv(int nv) {
  switch (nv) {
    case 1:
      return micro<MR, 1>;
    case 2:
      return micro<MR, 2>;
    case 3:
      return micro<MR, 3>;
    default:
      return micro<MR, 4>;
  }
}
Micro pick(int mr, int nv) {
  switch (mr) {
    case 1:
      return pick_nv<1>(nv);
    case 2:
      return pick_nv<2>(nv);
    case 3:
      return pick_nv<3>(nv);
    case 4:
      return pick_nv<4>(nv);
    case 5:
      return pick_nv<5>(nv);
    default:
      return pick_nv<6>(nv);
  }
}

// A must have K padded to Kp (4-byte groups readable) here.
void vnni_packed(int64_t M, const uint8_t* A, int64_t lda, int64_t N, int64_t Kp, const int8_t* Bp, int32_t* C,
                 int64_t ldc) {
  const int64_t panel_stride = 16 * Kp;
  const int64_t nblocks = (N + kNB - 1) / kNB;
#pragma omp parallel for schedule(static) if (M * N * Kp > (1 << 18))
  for (int64_t nb = 0; nb < nblocks; ++nb) {
    const int64_t n0 = nb * kNB, ncols = std::min<int64_t>(kNB, N - n0);
    const int nv = int((ncols + 15) / 16);
    const int8_t* Bblock = Bp + (n0 / 16) * panel_stride;
    for (int64_t k0 = 0; k0 < Kp; k0 += kKC) {
      const int64_t groups = std::min<int64_t>(kKC, Kp - k0) / 4;
      for (int64_t m0 = 0; m0 < M; m0 += kMR) {
        const int mr = int(std::min<int64_t>(kMR, M - m0));
        pick(mr, nv)(groups, A + m0 * lda + k0, lda, Bblock + k0 * 16, panel_stride, C + m0 * ldc + n0, ldc, k0 > 0,
                     ncols);
      }
    }
  }
}
#endif  // __AVX512F__

// Runs fn(A', lda') with A' = A when K is a multiple of 4, else a zero-padded copy.
template <class Fn>
void with_padded_a(int64_t M, int64_t K, const uint8_t* A, int64_t lda, Fn fn) {
  const int64_t Kp = round4(K);
  if (Kp == K) return fn(A, lda);
  std::vector<uint8_t> pad(size_t(M * Kp), 0);
  for (int64_t m = 0; m < M; ++m) std::memcpy(pad.data() + m * Kp, A + m * lda, size_t(K));
  fn(pad.data(), Kp);
}

void check_args(const char* fn, int64_t M, int64_t N, int64_t K) {
  SNUG_CHECK(M >= 0 && N >= 0 && K >= 0, ValueError, fn, ": negative size M=", M, " N=", N, " K=", K);
  SNUG_CHECK(K < 65793, ValueError, fn, ": K=", K, " could overflow the i32 accumulators (K must be < 65793)");
}
}  // namespace

void gemm_u8s8s32_vnni(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                       int32_t* C, int64_t ldc) {
  check_args("gemm_u8s8s32_vnni", M, N, K);
  SNUG_CHECK(cpu_has_vnni(), DeviceError, "gemm_u8s8s32_vnni: this CPU, or the CPU level in use ('",
             SNUG_CPU_LEVEL_NAME, "'), has no AVX-512 VNNI");
  if (M == 0 || N == 0) return;
  PackedInt8B p = pack_int8_b(N, K, B, ldb);
  gemm_u8s8s32_packed(M, A, lda, p, C, ldc);
}

void gemm_u8s8s32(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                  int32_t* C, int64_t ldc) {
  if (cpu_has_vnni()) return gemm_u8s8s32_vnni(M, N, K, A, lda, B, ldb, C, ldc);
  check_args("gemm_u8s8s32", M, N, K);
  gemm_u8s8s32_unpacked(M, N, K, A, lda, B, ldb, C, ldc);
}

PackedInt8B pack_int8_b(int64_t N, int64_t K, const int8_t* B, int64_t ldb) {
  check_args("pack_int8_b", 1, N, K);
  PackedInt8B p;
  p.N = N;
  p.K = K;
  p.vnni = cpu_has_vnni();
  if (p.vnni) {
    p.Kp = round4(K);
    p.data = empty({std::max<int64_t>(1, (N + 15) / 16 * 16 * p.Kp)}, DType::i8);
    pack_panels(N, K, B, ldb, p.data.data<int8_t>());
  } else {
    p.Kp = K;
    p.data = empty({std::max<int64_t>(1, N * K)}, DType::i8);
    for (int64_t n = 0; n < N; ++n) std::memcpy(p.data.data<int8_t>() + n * K, B + n * ldb, size_t(K));
  }
  return p;
}

void gemm_u8s8s32_packed(int64_t M, const uint8_t* A, int64_t lda, const PackedInt8B& B, int32_t* C, int64_t ldc) {
  if (M == 0 || B.N == 0) return;
  if (B.K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + B.N, 0);
    return;
  }
  if (!B.vnni) return gemm_u8s8s32_unpacked(M, B.N, B.K, A, lda, B.data.data<int8_t>(), B.K, C, ldc);
  // Packed as VNNI panels by a level that has VNNI; the level in use now
  // (snug::set_cpu_isa switched since) cannot read them.
  SNUG_CHECK(cpu_has_vnni(), DeviceError,
             "gemm_u8s8s32_packed: the weight was packed for AVX-512 VNNI, which the CPU level in use ('",
             SNUG_CPU_LEVEL_NAME, "') lacks; pack it again");
#if defined(__AVX512F__)
  with_padded_a(M, B.K, A, lda,
                [&](const uint8_t* a, int64_t la) { vnni_packed(M, a, la, B.N, B.Kp, B.data.data<int8_t>(), C, ldc); });
#endif
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels
