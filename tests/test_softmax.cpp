// SPDX-License-Identifier: MIT
// softmax / log_softmax: values along any dim, stability, dtypes, layouts,
// errors and gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::check_vals;
using snug::testing::make;

namespace {

// softmax of a row, in double.
std::vector<double> ref_softmax(const std::vector<double>& x) {
  double m = -INFINITY, s = 0;
  for (double v : x) m = std::max(m, v);
  for (double v : x) s += std::exp(v - m);
  std::vector<double> y;
  for (double v : x) y.push_back(std::exp(v - m) / s);
  return y;
}
std::vector<double> ref_log_softmax(const std::vector<double>& x) {
  auto y = ref_softmax(x);
  for (double& v : y) v = std::log(v);
  return y;
}

}  // namespace

TEST_CASE("softmax and log_softmax along the last dim") {
  Tensor x = make({1, 2, 3, -1, 0, 1}, {2, 3});
  auto r0 = ref_softmax({1, 2, 3}), r1 = ref_softmax({-1, 0, 1});
  check_vals(softmax(x, 1), {r0[0], r0[1], r0[2], r1[0], r1[1], r1[2]});
  check_vals(x.softmax(-1), {r0[0], r0[1], r0[2], r1[0], r1[1], r1[2]});
  auto l0 = ref_log_softmax({1, 2, 3});
  check_vals(log_softmax(x, -1), {l0[0], l0[1], l0[2], l0[0], l0[1], l0[2]});
  check_vals(x.log_softmax(1), {l0[0], l0[1], l0[2], l0[0], l0[1], l0[2]});
  check_vals(softmax(x, 1).sum({1}), {1, 1});
}

TEST_CASE("softmax along dim 0, a middle dim, and of non-contiguous inputs") {
  Tensor x = make({1, 2, 3, -1, 0, 5}, {2, 3});
  auto c0 = ref_softmax({1, -1}), c1 = ref_softmax({2, 0}), c2 = ref_softmax({3, 5});
  check_vals(softmax(x, 0), {c0[0], c1[0], c2[0], c0[1], c1[1], c2[1]});
  check_vals(softmax(x, -2), {c0[0], c1[0], c2[0], c0[1], c1[1], c2[1]});
  // The transpose's rows are x's columns.
  check_vals(softmax(x.t(), 1), {c0[0], c0[1], c1[0], c1[1], c2[0], c2[1]});
  auto lc = ref_log_softmax({3, 5});
  check_vals(log_softmax(x.t(), 1).select(0, 2), {lc[0], lc[1]});
  // (2, 3, 2): softmax over the middle dim.
  Tensor y = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  auto m = ref_softmax({0, 2, 4});
  Tensor sy = softmax(y, 1);
  CHECK(sy.shape() == Shape{2, 3, 2});
  check_vals(sy.select(0, 1).select(1, 0), m);  // y[1, :, 0] = 6, 8, 10
  check_vals(sy.sum({1}), {1, 1, 1, 1});
  // A strided slice as input.
  Tensor s = make({1, 100, 2, 100, 3, 100}, {6}).slice(0, 0, 6, 2);
  check_vals(softmax(s, 0), ref_softmax({1, 2, 3}));
}

TEST_CASE("softmax is stable for large and infinite inputs") {
  Tensor big = make({1000, 1001, 1002}, {3});
  check_vals(softmax(big, 0), ref_softmax({0, 1, 2}));
  check_vals(log_softmax(big, 0), ref_log_softmax({0, 1, 2}));
  Tensor neg = make({-1000, -1001, -1002}, {3});
  check_vals(softmax(neg, 0), ref_softmax({0, -1, -2}));
  const double inf = std::numeric_limits<double>::infinity();
  Tensor mi = make({0, -inf, 0}, {3});
  check_vals(softmax(mi, 0), {0.5, 0, 0.5});
  check_vals(log_softmax(mi, 0), {-std::log(2.0), -inf, -std::log(2.0)});
  Tensor nan = make({0, std::nan(""), 1}, {3});
  auto v = softmax(nan, 0).to_vector<double>();
  CHECK(std::isnan(v[0]));
  CHECK(std::isnan(v[2]));
}

TEST_CASE("softmax in f16, bf16 and f64") {
  Generator g(5);
  Tensor x = randn({4, 33}, {}, &g);
  Tensor ref = softmax(x.to(kFloat64), 1);
  CHECK(softmax(x.to(kFloat64), 1).dtype() == kFloat64);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xh = x.to(dt);
    Tensor yh = softmax(xh, 1);
    CHECK(yh.dtype() == dt);
    // Reference on the same (rounded) inputs, computed in f64.
    auto want = softmax(xh.to(kFloat64), 1).to_vector<double>();
    auto got = yh.to_vector<double>();
    double tol = dt == kFloat16 ? 1e-3 : 8e-3;  // one rounding of the output
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(tol));
    auto lwant = log_softmax(xh.to(kFloat64), 1).to_vector<double>();
    auto lgot = log_softmax(xh, 1).to_vector<double>();
    for (size_t i = 0; i < lgot.size(); ++i) REQUIRE(lgot[i] == doctest::Approx(lwant[i]).epsilon(tol));
  }
  // A 0-d tensor is one row of one element.
  CHECK(softmax(scalar_tensor(3.0), 0).item() == 1);
  CHECK(log_softmax(scalar_tensor(3.0), -1).item() == 0);
}

TEST_CASE("softmax on a large batch matches the row-by-row reference") {
  Generator g(9);
  Tensor x = randn({512, 257}, {}, &g) * 4.0;
  auto got = softmax(x, 1).to_vector<double>();
  auto xs = x.to_vector<double>();
  for (int r = 0; r < 512; r += 37) {
    std::vector<double> row(xs.begin() + r * 257, xs.begin() + (r + 1) * 257);
    auto want = ref_softmax(row);
    for (int c = 0; c < 257; ++c) REQUIRE(got[r * 257 + c] == doctest::Approx(want[c]).epsilon(1e-6));
  }
}

TEST_CASE("the contiguous f32 fast path agrees with the strided path") {
  Generator g(13);
  Tensor x = randn({64, 300}, {}, &g) * 10.0;
  Tensor xs = x.t().contiguous().t();  // same values, column-major: the strided loops
  CHECK_FALSE(xs.is_contiguous());
  for (bool log : {false, true}) {
    auto fast = raw::softmax(x, 1, log).to_vector<double>();
    auto slow = raw::softmax(xs, 1, log).to_vector<double>();
    for (size_t i = 0; i < fast.size(); ++i) REQUIRE(fast[i] == doctest::Approx(slow[i]).epsilon(1e-6));
    Tensor y = raw::softmax(x, 1, log), gy = randn({64, 300}, {}, &g);
    auto bf = raw::softmax_backward(gy, y, 1, log).to_vector<double>();
    auto bs = raw::softmax_backward(gy.t().contiguous().t(), y.t().contiguous().t(), 1, log).to_vector<double>();
    for (size_t i = 0; i < bf.size(); ++i) REQUIRE(bf[i] == doctest::Approx(bs[i]).epsilon(1e-5).scale(0.1));
  }
  // Far below the max: exp underflows to 0 without NaN or garbage.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor tail = make({0, -20, -80, -87, -90, -1000, -inf}, {7});
  auto got = softmax(tail, 0).to_vector<double>();
  auto want = ref_softmax({0, -20, -80, -87, -90, -1000, -inf});
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6).scale(1e-31));
  CHECK(got[6] == 0);
  auto lg = log_softmax(tail, 0).to_vector<double>();
  CHECK(lg[4] == doctest::Approx(-90).epsilon(1e-6));
  CHECK(lg[6] == -inf);
}

TEST_CASE("softmax over a leading or middle dim of a contiguous tensor (column blocks) agrees with the strided path") {
  Generator g(17);
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    CAPTURE(dt);
    Tensor big = (randn({7, 150, 2 * 70 + 1}, {}, &g) * 5.0).to(dt);
    Tensor strided = big.slice(2, 0, 2 * 70, 2);  // (7, 150, 70), last-dim stride 2: the strided loops
    Tensor dense = strided.contiguous();          // same values: the column-block loops
    for (int64_t d : {0, 1}) {
      for (bool log : {false, true}) {
        auto a = raw::softmax(dense, d, log).to_vector<double>();
        auto b = raw::softmax(strided, d, log).to_vector<double>();
        double tol = dt == kFloat16 ? 2e-3 : 1e-6;
        for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1e-3));
      }
    }
  }
}

TEST_CASE("softmax_backward matches the formulas") {
  Tensor y = softmax(make({0.5, -1, 2}, {3}), 0);
  Tensor g = make({1, 2, 3}, {3});
  auto yv = y.to_vector<double>();
  double dot = yv[0] * 1 + yv[1] * 2 + yv[2] * 3;
  check_vals(raw::softmax_backward(g, y, 0, false), {yv[0] * (1 - dot), yv[1] * (2 - dot), yv[2] * (3 - dot)});
  Tensor ly = log_softmax(make({0.5, -1, 2}, {3}), 0);
  check_vals(raw::softmax_backward(g, ly, 0, true), {1 - yv[0] * 6, 2 - yv[1] * 6, 3 - yv[2] * 6}, 1e-5);
}

TEST_CASE("softmax errors name the op and the problem") {
  Tensor i = make({1, 2}, {2}, kInt64);
  CHECK_THROWS_WITH_AS(softmax(i, 0),
                       doctest::Contains("softmax: expected a floating dtype (f32, f16, bf16, f64), got i64"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(log_softmax(i, 0), doctest::Contains("log_softmax: expected a floating dtype"), DTypeError);
  Tensor x = make({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_WITH_AS(softmax(x, 2), doctest::Contains("softmax: dim 2 is out of range for a tensor with 2 dims"),
                       IndexError);
  CHECK_THROWS_WITH_AS(x.log_softmax(-3), doctest::Contains("log_softmax: dim -3 is out of range"), IndexError);
  CHECK_THROWS_WITH_AS(raw::softmax_backward(make({1, 2}, {2}), x, 0, false),
                       doctest::Contains("softmax_backward: grad_out has shape [2] but the forward output has shape "
                                         "[2, 2] (expected them equal)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(raw::softmax_backward(x.to(kFloat64), x, 0, true),
                       doctest::Contains("log_softmax_backward: grad_out has dtype f64 but the forward output has "
                                         "dtype f32"),
                       DTypeError);
}

TEST_CASE("gradcheck: softmax and log_softmax") {
  Generator g(11);
  Tensor x = randn({3, 4, 5}, TensorOptions(kFloat64), &g);
  for (int64_t d : {0, 1, 2, -1}) {
    CAPTURE(d);
    check_grad([d](const std::vector<Tensor>& a) { return softmax(a[0], d); }, {x});
    check_grad([d](const std::vector<Tensor>& a) { return log_softmax(a[0], d); }, {x});
  }
  // Through a non-contiguous view.
  check_grad([](const std::vector<Tensor>& a) { return softmax(a[0].permute({2, 0, 1}), 1); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].transpose(0, 2).log_softmax(0); }, {x});
}
