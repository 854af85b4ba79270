// SPDX-License-Identifier: MIT
// nn::functional: linear, layer_norm, embedding, the losses and attention,
// each against a naive double-precision computation, with gradchecks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_approx;
using snug::testing::check_grad;
using snug::testing::error_of;
using snug::testing::idx;
using snug::testing::make;
using snug::testing::rnd;
using snug::testing::vals;
namespace F = snug::nn::functional;
using F::Reduction;

namespace {

double lse(const std::vector<double>& r) {
  double m = -INFINITY, s = 0;
  for (double v : r) m = std::max(m, v);
  for (double v : r) s += std::exp(v - m);
  return m + std::log(s);
}

}  // namespace

// ---- linear ----------------------------------------------------------------------------

TEST_CASE("linear: values for 2-D and 3-D input, with and without bias") {
  std::vector<double> xv = {1, 2, 3, -1, 0, 2, 0.5, 0.5, -2, 4, 1, 0};  // (4, 3) / (2, 2, 3)
  std::vector<double> wv = {1, 0, -1, 2, 1, 0.5};                       // (2, 3)
  std::vector<double> bv = {0.25, -1};
  std::vector<double> want, want_nb;
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 2; ++o) {
      double s = 0;
      for (int i = 0; i < 3; ++i) s += xv[n * 3 + i] * wv[o * 3 + i];
      want_nb.push_back(s);
      want.push_back(s + bv[o]);
    }
  Tensor w = make(wv, {2, 3}), b = make(bv, {2});
  Tensor y = F::linear(make(xv, {4, 3}), w, b);
  CHECK(y.shape() == Shape{4, 2});
  check_approx(y, want);
  Tensor y3 = F::linear(make(xv, {2, 2, 3}), w, b);
  CHECK(y3.shape() == Shape{2, 2, 2});
  check_approx(y3, want);
  check_approx(F::linear(make(xv, {4, 3}), w), want_nb);
  // A non-contiguous input (a transpose) gives the same.
  Tensor xt = make(xv, {4, 3}).t().contiguous().t();
  check_approx(F::linear(xt, w, b), want);
  // 1-D input.
  Tensor y1 = F::linear(make({1, 2, 3}, {3}), w, b);
  CHECK(y1.shape() == Shape{2});
  check_approx(y1, {1 - 3 + 0.25, 2 + 2 + 1.5 - 1});
}

TEST_CASE("linear: shape errors name the shapes") {
  Tensor w = zeros({2, 3});
  std::string m = error_of<ShapeError>([&] { F::linear(zeros({4, 5}), w); });
  CHECK(m.find("[4, 5]") != std::string::npos);
  CHECK(m.find("[2, 3]") != std::string::npos);
  CHECK_THROWS_AS(F::linear(zeros({4, 3}), zeros({3})), ShapeError);
  CHECK_THROWS_AS(F::linear(zeros({4, 3}), w, zeros({3})), ShapeError);
}

TEST_CASE("linear: gradcheck for x, W and b (2-D and 3-D)") {
  check_grad([](const std::vector<Tensor>& a) { return F::linear(a[0], a[1], a[2]); },
             {rnd({3, 4}, 1), rnd({2, 4}, 2), rnd({2}, 3)});
  check_grad([](const std::vector<Tensor>& a) { return F::linear(a[0], a[1], a[2]); },
             {rnd({2, 2, 3}, 4), rnd({3, 3}, 5), rnd({3}, 6)});
  check_grad([](const std::vector<Tensor>& a) { return F::linear(a[0], a[1]); }, {rnd({2, 3}, 7), rnd({2, 3}, 8)});
  // Only x requires grad (the weight is frozen).
  Tensor w = rnd({2, 3}, 9);
  check_grad([&](const std::vector<Tensor>& a) { return F::linear(a[0], w); }, {rnd({2, 3}, 10)});
}

// CPU f32 takes the fused backward (the bias gradient summed from the weight
// gradient GEMM's packed panels, kernels::gemm_f32_a_sums); it must agree with
// the same gradients computed in f64 by the plain ops.
TEST_CASE("linear: f32 weight and bias gradients (fused on the CPU) match f64") {
  for (const Shape& xs : {Shape{37, 20}, Shape{3, 50, 33}}) {
    const int64_t in = xs.back(), out = 29;
    Tensor x64 = rnd(xs, 11), w64 = rnd({out, in}, 12), b64 = rnd({out}, 13);
    Shape ys = xs;
    ys.back() = out;
    Tensor g64 = rnd(ys, 14);
    Tensor x = x64.to(kFloat32), w = w64.to(kFloat32).requires_grad_(true), b = b64.to(kFloat32).requires_grad_(true);
    F::linear(x, w, b).backward(g64.to(kFloat32));
    Tensor wr = w64.clone().requires_grad_(true), br = b64.clone().requires_grad_(true);
    F::linear(x64, wr, br).backward(g64);
    check_approx(w.grad(), vals(wr.grad()), 1e-5);
    check_approx(b.grad(), vals(br.grad()), 1e-5);
    // Without the bias the weight gradient takes the plain GEMM: same values.
    Tensor w2 = w64.to(kFloat32).requires_grad_(true);
    F::linear(x, w2).backward(g64.to(kFloat32));
    check_approx(w2.grad(), vals(wr.grad()), 1e-5);
  }
}

// ---- layer_norm ---------------------------------------------------------------------

namespace {
std::vector<double> naive_layer_norm(const std::vector<double>& x, int64_t C, const std::vector<double>& w,
                                     const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[r * C + c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
    var /= C;  // biased, as PyTorch
    for (int64_t c = 0; c < C; ++c) {
      double h = (x[r * C + c] - mu) / std::sqrt(var + eps);
      y[r * C + c] = h * (w.empty() ? 1 : w[c]) + (b.empty() ? 0 : b[c]);
    }
  }
  return y;
}
}  // namespace

TEST_CASE("layer_norm: matches a naive computation, affine and not, any leading dims") {
  std::vector<double> xv = {1, 2, 3, 4, -1, 0.5, 8, -3, 0, 0, 0, 1e-3};  // (3, 4) / (3, 2, 2)... rows of 4
  std::vector<double> wv = {1, 2, -1, 0.5}, bv = {0, 1, -2, 0.25};
  Tensor y = F::layer_norm(make(xv, {3, 4}), make(wv, {4}), make(bv, {4}));
  check_approx(y, naive_layer_norm(xv, 4, wv, bv, 1e-5), 1e-4);
  Tensor y3 = F::layer_norm(make(xv, {1, 3, 4}, kFloat64), Tensor(), Tensor(), 1e-3);
  CHECK(y3.shape() == Shape{1, 3, 4});
  CHECK(y3.dtype() == kFloat64);
  check_approx(y3, naive_layer_norm(xv, 4, {}, {}, 1e-3), 1e-9);
  // Rows normalised: mean 0, biased var 1 (up to eps).
  auto v = F::layer_norm(make({10, 20, 30}, {1, 3}), Tensor(), Tensor(), 0).to_vector<double>();
  CHECK(v[0] + v[1] + v[2] == doctest::Approx(0).scale(1));
  CHECK((v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) / 3 == doctest::Approx(1));
  CHECK_THROWS_AS(F::layer_norm(zeros({2, 4}), zeros({3}), Tensor()), ShapeError);
  CHECK_THROWS_AS(F::layer_norm(zeros({2, 4}, kInt64), Tensor(), Tensor()), DTypeError);
}

// The f32 rows run each level's vector bodies (AVX-512, AVX2, NEON: NOTE [
// Layer norm rows in AVX-512 ] and its twins) and their tails: widths below,
// at and past one vector and one unrolled block; f64 takes the plain loops.
TEST_CASE("layer_norm: f32 rows (vector bodies and tails) match f64, forward and backward, affine or not") {
  for (int64_t C : {1, 3, 4, 7, 8, 16, 19, 37, 64, 128, 131}) {
    for (bool affine : {true, false}) {
      CAPTURE(C);
      CAPTURE(affine);
      const Tensor x64 = rnd({33, C}, 21 + uint64_t(C)) * 3.0 + 0.5, g64 = rnd({33, C}, 22 + uint64_t(C));
      const Tensor w64 = rnd({C}, 23), b64 = rnd({C}, 24);
      auto run = [&](DType dt, Tensor& gx, Tensor& gw, Tensor& gb) {
        Tensor x = x64.to(dt).requires_grad_(true);
        Tensor w = affine ? w64.to(dt).requires_grad_(true) : Tensor();
        Tensor b = affine ? b64.to(dt).requires_grad_(true) : Tensor();
        Tensor y = F::layer_norm(x, w, b);
        y.backward(g64.to(dt));
        gx = x.grad().to(kFloat64);
        if (affine) gw = w.grad().to(kFloat64), gb = b.grad().to(kFloat64);
        return y.detach().to(kFloat64);
      };
      Tensor gx32, gw32, gb32, gx64, gw64, gb64;
      const Tensor y32 = run(kFloat32, gx32, gw32, gb32), y64 = run(kFloat64, gx64, gw64, gb64);
      CHECK(testing::max_abs_diff(y32, y64) <= 1e-5 * std::max(1.0, testing::max_abs(y64)));
      CHECK(testing::max_abs_diff(gx32, gx64) <= 1e-4 * std::max(1.0, testing::max_abs(gx64)));
      if (affine) {
        CHECK(testing::max_abs_diff(gw32, gw64) <= 1e-4 * std::max(1.0, testing::max_abs(gw64)));
        CHECK(testing::max_abs_diff(gb32, gb64) <= 1e-4 * std::max(1.0, testing::max_abs(gb64)));
      }
    }
  }
}

TEST_CASE("layer_norm: gradcheck of x, weight and bias; and without affine") {
  check_grad([](const std::vector<Tensor>& a) { return F::layer_norm(a[0], a[1], a[2]); },
             {rnd({3, 5}, 11), rnd({5}, 12), rnd({5}, 13)});
  check_grad([](const std::vector<Tensor>& a) { return F::layer_norm(a[0], Tensor(), Tensor()); },
             {rnd({2, 2, 4}, 14)});
  check_grad([](const std::vector<Tensor>& a) { return F::layer_norm(a[0], a[1], Tensor()); },
             {rnd({2, 3}, 15), rnd({3}, 16)});
}

// ---- add_layer_norm ------------------------------------------------------------------

TEST_CASE("add_layer_norm: the values and gradients of x + r then layer_norm, bit for bit; gradcheck") {
  for (DType dt : {kFloat32, kBFloat16}) {
    CAPTURE(std::string(dtype_name(dt)));
    const Tensor x0 = (rnd({3, 5, 24}, 41) * 2.0).to(dt), r0 = rnd({3, 5, 24}, 42).to(dt);
    const Tensor w0 = rnd({24}, 43), b0 = rnd({24}, 44), gh0 = rnd({3, 5, 24}, 45).to(dt),
                 gy0 = rnd({3, 5, 24}, 46).to(dt);
    auto run = [&](bool fused) {
      Tensor x = x0.detach().requires_grad_(), r = r0.detach().requires_grad_();
      Tensor w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
      Tensor h, y;
      if (fused) {
        auto hy = F::add_layer_norm(x, r, w, b, 1e-5);
        h = hy[0], y = hy[1];
      } else {
        h = x + r;
        y = F::layer_norm(h, w, b, 1e-5);
      }
      // h is used again (the block's second residual), y goes on.
      sum(mul(h, gh0) + mul(y, gy0)).backward();
      return std::vector<Tensor>{h, y, x.grad(), r.grad(), w.grad(), b.grad()};
    };
    const auto fused = run(true), plain = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(fused[i].dtype() == plain[i].dtype());
      CHECK(fused[i].to_vector<double>() == plain[i].to_vector<double>());
    }
  }
  check_grad(
      [](const std::vector<Tensor>& a) {
        auto hy = F::add_layer_norm(a[0], a[1], a[2], a[3]);
        return hy[0] * 0.5 + hy[1];
      },
      {rnd({4, 6}, 51), rnd({4, 6}, 52), rnd({6}, 53), rnd({6}, 54)});
  // Only y used (a post-norm block), no affine.
  check_grad([](const std::vector<Tensor>& a) { return F::add_layer_norm(a[0], a[1], Tensor(), Tensor())[1]; },
             {rnd({3, 5}, 55), rnd({3, 5}, 56)});
  // Broadcasting r: the two ops.
  auto hy = F::add_layer_norm(rnd({2, 3, 4}, 57), rnd({4}, 58), Tensor(), Tensor());
  CHECK(hy[0].shape() == Shape{2, 3, 4});
  CHECK_THROWS_AS(F::add_layer_norm(zeros({2, 4}), zeros({2, 4}), zeros({3}), Tensor()), ShapeError);
}

// ---- embedding ------------------------------------------------------------------------

TEST_CASE("embedding: picks rows, any index shape, out-of-range is an IndexError") {
  Tensor w = make({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor i2 = from_vector<int64_t>({3, 0, 1, 1, 2, 3}, {2, 3}, TensorOptions(kInt64));
  Tensor y = F::embedding(i2, w);
  CHECK(y.shape() == Shape{2, 3, 2});
  check_approx(y, {30, 31, 0, 1, 10, 11, 10, 11, 20, 21, 30, 31});
  check_approx(F::embedding(from_vector<int32_t>({2}, {1}, TensorOptions(kInt32)), w), {20, 21});
  std::string m = error_of<IndexError>([&] { F::embedding(idx({0, 4}), w); });
  CHECK(m.find("4") != std::string::npos);
  CHECK_THROWS_AS(F::embedding(idx({-1}), w), IndexError);
  CHECK_THROWS_AS(F::embedding(make({1}, {1}), w), DTypeError);
  CHECK_THROWS_AS(F::embedding(idx({0}), zeros({4})), ShapeError);
}

TEST_CASE("embedding: gradient accumulates repeated indices; gradcheck") {
  Tensor w = zeros({3, 2}).requires_grad_(true);
  Tensor i = idx({2, 0, 2, 2});
  Tensor y = F::embedding(i, w);
  // weight each output row by its position + 1.
  Tensor g = make({1, 1, 2, 2, 3, 3, 4, 4}, {4, 2});
  sum(y * g).backward();
  check_approx(w.grad(), {2, 2, 0, 0, 1 + 3 + 4, 1 + 3 + 4});
  check_grad([&](const std::vector<Tensor>& a) { return F::embedding(i, a[0]); }, {rnd({3, 2}, 17)});
  Tensor i2 = from_vector<int64_t>({1, 1, 0, 1}, {2, 2}, TensorOptions(kInt64));
  check_grad([&](const std::vector<Tensor>& a) { return F::embedding(i2, a[0]); }, {rnd({2, 3}, 18)});
}

// ---- cross_entropy ------------------------------------------------------------------

TEST_CASE("cross_entropy: hand-computed on 2x3 logits, reductions") {
  // Row 0: logits (1, 2, 3), target 2: loss = lse - 3, lse = 3 + log(1 + e^-1 + e^-2)
  // Row 1: logits (0, 0, 0), target 0: loss = log 3
  double l0 = std::log(1 + std::exp(-1.0) + std::exp(-2.0)), l1 = std::log(3.0);
  Tensor x = make({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor t = idx({2, 0});
  CHECK(F::cross_entropy(x, t).item() == doctest::Approx((l0 + l1) / 2));
  CHECK(F::cross_entropy(x, t, -100, 0, Reduction::sum).item() == doctest::Approx(l0 + l1));
  Tensor none = F::cross_entropy(x, t, -100, 0, Reduction::none);
  CHECK(none.shape() == Shape{2});
  check_approx(none, {l0, l1});
  CHECK(F::cross_entropy(x.to(kFloat64), t).dtype() == kFloat64);
}

TEST_CASE("cross_entropy: ignore_index and label smoothing") {
  Tensor x = make({1, 2, 3, 0, 0, 0, 5, -5, 0}, {3, 3});
  std::vector<std::vector<double>> rows = {{1, 2, 3}, {0, 0, 0}, {5, -5, 0}};
  std::vector<int64_t> tv = {2, -100, 1};
  // Mean over the two kept rows only.
  auto nll = [&](int r, int c) { return lse(rows[r]) - rows[r][c]; };
  CHECK(F::cross_entropy(x, idx(tv)).item() == doctest::Approx((nll(0, 2) + nll(2, 1)) / 2));
  check_approx(F::cross_entropy(x, idx(tv), -100, 0, Reduction::none), {nll(0, 2), 0, nll(2, 1)});
  // A custom ignore_index.
  CHECK(F::cross_entropy(x, idx({2, 7, 1}), 7).item() == doctest::Approx((nll(0, 2) + nll(2, 1)) / 2));
  // Smoothing 0.3: (1 - 0.3) * nll + 0.3 * mean_c nll_c
  const double e = 0.3;
  auto smooth = [&](int r, int c) {
    double m = 0;
    for (int k = 0; k < 3; ++k) m += nll(r, k);
    return (1 - e) * nll(r, c) + e * m / 3;
  };
  CHECK(F::cross_entropy(x, idx(tv), -100, e).item() == doctest::Approx((smooth(0, 2) + smooth(2, 1)) / 2));
  CHECK(F::cross_entropy(x, idx(tv), -100, e, Reduction::sum).item() == doctest::Approx(smooth(0, 2) + smooth(2, 1)));
  // Extreme logits stay finite.
  Tensor big = make({1000, -1000, 0, 0}, {2, 2});
  double v = F::cross_entropy(big, idx({1, 0})).item();
  CHECK(v == doctest::Approx((2000 + std::log(2.0)) / 2));
}

TEST_CASE("cross_entropy: gradcheck with reductions, ignore and smoothing") {
  Tensor t = idx({2, 0, 1, 2});
  Tensor ti = idx({2, -100, 1, -100});
  Tensor x = rnd({4, 3}, 19);
  for (auto red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    check_grad([&](const std::vector<Tensor>& a) { return F::cross_entropy(a[0], t, -100, 0, red); }, {x});
    check_grad([&](const std::vector<Tensor>& a) { return F::cross_entropy(a[0], ti, -100, 0, red); }, {x});
    check_grad([&](const std::vector<Tensor>& a) { return F::cross_entropy(a[0], ti, -100, 0.2, red); }, {x});
  }
  // The gradient of the ignored rows is exactly zero.
  Tensor xl = rnd({4, 3}, 20).requires_grad_(true);
  F::cross_entropy(xl, ti, -100, 0.1).backward();
  auto g = xl.grad().to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    CHECK(g[3 + c] == 0.0);
    CHECK(g[9 + c] == 0.0);
  }
}

TEST_CASE("cross_entropy: errors for bad shapes, dtypes, targets, smoothing") {
  Tensor x = zeros({2, 3});
  std::string m = error_of<ShapeError>([&] { F::cross_entropy(zeros({2, 3, 4}), idx({0, 1})); });
  CHECK(m.find("[2, 3, 4]") != std::string::npos);
  m = error_of<ShapeError>([&] { F::cross_entropy(x, idx({0, 1, 2})); });
  CHECK(m.find("[3]") != std::string::npos);
  m = error_of<DTypeError>([&] { F::cross_entropy(x, make({0, 1}, {2})); });
  CHECK(m.find("i64") != std::string::npos);
  m = error_of<IndexError>([&] { F::cross_entropy(x, idx({0, 3})); });
  CHECK(m.find("target[1] = 3") != std::string::npos);
  CHECK(m.find("3 classes") != std::string::npos);
  m = error_of<IndexError>([&] { F::cross_entropy(x, idx({-1, 0})); });
  CHECK(m.find("target[0] = -1") != std::string::npos);
  CHECK_THROWS_AS(F::cross_entropy(x, idx({0, 1}), -100, 1.0), ValueError);
  CHECK_THROWS_AS(F::cross_entropy(x, idx({0, 1}), -100, -0.1), ValueError);
}

// ---- nll, mse, bce --------------------------------------------------------------------

TEST_CASE("nll_loss: values, ignore_index, reductions, gradient") {
  Tensor lp = make({-0.5, -1, -2, -3, -0.25, -4}, {2, 3});
  CHECK(F::nll_loss(lp, idx({1, 2})).item() == doctest::Approx((1 + 4) / 2.0));
  CHECK(F::nll_loss(lp, idx({1, -100})).item() == doctest::Approx(1));
  CHECK(F::nll_loss(lp, idx({0, 1}), -100, Reduction::sum).item() == doctest::Approx(0.75));
  check_approx(F::nll_loss(lp, idx({2, -100}), -100, Reduction::none), {2, 0});
  // It equals cross_entropy applied to log_softmax.
  Tensor x = rnd({3, 4}, 21, kFloat32);
  CHECK(F::nll_loss(log_softmax(x, 1), idx({3, 0, 1})).item() ==
        doctest::Approx(F::cross_entropy(x, idx({3, 0, 1})).item()).epsilon(1e-5));
  check_grad([](const std::vector<Tensor>& a) { return F::nll_loss(a[0], idx({2, -100, 0})); }, {rnd({3, 3}, 22)});
  CHECK_THROWS_AS(F::nll_loss(lp, idx({0, 3})), IndexError);
  CHECK_THROWS_AS(F::nll_loss(lp, make({0, 1}, {2})), DTypeError);
  CHECK_THROWS_AS(F::nll_loss(lp, idx({0})), ShapeError);
}

TEST_CASE("mse_loss: values, reductions, gradient, shape error") {
  Tensor a = make({1, 2, 3, 4}, {2, 2}), b = make({0, 2, 5, 3}, {2, 2});
  CHECK(F::mse_loss(a, b).item() == doctest::Approx((1 + 0 + 4 + 1) / 4.0));
  CHECK(F::mse_loss(a, b, Reduction::sum).item() == doctest::Approx(6));
  check_approx(F::mse_loss(a, b, Reduction::none), {1, 0, 4, 1});
  check_grad([](const std::vector<Tensor>& t) { return F::mse_loss(t[0], t[1]); }, {rnd({2, 3}, 23), rnd({2, 3}, 24)});
  CHECK_THROWS_AS(F::mse_loss(a, zeros({4})), ShapeError);
}

TEST_CASE("binary_cross_entropy_with_logits: values, stability at large |x|, gradcheck") {
  std::vector<double> xv = {0.5, -1, 2, 0, 100, -100, 100, -100}, tv = {1, 0, 0.3, 1, 0, 0, 1, 1};
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) {
    double x = xv[i], t = tv[i];
    // -t log(sigmoid(x)) - (1 - t) log(1 - sigmoid(x)), written with log1p for the tails
    double log_sig = x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
    double log_1msig = x >= 0 ? -x - std::log1p(std::exp(-x)) : -std::log1p(std::exp(x));
    want.push_back(-t * log_sig - (1 - t) * log_1msig);
  }
  Tensor x = make(xv, {8}), t = make(tv, {8});
  Tensor l = F::binary_cross_entropy_with_logits(x, t, Reduction::none);
  check_approx(l, want, 1e-5);
  for (double v : l.to_vector<double>()) CHECK(std::isfinite(v));
  double s = 0;
  for (double w : want) s += w;
  CHECK(F::binary_cross_entropy_with_logits(x, t).item() == doctest::Approx(s / 8));
  CHECK(F::binary_cross_entropy_with_logits(x, t, Reduction::sum).item() == doctest::Approx(s));
  check_grad([](const std::vector<Tensor>& a) { return F::binary_cross_entropy_with_logits(a[0], a[1]); },
             {rnd({5}, 25), rand({5}, TensorOptions(kFloat64))});
  check_grad(
      [](const std::vector<Tensor>& a) { return F::binary_cross_entropy_with_logits(a[0], a[1], Reduction::none); },
      {make({30, -30, 0.1}, {3}, kFloat64), make({0.2, 0.9, 1}, {3}, kFloat64)});
  CHECK_THROWS_AS(F::binary_cross_entropy_with_logits(x, zeros({7})), ShapeError);
}

// ---- attention -------------------------------------------------------------------------

namespace {
// softmax(scale * x) over the last dim of (rows x Tk) with query i seeing j <= i + Tk - Tq.
std::vector<double> naive_causal_softmax(const std::vector<double>& x, int64_t Tq, int64_t Tk, double scale,
                                         const std::vector<bool>& blocked = {}) {
  std::vector<double> y(x.size(), 0.0);
  for (size_t r = 0; r < x.size() / Tk; ++r) {
    int64_t i = r % Tq;
    std::vector<int64_t> vis;
    for (int64_t j = 0; j < Tk; ++j)
      if (j <= i + Tk - Tq && (blocked.empty() || !blocked[i * Tk + j])) vis.push_back(j);
    double m = -INFINITY, s = 0;
    for (auto j : vis) m = std::max(m, scale * x[r * Tk + j]);
    for (auto j : vis) s += std::exp(scale * x[r * Tk + j] - m);
    for (auto j : vis) y[r * Tk + j] = std::exp(scale * x[r * Tk + j] - m) / s;
  }
  return y;
}
}  // namespace

TEST_CASE("causal_softmax: masked entries exactly 0, rows sum to 1, values") {
  Tensor x = rnd({2, 4, 4}, 26, kFloat32);
  Tensor y = F::causal_softmax(x, 0.7);
  auto yv = y.to_vector<double>();
  auto want = naive_causal_softmax(x.to_vector<double>(), 4, 4, 0.7);
  check_approx(y, want, 1e-5);
  for (int r = 0; r < 8; ++r) {
    int i = r % 4;
    double s = 0;
    for (int j = 0; j < 4; ++j) {
      if (j > i) CHECK(yv[r * 4 + j] == 0.0);  // exactly
      s += yv[r * 4 + j];
    }
    CHECK(s == doctest::Approx(1).epsilon(1e-6));
  }
  // Row 0 sees only key 0.
  CHECK(yv[0] == 1.0);
  CHECK_THROWS_AS(F::causal_softmax(zeros({3}), 1), ShapeError);
  CHECK_THROWS_AS(F::causal_softmax(zeros({2, 2}, kInt64), 1), DTypeError);
}

TEST_CASE("causal_softmax: Tq != Tk is aligned to the end (query i sees j <= i + Tk - Tq)") {
  Tensor x = rnd({2, 5}, 27);
  auto yv = F::causal_softmax(x, 1.0).to_vector<double>();
  check_approx(F::causal_softmax(x, 1.0), naive_causal_softmax(x.to_vector<double>(), 2, 5, 1.0), 1e-12);
  // Query 0 sees keys 0..3, query 1 sees all 5.
  CHECK(yv[4] == 0.0);
  CHECK(yv[3] > 0.0);
  CHECK(yv[9] > 0.0);
}

// The rows share softmax's formulas (core/softmax_math.h): a NaN in a visible
// column makes that row's visible part NaN in every dtype, as softmax does;
// masked entries stay 0 and the other rows are untouched.
TEST_CASE("causal_softmax: a visible NaN makes its row NaN, in every floating dtype") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    std::vector<double> v = rnd({3, 3}, 31).to_vector<double>();
    v[2 * 3 + 1] = std::nan("");  // row 2 sees columns 0..2
    const auto y = F::causal_softmax(make(v, {3, 3}, dt), 0.9).to_vector<double>();
    for (int j = 0; j < 3; ++j) CHECK(std::isnan(y[2 * 3 + j]));
    CHECK(y[0] == 1.0);
    CHECK(y[1] == 0.0);
    CHECK(y[2] == 0.0);
    CHECK(y[3] + y[4] == doctest::Approx(1).epsilon(1e-2));
    CHECK(y[5] == 0.0);
  }
}

TEST_CASE("causal_softmax: gradcheck, square and offset") {
  check_grad([](const std::vector<Tensor>& a) { return F::causal_softmax(a[0], 0.5); }, {rnd({2, 3, 3}, 28)});
  check_grad([](const std::vector<Tensor>& a) { return F::causal_softmax(a[0], 1.3); }, {rnd({2, 4}, 29)});
}

namespace {
// q (Tq, D), k (Tk, D), v (Tk, Dv) for one (b, h); returns (Tq, Dv).
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                                    bool causal, const std::vector<bool>& blocked = {}) {
  std::vector<double> s(Tq * Tk);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) {
      double d = 0;
      for (int64_t c = 0; c < D; ++c) d += q[i * D + c] * k[j * D + c];
      s[i * Tk + j] = d;
    }
  std::vector<double> p;
  if (causal) {
    p = naive_causal_softmax(s, Tq, Tk, 1 / std::sqrt(double(D)), blocked);
  } else {
    // Non-causal: pass an offset so every key is visible.
    std::vector<bool> b = blocked;
    p.assign(Tq * Tk, 0.0);
    for (int64_t i = 0; i < Tq; ++i) {
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < Tk; ++j)
        if (b.empty() || !b[i * Tk + j]) m = std::max(m, s[i * Tk + j] / std::sqrt(double(D)));
      for (int64_t j = 0; j < Tk; ++j)
        if (b.empty() || !b[i * Tk + j]) z += std::exp(s[i * Tk + j] / std::sqrt(double(D)) - m);
      for (int64_t j = 0; j < Tk; ++j)
        if (b.empty() || !b[i * Tk + j]) p[i * Tk + j] = std::exp(s[i * Tk + j] / std::sqrt(double(D)) - m) / z;
    }
  }
  std::vector<double> o(Tq * Dv, 0.0);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t c = 0; c < Dv; ++c) o[i * Dv + c] += p[i * Tk + j] * v[j * Dv + c];
  return o;
}
std::vector<double> slice_bh(const Tensor& t, int64_t b, int64_t h) {
  return t.select(0, b).select(0, h).contiguous().to_vector<double>();
}
}  // namespace

TEST_CASE("scaled_dot_product_attention: causal and not, vs naive attention, Tq != Tk") {
  const int64_t B = 2, H = 2, D = 3;
  for (auto [Tq, Tk] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {2, 5}}) {
    Tensor q = rnd({B, H, Tq, D}, 30), k = rnd({B, H, Tk, D}, 31), v = rnd({B, H, Tk, D}, 32);
    for (bool causal : {true, false}) {
      Tensor o = F::scaled_dot_product_attention(q, k, v, causal);
      CHECK(o.shape() == Shape{B, H, Tq, D});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t tq = Tq, tk = Tk;  // clang 14 cannot capture structured bindings
          INFO("Tq ", tq, " Tk ", tk, " causal ", causal, " b ", b, " h ", h);
          check_approx(o.select(0, b).select(0, h),
                       naive_attention(slice_bh(q, b, h), slice_bh(k, b, h), slice_bh(v, b, h), Tq, Tk, D, D, causal),
                       1e-10);
        }
    }
  }
}

TEST_CASE("scaled_dot_product_attention: a bool mask (true = blocked), alone and with causal") {
  const int64_t Tq = 3, Tk = 3, D = 2;
  std::vector<bool> blocked = {false, true, false, false, false, true, true, false, false};
  std::vector<uint8_t> mb(blocked.begin(), blocked.end());
  Tensor mask = from_vector<uint8_t>(mb, {Tq, Tk}, TensorOptions(kBool));
  Tensor q = rnd({1, 2, Tq, D}, 33), k = rnd({1, 2, Tk, D}, 34), v = rnd({1, 2, Tk, D}, 35);
  for (bool causal : {false, true}) {
    Tensor o = F::scaled_dot_product_attention(q, k, v, causal, mask);
    for (int64_t h = 0; h < 2; ++h) {
      INFO("causal ", causal, " h ", h);
      check_approx(
          o.select(0, 0).select(0, h),
          naive_attention(slice_bh(q, 0, h), slice_bh(k, 0, h), slice_bh(v, 0, h), Tq, Tk, D, D, causal, blocked),
          1e-10);
    }
  }
  // Shape errors.
  CHECK_THROWS_AS(F::scaled_dot_product_attention(q, rnd({1, 2, Tk, D + 1}, 1), v), ShapeError);
  CHECK_THROWS_AS(F::scaled_dot_product_attention(q, k, rnd({1, 2, Tk + 1, D}, 1)), ShapeError);
}

TEST_CASE("scaled_dot_product_attention: runs on a virtual device with a mask and causal") {
  Tensor q = rnd({1, 1, 2, 2}, 36).to("cpu:1"), k = rnd({1, 1, 3, 2}, 37).to("cpu:1"),
         v = rnd({1, 1, 3, 2}, 38).to("cpu:1");
  Tensor mask = zeros({2, 3}, TensorOptions(kBool, Device("cpu:1")));
  Tensor o = F::scaled_dot_product_attention(q, k, v, true, mask);
  CHECK(o.device() == Device("cpu:1"));
  Tensor ref = F::scaled_dot_product_attention(q.to(kCPU), k.to(kCPU), v.to(kCPU), true);
  check_approx(o.to(kCPU), ref.to_vector<double>(), 1e-12);
}

TEST_CASE("scaled_dot_product_attention: gradcheck of q, k, v") {
  check_grad([](const std::vector<Tensor>& a) { return F::scaled_dot_product_attention(a[0], a[1], a[2], true); },
             {rnd({1, 2, 3, 2}, 39), rnd({1, 2, 3, 2}, 40), rnd({1, 2, 3, 2}, 41)});
  check_grad([](const std::vector<Tensor>& a) { return F::scaled_dot_product_attention(a[0], a[1], a[2], false); },
             {rnd({1, 1, 2, 2}, 42), rnd({1, 1, 3, 2}, 43), rnd({1, 1, 3, 2}, 44)});
  Tensor mask = from_vector<uint8_t>({0, 1, 0, 0, 0, 1}, {2, 3}, TensorOptions(kBool));
  check_grad(
      [&](const std::vector<Tensor>& a) { return F::scaled_dot_product_attention(a[0], a[1], a[2], true, mask); },
      {rnd({1, 1, 2, 2}, 45), rnd({1, 1, 3, 2}, 46), rnd({1, 1, 3, 2}, 47)});
}

TEST_CASE("layer_norm: f32 rows of any width agree with f64, forward and backward") {
  // The f32 rows have their own vector code (NOTE [ Layer norm rows in AVX-512 ]):
  // widths below, at and past one vector and one 64-float chunk, with and
  // without the affine parameters, on one and two threads.
  for (int64_t C : {5, 16, 37, 64, 100, 128}) {  // (C = 1 is ill-conditioned: rstd = 1/sqrt(eps))
    for (int affine = 0; affine < 3; ++affine) {
      Tensor x64 = rnd({67, C}, uint32_t(40 + C)) * 3.0 + 0.5;
      Tensor w64 = rnd({C}, uint32_t(41 + C)), b64 = rnd({C}, uint32_t(42 + C)), g64 = rnd({67, C}, uint32_t(43 + C));
      Tensor w = affine ? w64 : Tensor(), b = affine == 2 ? b64 : Tensor();
      auto run = [&](DType dt) {
        auto leaf = [&](const Tensor& t) { return t.to(dt).clone().requires_grad_(true); };  // a fresh leaf
        Tensor xr = leaf(x64);
        Tensor wr = w.defined() ? leaf(w) : Tensor();
        Tensor br = b.defined() ? leaf(b) : Tensor();
        Tensor y = F::layer_norm(xr, wr, br);
        y.backward(g64.to(dt));
        return std::vector<Tensor>{y, xr.grad(), wr.defined() ? wr.grad() : Tensor(),
                                   br.defined() ? br.grad() : Tensor()};
      };
      auto ref = run(kFloat64), got = run(kFloat32);
      INFO("C=", C, " affine=", affine);
      for (size_t i = 0; i < ref.size(); ++i) {
        if (!ref[i].defined()) continue;
        check_approx(got[i], vals(ref[i]), 2e-5);
      }
    }
  }
}
