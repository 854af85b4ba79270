// SPDX-License-Identifier: MIT
// kernels::gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h): f16 and bf16
// operands against a double-precision triple loop over the same 16-bit
// values, on shapes that cross every edge of the register tiles and blocks
// (M, N, K not multiples of the tile, odd K for the bf16 pairs, K over
// several K blocks), all four transposes, alpha/beta, bias, padded leading
// dimensions; and the matmul/linear entries that use it under autocast.
// The suite runs again with SNUG_GEMM_BF16=0 (the widening path for bf16)
// and at every CPU level (.ci/run), so each backend passes the same checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/half.h>
#include <snug/core/tensor.h>
#include <snug/nn/functional.h>

#include "test_util.h"

namespace k = snug::kernels;
using snug::Half16;

namespace {

uint16_t to16(Half16 kind, float v) {
  return kind == Half16::f16 ? snug::Half(v).bits : snug::BFloat16(v).bits;
}
float from16(Half16 kind, uint16_t b) {
  return kind == Half16::f16 ? float(snug::Half::from_bits(b)) : float(snug::BFloat16::from_bits(b));
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  int64_t pad = 0;  // extra columns in every leading dimension
};

// Every element of C against the reference; C's padding columns untouched.
// Tolerance: the f32 accumulation error, K * 2^-23 * sum |a b| (products of
// 16-bit values are exact in f32), plus beta C and bias terms.
void check(Half16 kind, const Case& c, uint32_t seed) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = std::max<int64_t>(1, a_cols + c.pad), ldb = std::max<int64_t>(1, b_cols + c.pad),
                ldc = std::max<int64_t>(1, c.N + c.pad);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<uint16_t> A(size_t(std::max<int64_t>(1, a_rows * lda))), B(size_t(std::max<int64_t>(1, b_rows * ldb)));
  for (auto& x : A) x = to16(kind, d(rng));
  for (auto& x : B) x = to16(kind, d(rng));
  std::vector<float> C(size_t(std::max<int64_t>(1, c.M * ldc))), bias(size_t(c.N));
  for (auto& x : C) x = d(rng);
  for (auto& x : bias) x = d(rng);
  const std::vector<float> C0 = C;
  if (c.beta == 0.0f)  // beta 0 must not read C
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) C[size_t(i * ldc + j)] = std::numeric_limits<float>::quiet_NaN();
  k::gemm_half(kind, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc,
               c.bias ? bias.data() : nullptr);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      if (j >= c.N) {
        REQUIRE(C[at] == C0[at]);
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t p = 0; p < c.K; ++p) {
        const double a = from16(kind, c.ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)]);
        const double b = from16(kind, c.tb ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)]);
        s += a * b;
        mag += std::fabs(a * b);
      }
      double want = double(c.alpha) * s + (c.beta == 0.0f ? 0.0 : double(c.beta) * C0[at]) +
                    (c.bias ? double(bias[size_t(j)]) : 0.0);
      const double tol = 1e-6 + double(c.K + 2) * 1.2e-7 * (std::fabs(double(c.alpha)) * mag +
                                                            std::fabs(double(c.beta) * C0[at]) + 2.0);
      INFO("kind=", int(kind), " ta=", c.ta, " tb=", c.tb, " M=", c.M, " N=", c.N, " K=", c.K, " at ", i, ",", j);
      REQUIRE(std::fabs(double(C[at]) - want) <= tol);
    }
}

}  // namespace

TEST_CASE("gemm_half: f16 and bf16 match the reference on tile and block edges, all transposes") {
  MESSAGE("gemm_half backends at level ", snug::cpu_isa(), ": f16 ", std::string(k::gemm_half_backend(Half16::f16)),
          ", bf16 ", std::string(k::gemm_half_backend(Half16::bf16)));
  uint32_t seed = 1;
  for (Half16 kind : {Half16::f16, Half16::bf16})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (int64_t M : {1, 13, 14, 15, 29, 120})
        for (int64_t N : {1, 17, 32, 33, 70})
          for (int64_t K : {1, 2, 7, 64, 257, 600}) {
            if (M * N * K > 600000 && !(M == 120 && N == 70)) continue;
            check(kind, {ta, tb, M, N, K}, seed++);
          }
    }
}

TEST_CASE("gemm_half: alpha, beta, bias, padded leading dimensions, threads") {
  uint32_t seed = 100;
  for (Half16 kind : {Half16::f16, Half16::bf16})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      check(kind, {ta, tb, 37, 45, 131, 0.5f, 0.0f, true, 3}, seed++);
      check(kind, {ta, tb, 37, 45, 131, 1.0f, 1.0f, false, 5}, seed++);
      check(kind, {ta, tb, 64, 96, 513, -1.5f, 0.25f, true, 1}, seed++);
      check(kind, {ta, tb, 300, 200, 700, 1.0f, 0.0f, true, 0}, seed++);  // several threads, blocks and K blocks
      check(kind, {ta, tb, 5, 9, 0, 1.0f, 0.5f, true, 0}, seed++);        // K = 0: beta C + bias, A and B unread
    }
}

TEST_CASE("gemm_half: bad sizes and leading dimensions are errors") {
  std::vector<uint16_t> a(64), b(64);
  std::vector<float> c(64);
  CHECK_THROWS_AS(k::gemm_half(Half16::bf16, false, false, -1, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4,
                               nullptr),
                  snug::ValueError);
  CHECK_THROWS_AS(k::gemm_half(Half16::f16, false, false, 4, 4, 8, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4,
                               nullptr),
                  snug::ValueError);  // lda 4 < K 8
}

TEST_CASE("gemm_half: denormal-free bf16 values give the widened f32 GEMM's result up to summation order") {
  // The same bf16 operands through gemm_half and through gemm_f32 on their
  // widened copies: the products are exact in f32 either way.
  const int64_t M = 50, N = 40, K = 300;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<uint16_t> A(size_t(M * K)), B(size_t(K * N));
  std::vector<float> Af(A.size()), Bf(B.size()), C(size_t(M * N)), R(size_t(M * N));
  for (size_t i = 0; i < A.size(); ++i) Af[i] = from16(Half16::bf16, A[i] = to16(Half16::bf16, d(rng)));
  for (size_t i = 0; i < B.size(); ++i) Bf[i] = from16(Half16::bf16, B[i] = to16(Half16::bf16, d(rng)));
  k::gemm_half(Half16::bf16, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N, nullptr);
  k::gemm_f32(false, false, M, N, K, 1.0f, Af.data(), K, Bf.data(), N, 0.0f, R.data(), N);
  for (size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == doctest::Approx(R[i]).epsilon(1e-5).scale(1.0));
}

TEST_CASE("16-bit matmul and linear (autocast's products) agree with f32 on the same values") {
  using namespace snug;
  using testing::max_abs;
  using testing::max_abs_diff;
  manual_seed(3);
  for (DType dt : {DType::f16, DType::bf16}) {
    // x (70, 130) @ w^T (130 -> 90) + b, and a batched matmul with a transposed operand
    Tensor x = randn({70, 130}).to(dt), w = randn({90, 130}).to(dt), b = randn({90}).to(dt);
    Tensor y = nn::functional::linear(x, w, b);
    Tensor ref = nn::functional::linear(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32)).to(dt);
    CHECK(y.dtype() == dt);
    // One rounding of the same f32 sum apart: at most two 16-bit ulps.
    const double ulp = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    CHECK(max_abs_diff(y.to(kFloat32), ref.to(kFloat32)) <= 2 * ulp * (1 + max_abs(ref.to(kFloat32))));
    Tensor p = randn({3, 40, 50}).to(dt), q = randn({3, 60, 50}).to(dt);
    Tensor mm = p.matmul(q.transpose(1, 2));  // (3, 40, 60), q^T read as a transpose
    Tensor mref = p.to(kFloat32).matmul(q.to(kFloat32).transpose(1, 2)).to(dt);
    CHECK(mm.dtype() == dt);
    CHECK(max_abs_diff(mm.to(kFloat32), mref.to(kFloat32)) <= 2 * ulp * (1 + max_abs(mref.to(kFloat32))));
  }
}

TEST_CASE("gemm_half: a_sums are the row sums of op(A), with or without the 16-bit store") {
  // HalfOut::a_sums (a Linear layer's bias gradient beside its weight
  // gradient): summed from the widened panels, or apart where the panels are
  // not floats (the bf16 dot-product tile, the baseline, K = 0, N = 0).
  uint32_t seed = 500;
  for (Half16 kind : {Half16::f16, Half16::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t M : {1, 13, 29, 120, 300})
          for (int64_t N : {0, 1, 70})
            for (int64_t K : {0, 1, 257, 700})
              for (bool store : {false, true}) {
                CAPTURE(int(kind));
                CAPTURE(ta);
                CAPTURE(tb);
                CAPTURE(M);
                CAPTURE(N);
                CAPTURE(K);
                CAPTURE(store);
                const int64_t lda = std::max<int64_t>(1, (ta ? M : K) + 2), ldb = std::max<int64_t>(1, (tb ? K : N) + 1);
                std::mt19937 rng(seed++);
                std::uniform_real_distribution<float> d(-2.0f, 2.0f);
                std::vector<uint16_t> A(size_t(std::max<int64_t>(1, (ta ? K : M) * lda))),
                    B(size_t(std::max<int64_t>(1, (tb ? N : K) * ldb))), O(size_t(std::max<int64_t>(1, M * N)));
                for (auto& x : A) x = to16(kind, d(rng));
                for (auto& x : B) x = to16(kind, d(rng));
                std::vector<float> C(size_t(std::max<int64_t>(1, M * N))), sums(size_t(M), -1e30f);
                snug::HalfOut out;
                if (store) {
                  out.out = O.data();
                  out.ldo = N;
                }
                out.a_sums = sums.data();
                k::gemm_half(kind, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.0f, C.data(),
                             std::max<int64_t>(1, N), nullptr, &out);
                for (int64_t i = 0; i < M; ++i) {
                  double want = 0, mag = 0;
                  for (int64_t p = 0; p < K; ++p) {
                    const double a = from16(kind, ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)]);
                    want += a;
                    mag += std::fabs(a);
                  }
                  REQUIRE(std::fabs(double(sums[size_t(i)]) - want) <= 1e-6 * (1 + mag));  // not scaled by alpha
                }
                if (store && N > 0 && K > 0) {  // the store still rounds C
                  for (int64_t i = 0; i < M * N; ++i) REQUIRE(O[size_t(i)] == to16(kind, C[size_t(i)]));
                }
              }
}
