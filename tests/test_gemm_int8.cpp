// SPDX-License-Identifier: MIT
// The int8 GEMM (core/cpu/gemm_int8.h): the AVX-512 VNNI kernel and the
// portable loops agree exactly, on awkward shapes (edges of the 6 x 64 tile,
// K not a multiple of 4, K across several 512-blocks, strided A/B/C), and both
// equal a plain i64 sum; extreme values (255 x -128) do not saturate. Its raw
// entry points (core/raw_int8.h), which quant/ calls, give the same sums and
// refuse what they cannot take.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <snug/core/cpu/gemm_int8.h>
#include <snug/core/raw_int8.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using namespace snug::kernels;

namespace {
struct Case {
  int64_t M, N, K;
};
void fill(std::vector<uint8_t>& a, std::vector<int8_t>& b, uint32_t seed, bool extreme) {
  std::mt19937 rng(seed);
  for (auto& x : a) x = extreme ? 255 : uint8_t(rng() & 0xFF);
  for (auto& x : b) x = extreme ? int8_t(-128) : int8_t(int(rng() & 0xFF) - 128);
}
}  // namespace

TEST_CASE("VNNI and portable int8 GEMMs agree exactly with a plain sum") {
  // gemm_u8s8s32 (c_auto below) is the CPU's best kernel: VNNI, sdot on
  // aarch64 with dotprod (NOTE [ int8 with sdot ]), or the portable loop.
  MESSAGE("int8 GEMM backend: ", std::string(gemm_int8_backend()));
  if (!cpu_has_vnni()) {
    MESSAGE("this CPU has no AVX-512 VNNI: the VNNI kernel is not checked");
  }
  const std::vector<Case> cases = {{1, 1, 1},      {6, 64, 4},     {7, 65, 5},     {13, 17, 3},  {5, 130, 1030},
                                   {64, 10, 9216}, {2, 1024, 784}, {33, 100, 513}, {6, 16, 2048}};
  uint32_t seed = 1;
  for (bool extreme : {false, true})
    for (auto [M, N, K] : cases) {
      const int64_t m_ = M, n_ = N, k_ = K;  // clang 14 cannot capture structured bindings
      CAPTURE(m_);
      CAPTURE(n_);
      CAPTURE(k_);
      const int64_t lda = K + 3, ldb = K + 1, ldc = N + 2;  // strided on purpose
      std::vector<uint8_t> A(size_t(M * lda));
      std::vector<int8_t> B(size_t(N * ldb));
      fill(A, B, seed++, extreme);
      std::vector<int32_t> c_port(size_t(M * ldc), -7), c_vnni(size_t(M * ldc), -7), c_auto(size_t(M * ldc), -7);
      gemm_u8s8s32_portable(M, N, K, A.data(), lda, B.data(), ldb, c_port.data(), ldc);
      gemm_u8s8s32(M, N, K, A.data(), lda, B.data(), ldb, c_auto.data(), ldc);
      bool same = true;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          int64_t s = 0;
          for (int64_t k = 0; k < K; ++k) s += int64_t(A[size_t(m * lda + k)]) * int64_t(B[size_t(n * ldb + k)]);
          same = same && c_port[size_t(m * ldc + n)] == s && c_auto[size_t(m * ldc + n)] == s;
        }
      CHECK(same);
      // Padding columns of C are never written.
      CHECK(c_port[size_t(N)] == -7);
      CHECK(c_auto[size_t(N)] == -7);
      if (cpu_has_vnni()) {
        gemm_u8s8s32_vnni(M, N, K, A.data(), lda, B.data(), ldb, c_vnni.data(), ldc);
        CHECK(c_vnni == c_port);
        PackedInt8B p = pack_int8_b(N, K, B.data(), ldb);
        std::vector<int32_t> c_packed(size_t(M * ldc), -7);
        gemm_u8s8s32_packed(M, A.data(), lda, p, c_packed.data(), ldc);
        CHECK(c_packed == c_port);
      }
    }
}

TEST_CASE("int8 GEMM argument errors") {
  std::vector<uint8_t> a(4);
  std::vector<int8_t> b(4);
  std::vector<int32_t> c(4);
  CHECK_THROWS_AS(gemm_u8s8s32(-1, 1, 1, a.data(), 1, b.data(), 1, c.data(), 1), ValueError);
  CHECK_THROWS_AS(pack_int8_b(1, 70000, b.data(), 70000), ValueError);
}

TEST_CASE("raw::pack_int8_weight and raw::gemm_u8s8s32: the packed GEMM on tensors") {
  for (auto [M, N, K] : std::vector<Case>{{1, 1, 1}, {7, 65, 5}, {13, 100, 513}, {0, 3, 4}}) {
    const int64_t m_ = M, n_ = N, k_ = K;
    CAPTURE(m_);
    CAPTURE(n_);
    CAPTURE(k_);
    std::vector<uint8_t> A(size_t(M * K));
    std::vector<int8_t> B(size_t(N * K));
    fill(A, B, uint32_t(M * 131 + N), false);
    const Tensor a = from_vector<uint8_t>(A, {M, K}, DType::u8), w = from_vector<int8_t>(B, {N, K}, DType::i8);
    // The weight given transposed-and-back (strided) packs the same.
    const Tensor wt = raw::transpose(raw::contiguous(raw::transpose(w, 0, 1)), 0, 1);
    const raw::PackedInt8Weight p = raw::pack_int8_weight(wt);
    CHECK(p.defined());
    CHECK(p.rows() == N);
    CHECK(p.cols() == K);
    CHECK(p.nbytes() >= size_t(N * K));
    const Tensor c = raw::gemm_u8s8s32(a, p);
    REQUIRE(c.shape() == Shape{M, N});
    CHECK(c.dtype() == DType::i32);
    const std::vector<int32_t> got = c.to_vector<int32_t>();
    bool same = true;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += int64_t(A[size_t(m * K + k)]) * int64_t(B[size_t(n * K + k)]);
        same = same && got[size_t(m * N + n)] == s;
      }
    CHECK(same);
  }
  CHECK(std::string(raw::int8_gemm_kernel()) == gemm_int8_backend());
  const raw::PackedInt8Weight p = raw::pack_int8_weight(zeros({3, 4}, DType::i8));
  CHECK_THROWS_AS(raw::gemm_u8s8s32(zeros({2, 5}, DType::u8), p), ShapeError);  // K mismatch
  CHECK_THROWS_AS(raw::gemm_u8s8s32(zeros({2, 4}, DType::i8), p), DTypeError);  // the input must be u8
  CHECK_THROWS_AS(raw::pack_int8_weight(zeros({3, 4})), DTypeError);            // the weight must be i8
  CHECK_THROWS_AS(raw::pack_int8_weight(zeros({12}, DType::i8)), ShapeError);   // (N, K)
  CHECK_THROWS_AS(raw::gemm_u8s8s32(zeros({2, 4}, DType::u8), raw::PackedInt8Weight()), ValueError);
}
