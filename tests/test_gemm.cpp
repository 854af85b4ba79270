// SPDX-License-Identifier: MIT
// core/gemm: the fast GEMM against the triple-loop reference on many shapes,
// all transposes, alpha/beta, padded leading dimensions, batches; and f64.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include <snug/base/error.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/functors.h>
#include <snug/core/raw_ops.h>
#include <snug/core/tensor.h>

#include "test_util.h"

namespace k = snug::kernels;

namespace {

template <class T>
std::vector<T> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng));
  return v;
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  double alpha, beta;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
};

// Runs fast and reference on the same inputs and checks every element of C
// (and that the padding columns of C were left alone). The tolerance is a
// forward-error bound: K * eps * (|alpha| |A||B| + |beta| |C|).
template <class T, class Fast, class Ref>
void check_case(const Case& c, Fast fast, Ref ref, uint32_t seed) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = std::max<int64_t>(1, a_cols + c.pad_a);
  const int64_t ldb = std::max<int64_t>(1, b_cols + c.pad_b);
  const int64_t ldc = std::max<int64_t>(1, c.N + c.pad_c);
  auto A = random_vec<T>(size_t(std::max<int64_t>(1, a_rows * lda)), seed);
  auto B = random_vec<T>(size_t(std::max<int64_t>(1, b_rows * ldb)), seed + 1);
  auto C0 = random_vec<T>(size_t(std::max<int64_t>(1, c.M * ldc)), seed + 2);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if (c.beta == 0)  // beta == 0 must not read C
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) C0[size_t(i * ldc + j)] = nan;
  auto Cf = C0, Cr = C0;
  fast(c.ta, c.tb, c.M, c.N, c.K, T(c.alpha), A.data(), lda, B.data(), ldb, T(c.beta), Cf.data(), ldc);
  ref(c.ta, c.tb, c.M, c.N, c.K, T(c.alpha), A.data(), lda, B.data(), ldb, T(c.beta), Cr.data(), ldc);

  // Bound from the same reference on absolute values.
  std::vector<T> Aa(A), Ba(B), Ca(C0);
  for (auto& x : Aa) x = std::abs(x);
  for (auto& x : Ba) x = std::abs(x);
  for (auto& x : Ca) x = std::isnan(x) ? T(0) : std::abs(x);
  ref(c.ta, c.tb, c.M, c.N, c.K, T(std::abs(c.alpha)), Aa.data(), lda, Ba.data(), ldb, T(std::abs(c.beta)), Ca.data(),
      ldc);
  const double eps = std::numeric_limits<T>::epsilon();

  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      size_t idx = size_t(i * ldc + j);
      if (j >= c.N) {  // padding: untouched, bit for bit
        if (!(Cf[idx] == C0[idx])) ++bad;
        continue;
      }
      double tol = double(c.K + 4) * eps * double(Ca[idx]) + 1e-30;
      double diff = std::abs(double(Cf[idx]) - double(Cr[idx]));
      if (!(diff <= tol)) {
        if (bad < 3) MESSAGE("mismatch at (", i, ",", j, "): fast=", Cf[idx], " ref=", Cr[idx], " tol=", tol);
        ++bad;
      }
    }
  INFO("ta=", c.ta, " tb=", c.tb, " M=", c.M, " N=", c.N, " K=", c.K, " alpha=", c.alpha, " beta=", c.beta,
       " pads=", c.pad_a, ",", c.pad_b, ",", c.pad_c);
  CHECK(bad == 0);
}

void check_f32(const Case& c, uint32_t seed = 1) { check_case<float>(c, k::gemm_f32, k::gemm_f32_reference, seed); }
void check_f64(const Case& c, uint32_t seed = 1) { check_case<double>(c, k::gemm_f64, k::gemm_f64_reference, seed); }

struct ThreadGuard {  // restores the thread count a test changes
  int saved = k::get_num_threads();
  ~ThreadGuard() { k::set_num_threads(saved); }
};

}  // namespace

TEST_CASE("gemm_f32: small and edge shapes, all transposes") {
  const int64_t sizes[] = {1, 2, 13, 14, 15, 17, 32, 33, 65};
  uint32_t seed = 10;
  for (int t = 0; t < 4; ++t)
    for (int64_t M : sizes)
      for (int64_t N : sizes)
        for (int64_t K : sizes) check_f32({bool(t & 1), bool(t & 2), M, N, K, 1.0, 0.0}, seed++);
}

TEST_CASE("gemm_f32: empty sizes") {
  for (int t = 0; t < 4; ++t) {
    bool ta = t & 1, tb = t & 2;
    check_f32({ta, tb, 0, 5, 3, 1.0, 0.0});
    check_f32({ta, tb, 5, 0, 3, 1.0, 0.0});
    check_f32({ta, tb, 5, 3, 0, 1.0, 0.0});  // K == 0: C = beta * C = 0
    check_f32({ta, tb, 5, 3, 0, 1.0, 0.5});  // K == 0: C = 0.5 * C
    check_f32({ta, tb, 0, 0, 0, 1.0, 1.0});
  }
}

TEST_CASE("gemm_f32: alpha and beta") {
  const double ab[][2] = {{1, 0}, {2.5, 0}, {1, 1}, {-0.5, 0.75}, {0, 0}, {0, 2}, {1, -1}};
  for (auto& x : ab)
    for (int t = 0; t < 4; ++t) {
      check_f32({bool(t & 1), bool(t & 2), 37, 45, 29, x[0], x[1]}, 3);
      check_f32({bool(t & 1), bool(t & 2), 100, 70, 300, x[0], x[1]}, 4);  // K > one block
    }
}

TEST_CASE("gemm_f32: padded leading dimensions leave padding alone") {
  for (int t = 0; t < 4; ++t) {
    check_f32({bool(t & 1), bool(t & 2), 29, 41, 23, 1.0, 0.0, 3, 5, 7});
    check_f32({bool(t & 1), bool(t & 2), 29, 41, 23, 1.5, 0.5, 16, 1, 33});
    check_f32({bool(t & 1), bool(t & 2), 64, 64, 64, 1.0, 1.0, 64, 64, 64});
  }
}

TEST_CASE("gemm_f32: blocked shapes (K, N past one block), 1 and 2 threads") {
  ThreadGuard g;
  for (int nt : {1, 2}) {
    k::set_num_threads(nt);
    for (int t = 0; t < 4; ++t) {
      bool ta = t & 1, tb = t & 2;
      check_f32({ta, tb, 131, 1100, 270, 1.0, 0.0, 1, 2, 3}, 20);  // N > NC, K > KC
      check_f32({ta, tb, 300, 77, 517, 0.5, 1.0}, 21);
      check_f32({ta, tb, 1, 1500, 300, 1.0, 0.0}, 22);  // a row vector
      check_f32({ta, tb, 700, 1, 300, 1.0, 0.5}, 23);   // a column vector
      // A transposed A with more panels per thread than its block buffer holds
      // (one thread) is packed panel by panel; on two threads, a block at a time.
      check_f32({ta, tb, 800, 45, 290, 1.0, 0.0}, 24);
      // A small C over a long K is computed as two halves of K and their sum
      // (NOTE [ Splitting K for a small C ]); beta applies once, padding untouched.
      check_f32({ta, tb, 70, 45, 1100, 0.5, 1.0, 2, 1, 3}, 25);
    }
  }
}

TEST_CASE("gemm_f32: workload shapes (W-GPT linear layers, forward and backward)") {
  // qkv forward: x[T,128] @ W[128,384]; backward dX = dY @ W^T, dW = X^T @ dY
  // (T = 2048 in the workload; 512 here keeps the reference loop quick).
  check_f32({false, false, 512, 384, 128, 1.0, 0.0}, 30);
  check_f32({false, true, 512, 128, 384, 1.0, 0.0}, 31);
  check_f32({true, false, 128, 384, 512, 1.0, 1.0}, 32);
  // LM head: 65 columns.
  check_f32({false, true, 512, 65, 128, 1.0, 0.0}, 33);
  check_f32({true, false, 65, 128, 512, 1.0, 0.0}, 34);
}

TEST_CASE("gemm_f32: thread count does not change the result (bit for bit)") {
  SNUG_SKIP_IF_ONE_THREAD();
  ThreadGuard g;
  // A property of snug's packed GEMMs; Eigen's (the baseline level's) picks
  // its K blocking from the thread count.
  if (std::string(k::gemm_f32_backend()) == "eigen") {
    MESSAGE("skipped: gemm_f32 runs Eigen at this CPU level (", snug::cpu_isa(), ")");
    return;
  }
  // A fixed split of several K blocks; one K block and several K blocks with
  // a small B, whose row panels two threads take on demand (NOTE [ Panels on
  // demand ] in core/cpu/gemm_avx512.cpp); a small C over a long K, split in K.
  for (auto shape : {std::tuple<int64_t, int64_t, int64_t>{301, 517, 700},
                     {301, 517, 200},
                     {301, 100, 700},
                     {130, 70, 1500}}) {  // the last: K split in two halves
    const auto [M, N, K] = shape;
    const int64_t n = N, kk = K;  // plain variables: Clang's CAPTURE lambda cannot name a binding
    CAPTURE(n);
    CAPTURE(kk);
    auto A = random_vec<float>(size_t(M * K), 5), B = random_vec<float>(size_t(K * N), 6);
    for (int t = 0; t < 4; ++t) {
      bool ta = t & 1, tb = t & 2;
      std::vector<float> c1(size_t(M * N)), c2(size_t(M * N));
      k::set_num_threads(1);
      k::gemm_f32(ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.0f, c1.data(), N);
      k::set_num_threads(2);
      k::gemm_f32(ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.0f, c2.data(), N);
      CHECK(c1 == c2);
    }
  }
}

TEST_CASE("gemm_f32: called from inside an OpenMP parallel region") {
  SNUG_SKIP_IF_ONE_THREAD();
  const int64_t M = 90, N = 70, K = 110;
  auto A = random_vec<float>(size_t(M * K), 7), B = random_vec<float>(size_t(K * N), 8);
  std::vector<float> want(size_t(M * N));
  k::gemm_f32_reference(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N);
  std::vector<std::vector<float>> got(4, std::vector<float>(size_t(M * N)));
#pragma omp parallel for num_threads(2)
  for (int r = 0; r < 4; ++r)
    k::gemm_f32(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, got[size_t(r)].data(), N);
  for (auto& g : got)
    for (size_t i = 0; i < g.size(); ++i) REQUIRE(std::abs(g[i] - want[i]) < 1e-4f);
}

TEST_CASE("gemm_f32_batched: attention shapes and odd batches") {
  ThreadGuard g;
  struct B {
    bool ta, tb;
    int64_t M, N, K, batch;
    double beta;
  };
  // Q K^T (64 heads x 128x32 @ 32x128), att @ V, and their backward products.
  const B cases[] = {{false, true, 128, 128, 32, 64, 0.0}, {false, false, 128, 32, 128, 64, 0.0},
                     {true, false, 128, 32, 128, 64, 1.0}, {false, false, 128, 128, 32, 3, 0.5},
                     {true, true, 200, 300, 150, 3, 0.0},  {false, false, 5, 6, 7, 1, 0.0},
                     {false, false, 5, 6, 7, 0, 0.0}};
  for (int nt : {1, 2}) {
    k::set_num_threads(nt);
    for (const auto& c : cases) {
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N, ldc = c.N;
      const int64_t sa = (c.ta ? c.K : c.M) * lda + 3, sb = (c.tb ? c.N : c.K) * ldb + 1, sc = c.M * ldc + 2;
      const size_t nb = size_t(std::max<int64_t>(c.batch, 1));
      auto A = random_vec<float>(nb * size_t(sa), 40), Bm = random_vec<float>(nb * size_t(sb), 41);
      auto C0 = random_vec<float>(nb * size_t(sc), 42);
      auto Cf = C0, Cr = C0;
      k::gemm_f32_batched(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, sa, Bm.data(), ldb, sb, float(c.beta),
                          Cf.data(), ldc, sc, c.batch);
      for (int64_t b = 0; b < c.batch; ++b)
        k::gemm_f32_reference(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data() + b * sa, lda, Bm.data() + b * sb, ldb,
                              float(c.beta), Cr.data() + b * sc, ldc);
      float worst = 0;
      for (size_t i = 0; i < Cf.size(); ++i) worst = std::max(worst, std::abs(Cf[i] - Cr[i]));
      INFO("batch ", c.batch, " M=", c.M, " N=", c.N, " K=", c.K, " threads=", nt);
      CHECK(worst < 1e-4f);
    }
  }
}

TEST_CASE("gemm_f32_bias: the bias lands on every row (edges, K past one block, transposes, threads)") {
  ThreadGuard tg;
  struct S {
    bool ta, tb;
    int64_t M, N, K;
  };
  for (int threads : snug::testing::thread_counts())
    for (S c : {S{false, false, 1, 1, 1}, S{false, true, 13, 17, 5}, S{true, false, 33, 65, 300},
                S{false, true, 2048, 384, 128}, S{true, true, 15, 33, 7}, S{false, false, 4, 5, 0},
                S{true, false, 20, 40, 1100}}) {  // the last: K split in two halves (small C)
      k::set_num_threads(threads);
      CAPTURE(threads);
      CAPTURE(c.M);
      CAPTURE(c.K);
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N, ldc = c.N + 3;  // C padded
      auto A = random_vec<float>(size_t(std::max<int64_t>(1, c.M * c.K)), 7);
      auto B = random_vec<float>(size_t(std::max<int64_t>(1, c.K * c.N)), 8);
      auto bias = random_vec<float>(size_t(c.N), 9);
      std::vector<float> Cf(size_t(c.M * ldc), std::numeric_limits<float>::quiet_NaN()), Cr(Cf.size());
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < ldc; ++j) Cr[size_t(i * ldc + j)] = j < c.N ? bias[size_t(j)] : Cf[0];
      k::gemm_f32_bias(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), std::max<int64_t>(lda, 1), B.data(),
                       std::max<int64_t>(ldb, 1), Cf.data(), ldc, bias.data());
      k::gemm_f32_reference(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), std::max<int64_t>(lda, 1), B.data(),
                            std::max<int64_t>(ldb, 1), 1.0f, Cr.data(), ldc);
      int64_t bad = 0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const float f = Cf[size_t(i * ldc + j)], r = Cr[size_t(i * ldc + j)];
          if (j >= c.N)
            bad += !std::isnan(f);  // padding untouched
          else
            bad += !(std::abs(double(f) - double(r)) <= double(c.K + 4) * 1.2e-7 * (double(c.K) + 1.0));
        }
      CHECK(bad == 0);
    }
  // A null bias is gemm_f32 with beta = 0, bit for bit.
  auto A = random_vec<float>(64 * 40, 1), B = random_vec<float>(40 * 70, 2);
  std::vector<float> C1(64 * 70), C2(64 * 70);
  k::gemm_f32_bias(false, false, 64, 70, 40, 0.5f, A.data(), 40, B.data(), 70, C1.data(), 70, nullptr);
  k::gemm_f32(false, false, 64, 70, 40, 0.5f, A.data(), 40, B.data(), 70, 0.0f, C2.data(), 70);
  CHECK(C1 == C2);
}

namespace {
// The products the store-epilogue tests (bias_act, act_grad) run: panels on
// demand (M split, one K block or all of B in cache), the fixed split with
// several NC blocks and K blocks, K split in two halves for a small C, edges,
// K = 0. C is padded (ldc = N + 5) so that writes past N show up.
struct EpiCase {
  bool ta, tb;
  int64_t M, N, K;
};
const EpiCase kEpiCases[] = {EpiCase{false, true, 2048, 512, 128}, EpiCase{false, true, 300, 1100, 600},
                             EpiCase{true, false, 128, 384, 2048}, EpiCase{false, false, 37, 45, 20},
                             EpiCase{true, true, 1, 3, 5},         EpiCase{false, true, 64, 70, 0}};
struct EpiOperands {
  std::vector<float> A, B;
  int64_t lda, ldb, ldc;
  std::string what;  // for CAPTURE
};
EpiOperands epi_operands(const EpiCase& c, uint32_t seed) {
  return {random_vec<float>(size_t(std::max<int64_t>(1, c.M * c.K)), seed),
          random_vec<float>(size_t(std::max<int64_t>(1, c.K * c.N)), seed + 1),
          std::max<int64_t>(c.ta ? c.M : c.K, 1),
          std::max<int64_t>(c.tb ? c.K : c.N, 1),
          c.N + 5,
          std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + (c.ta ? " ta" : "") +
              (c.tb ? " tb" : "")};
}
}  // namespace

TEST_CASE("gemm_f32_bias_act: gemm_f32_bias then the activation, bit for bit, on every path") {
  ThreadGuard tg;
  for (int threads : snug::testing::thread_counts())
    for (const EpiCase& c : kEpiCases)
      for (k::GemmAct act : {k::GemmAct::none, k::GemmAct::relu, k::GemmAct::gelu, k::GemmAct::gelu_tanh})
        for (bool with_pre : {false, true}) {
          k::set_num_threads(threads);
          const EpiOperands o = epi_operands(c, 11);
          CAPTURE(threads);
          CAPTURE(o.what);
          CAPTURE(int(act));
          auto bias = random_vec<float>(size_t(c.N), 13);
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> Cb(size_t(c.M * o.ldc), nan), Ca(Cb.size(), nan), pre(Cb.size(), nan);
          k::gemm_f32_bias(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, Cb.data(), o.ldc,
                           bias.data());
          k::gemm_f32_bias_act(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, Ca.data(), o.ldc,
                               bias.data(), act, with_pre ? pre.data() : nullptr);
          // The unfused road: the library's own elementwise op on gemm_f32_bias's
          // output. It runs at the same CPU level (NOTE [ CPU levels ]) as the
          // epilogue; a functor compiled into this test would be compiled with
          // the test's flags, and FMA contraction may round differently.
          std::vector<float> want = Cb;
          if (act != k::GemmAct::none) {
            const snug::UnaryOp op = act == k::GemmAct::relu   ? snug::UnaryOp::relu
                                     : act == k::GemmAct::gelu ? snug::UnaryOp::gelu
                                                               : snug::UnaryOp::gelu_tanh;
            want = snug::raw::unary(op, snug::from_vector(Cb)).to_vector<float>();
          }
          int64_t bad = 0, bad_pre = 0, touched = 0;
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < o.ldc; ++j) {
              const size_t at = size_t(i * o.ldc + j);
              if (j >= c.N) {
                touched += !std::isnan(Ca[at]) + !std::isnan(pre[at]);
                continue;
              }
              bad += Ca[at] != want[at];
              if (with_pre) bad_pre += pre[at] != Cb[at];
            }
          CHECK(bad == 0);
          CHECK(bad_pre == 0);
          CHECK(touched == 0);
        }
}

TEST_CASE("gemm_f32_act_grad: gemm_f32 then the activation's backward, bit for bit, on every path") {
  ThreadGuard tg;
  for (int threads : snug::testing::thread_counts())
    for (const EpiCase& c : kEpiCases)
      for (k::GemmAct act : {k::GemmAct::relu, k::GemmAct::gelu, k::GemmAct::gelu_tanh}) {
        k::set_num_threads(threads);
        const EpiOperands o = epi_operands(c, 21);
        CAPTURE(threads);
        CAPTURE(o.what);
        CAPTURE(int(act));
        auto z = random_vec<float>(size_t(c.M * o.ldc), 23);  // the pre-activation, some of it negative
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> Cp(size_t(c.M * o.ldc), nan), Cg(Cp.size(), nan);
        k::gemm_f32(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.0f, Cp.data(), o.ldc);
        k::gemm_f32_act_grad(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, Cg.data(), o.ldc,
                             act, z.data());
        // The unfused road, at the library's CPU level (see the test above).
        const snug::BinaryOp op = act == k::GemmAct::relu   ? snug::BinaryOp::relu_backward
                                  : act == k::GemmAct::gelu ? snug::BinaryOp::gelu_backward
                                                            : snug::BinaryOp::gelu_tanh_backward;
        const std::vector<float> want =
            snug::raw::binary(op, snug::from_vector(Cp), snug::from_vector(z)).to_vector<float>();
        int64_t bad = 0, touched = 0;
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = 0; j < o.ldc; ++j) {
            const size_t at = size_t(i * o.ldc + j);
            if (j >= c.N)
              touched += !std::isnan(Cg[at]);
            else
              bad += Cg[at] != want[at];
          }
        CHECK(bad == 0);
        CHECK(touched == 0);
      }
  std::vector<float> C(4);
  CHECK_THROWS_AS(k::gemm_f32_act_grad(false, false, 2, 2, 2, 1.0f, C.data(), 2, C.data(), 2, C.data(), 2,
                                       k::GemmAct::gelu_grad, C.data()),
                  snug::ValueError);
}

TEST_CASE("gemm_f64: matches the reference") {
  const int64_t sizes[] = {1, 3, 8, 17, 40};
  uint32_t seed = 100;
  for (int t = 0; t < 4; ++t) {
    bool ta = t & 1, tb = t & 2;
    for (int64_t M : sizes)
      for (int64_t N : sizes)
        for (int64_t K : sizes) check_f64({ta, tb, M, N, K, 1.0, 0.0}, seed++);
    check_f64({ta, tb, 33, 21, 45, -1.5, 0.25, 2, 3, 4});
    check_f64({ta, tb, 33, 21, 45, 1.0, 1.0, 0, 0, 9});
    check_f64({ta, tb, 4, 5, 0, 1.0, 0.5});
    check_f64({ta, tb, 0, 5, 6, 1.0, 0.5});
  }
  // batched f64
  const int64_t M = 9, N = 7, K = 5, batch = 4;
  auto A = random_vec<double>(size_t(batch * M * K), 1), B = random_vec<double>(size_t(batch * K * N), 2);
  std::vector<double> Cf(size_t(batch * M * N)), Cr(Cf.size());
  k::gemm_f64_batched(false, false, M, N, K, 1.0, A.data(), K, M * K, B.data(), N, K * N, 0.0, Cf.data(), N, M * N,
                      batch);
  for (int64_t b = 0; b < batch; ++b)
    k::gemm_f64_reference(false, false, M, N, K, 1.0, A.data() + b * M * K, K, B.data() + b * K * N, N, 0.0,
                          Cr.data() + b * M * N, N);
  for (size_t i = 0; i < Cf.size(); ++i) CHECK(Cf[i] == doctest::Approx(Cr[i]).epsilon(1e-12));
}

TEST_CASE("gemm: argument errors name the problem") {
  float a[4] = {}, b[4] = {}, c[4] = {};
  CHECK_THROWS_AS(k::gemm_f32(false, false, -1, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2), snug::ValueError);
  CHECK_THROWS_AS(k::gemm_f32(false, false, 2, 2, 2, 1.0f, a, 1, b, 2, 0.0f, c, 2), snug::ValueError);
  CHECK_THROWS_AS(k::gemm_f32(false, true, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2), snug::ValueError);
  CHECK_THROWS_AS(k::gemm_f32(false, false, 2, 3, 2, 1.0f, a, 2, b, 3, 0.0f, c, 2), snug::ValueError);
  CHECK_THROWS_AS(k::set_num_threads(0), snug::ValueError);
  CHECK(std::string(k::gemm_f32_backend()).size() > 0);
}

// gemm_f32_a_sums: C as gemm_f32 gives it, bit for bit, plus the row sums of
// op(A), taken from the packed panels, within the float summation bound; the
// same bits on 1 and 2 threads. Shapes cross the M edge (14-row panels), KC (256) and NC (1024).
TEST_CASE("gemm_f32_a_sums: C equals gemm_f32, sums equal the double row sums, any thread count") {
  ThreadGuard guard;
  struct S {
    bool ta, tb;
    int64_t M, N, K;
  };
  const S shapes[] = {{true, false, 1, 1, 1},     {true, false, 13, 33, 17},    {true, false, 15, 16, 300},
                      {true, false, 29, 65, 600}, {false, false, 14, 40, 257},  {false, true, 33, 7, 520},
                      {true, true, 5, 1100, 70},  {true, false, 128, 128, 2048}};
  uint32_t seed = 7;
  for (const S& s : shapes) {
    CAPTURE(s.ta);
    CAPTURE(s.tb);
    CAPTURE(s.M);
    CAPTURE(s.N);
    CAPTURE(s.K);
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    auto A = random_vec<float>(size_t(s.M * s.K), seed++);
    auto B = random_vec<float>(size_t(s.K * s.N), seed++);
    std::vector<double> ref(size_t(s.M), 0.0), abs_sum(size_t(s.M), 0.0);
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t k = 0; k < s.K; ++k) {
        const double a = s.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
        ref[size_t(i)] += a;
        abs_sum[size_t(i)] += std::abs(a);
      }
    std::vector<float> first_sums;
    for (int nt : {1, 2}) {
      k::set_num_threads(nt);
      std::vector<float> C(size_t(s.M * s.N), -1.0f), C2(C), sums(size_t(s.M), -7.0f);
      k::gemm_f32_a_sums(s.ta, s.tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N,
                         sums.data());
      k::gemm_f32(s.ta, s.tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, 0.0f, C2.data(), s.N);
      CHECK(C == C2);
      // Float sums of at most 64 terms per chain within a K block of 256: the
      // recursive-summation bound, 66 u sum|a| (u = 2^-24), then double.
      for (int64_t i = 0; i < s.M; ++i)
        CHECK(std::abs(double(sums[size_t(i)]) - ref[size_t(i)]) <= 66 * 0x1p-24 * abs_sum[size_t(i)] + 1e-30);
      if (first_sums.empty())
        first_sums = sums;
      else
        CHECK(sums == first_sums);
    }
  }
}

TEST_CASE("gemm_f32_a_sums: empty products, alpha = 0 and a null output") {
  std::vector<float> A = {1, 2, 3, 4, 5, 6}, B = {1, 1, 1, 1, 1, 1}, C(4, 2.0f), sums(2, -1.0f);
  // K = 0: C = beta C, sums are 0.
  k::gemm_f32_a_sums(false, false, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.5f, C.data(), 2, sums.data());
  CHECK(C == std::vector<float>(4, 1.0f));
  CHECK(sums == std::vector<float>{0.0f, 0.0f});
  // alpha = 0: A and B are not multiplied, but the sums are still op(A)'s (not scaled).
  k::gemm_f32_a_sums(false, false, 2, 2, 3, 0.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2, sums.data());
  CHECK(C == std::vector<float>(4, 0.0f));
  CHECK(sums == std::vector<float>{6.0f, 15.0f});
  // N = 0: no C at all, the sums still come.
  k::gemm_f32_a_sums(true, false, 2, 0, 3, 1.0f, A.data(), 2, B.data(), 1, 0.0f, C.data(), 1, sums.data());
  CHECK(sums == std::vector<float>{9.0f, 12.0f});
  CHECK_THROWS_AS(k::gemm_f32_a_sums(false, false, 2, 2, 3, 1.0f, A.data(), 3, B.data(), 2, 0.0f, C.data(), 2, nullptr),
                  snug::ValueError);
}
