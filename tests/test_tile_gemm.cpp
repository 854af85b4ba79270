// SPDX-License-Identifier: MIT
// core/tile_gemm: the unpacked small-tile GEMM against its reference, on every
// tile width and row count it dispatches, both strides of A, accumulate on and
// off, padded leading dimensions; and the transpose.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <snug/core/cpu/tile_gemm.h>

namespace k = snug::kernels;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One product through tile_gemm_f32 and through the reference, on buffers
// with padding (checked untouched) around C's rows.
void check(int64_t M, int64_t N, int64_t K, bool a_transposed, bool accumulate, float alpha) {
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(a_transposed);
  CAPTURE(accumulate);
  const int64_t lda = (a_transposed ? M : K) + 3, ldb = N + 5, ldc = N + 7;
  const int64_t a_row = a_transposed ? 1 : lda, a_col = a_transposed ? lda : 1;
  const auto A = random_vec(size_t((a_transposed ? K : M) * lda + 1), 1);
  const auto B = random_vec(size_t(K * ldb + 1), 2);
  auto C = random_vec(size_t(M * ldc + 1), 3);
  auto R = C;
  k::tile_gemm_f32(M, N, K, alpha, A.data(), a_row, a_col, B.data(), ldb, accumulate, C.data(), ldc);
  k::tile_gemm_f32_reference(M, N, K, alpha, A.data(), a_row, a_col, B.data(), ldb, accumulate, R.data(), ldc);
  const float tol = float(K + 4) * 1.2e-7f * (std::abs(alpha) * float(K) + (accumulate ? 1.0f : 0.0f));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < ldc && r * ldc + c < int64_t(C.size()); ++c) {
      const size_t i = size_t(r * ldc + c);
      if (c < N) {
        if (std::abs(C[i] - R[i]) > tol) {
          CAPTURE(r);
          CAPTURE(c);
          CHECK(C[i] == doctest::Approx(R[i]).epsilon(tol));
          return;
        }
      } else {
        REQUIRE(C[i] == R[i]);  // padding past column N is never written
      }
    }
}

}  // namespace

TEST_CASE("tile_gemm_f32 matches the reference on every tile shape") {
  // Widths 1..129 cover one to four 16-wide vectors, masked tails and a
  // second 64-column chunk; rows 1..17 every row count of both tile heights.
  for (int64_t N : {1, 15, 16, 17, 32, 33, 48, 63, 64, 65, 96, 128, 129})
    for (int64_t M : {1, 3, 4, 5, 7, 8, 9, 17})
      for (bool at : {false, true})
        for (bool acc : {false, true}) check(M, N, 32, at, acc, 0.5f);
}

TEST_CASE("tile_gemm_f32 on attention's shapes, K of 0 and 1") {
  check(32, 128, 32, false, false, 0.17677669f);  // S = scale Q K^T
  check(32, 32, 128, false, false, 1.0f);         // O = P V
  check(128, 32, 32, true, true, 1.0f);           // dK += dS^T Q
  check(5, 20, 1, false, false, 2.0f);
  check(5, 20, 0, false, false, 2.0f);  // an empty sum: C = 0
  check(5, 20, 0, true, true, 2.0f);    // an empty sum accumulated: C unchanged
}

TEST_CASE("transpose") {
  // Float goes 16 x 16 through registers (edges masked); double takes the scalar loops.
  for (auto shape : {std::pair<int64_t, int64_t>{37, 20}, {128, 32}, {16, 16}, {1, 1}, {5, 40}, {17, 15}}) {
    const int64_t rows = shape.first, cols = shape.second;  // variables, not bindings: CAPTURE is a lambda
    const int64_t ld_src = cols + 3, ld_dst = rows + 4;
    CAPTURE(rows);
    CAPTURE(cols);
    const auto src = random_vec(size_t(rows * ld_src), 4);
    std::vector<float> dst(size_t(cols * ld_dst), -7.0f);
    k::transpose<float>(rows, cols, src.data(), ld_src, dst.data(), ld_dst);
    std::vector<double> src64(src.begin(), src.end()), dst64(size_t(cols * ld_dst), -7.0);
    k::transpose<double>(rows, cols, src64.data(), ld_src, dst64.data(), ld_dst);
    int64_t bad = 0;
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < ld_dst; ++i) {  // the padding past `rows` untouched
        const float want = i < rows ? src[size_t(i * ld_src + j)] : -7.0f;
        bad += dst[size_t(j * ld_dst + i)] != want;
        bad += dst64[size_t(j * ld_dst + i)] != double(want);
      }
    CHECK(bad == 0);
  }
}
