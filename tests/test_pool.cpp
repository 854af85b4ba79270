// SPDX-License-Identifier: MIT
// Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d values worked out by
// hand, gradients by hand and by finite differences, modules and errors.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/functional.h>
#include <snug/nn/pool.h>

using namespace snug;
namespace F = snug::nn::functional;

namespace {

// The 4x4 plane
//    1  2  3  4
//    5  6  7  8
//    9 10 11 12
//   13 14 15 16
Tensor plane4() {
  std::vector<double> v;
  for (int i = 1; i <= 16; ++i) v.push_back(i);
  return from_vector<double>(v, {1, 1, 4, 4}, DType::f32);
}

void check_vals(const Tensor& t, const std::vector<double>& want) {
  auto got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
}

void grad_ok(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const Tensor& x) {
  auto r = autograd::gradcheck(fn, {x});
  INFO(r.message);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("max_pool2d values and argmax gradient") {
  Tensor x = plane4().requires_grad_();
  Tensor y = F::max_pool2d(x, {2, 2});
  check_vals(y, {6, 8, 14, 16});
  y.sum().backward();
  check_vals(x.grad(), {0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1});

  // Overlapping windows (k 3, s 1): the max of each 3x3 block, each winner gets its gradient.
  Tensor x2 = plane4().requires_grad_();
  Tensor y2 = F::max_pool2d(x2, {3, 3}, {1, 1});
  check_vals(y2, {11, 12, 15, 16});
  y2.sum().backward();
  check_vals(x2.grad(), {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1});

  // Padding never wins: (k 2, s 2, p 1) windows are {1}, {2,3}, {4}, ...
  Tensor y3 = F::max_pool2d(plane4() - 100.0, {2, 2}, {2, 2}, {1, 1});
  check_vals(y3, {-99, -97, -96, -91, -89, -88, -87, -85, -84});
}

TEST_CASE("max_pool2d ties take the first maximum; NaN propagates") {
  Tensor x = ones({1, 1, 2, 2}).requires_grad_();
  F::max_pool2d(x, {2, 2}).sum().backward();
  check_vals(x.grad(), {1, 0, 0, 0});
  Tensor n = from_vector<double>({1, std::nan(""), 3, 2}, {1, 1, 2, 2}, DType::f32);
  CHECK(std::isnan(F::max_pool2d(n, {2, 2}).item()));
}

TEST_CASE("max_pool2d without a backward to come keeps no indices, with the same values") {
  // Whole windows (the fast path) and padded ones (the general loop), with NaNs.
  manual_seed(3);
  Tensor x = randn({2, 3, 9, 10});
  x.narrow(2, 4, 1).narrow(3, 3, 1).fill_(std::nan(""));
  struct Case {
    std::array<int64_t, 2> k, s, p;
  };
  for (const Case& c : {Case{{2, 2}, {2, 2}, {0, 0}}, Case{{3, 2}, {2, 1}, {1, 1}}}) {
    Tensor xs = x.detach().requires_grad_();
    const Tensor with_grad = F::max_pool2d(xs, c.k, c.s, c.p).detach();
    Tensor plain;
    {
      NoGradGuard ng;
      plain = F::max_pool2d(x, c.k, c.s, c.p);
    }
    REQUIRE(plain.shape() == with_grad.shape());
    const auto a = plain.to_vector<float>(), b = with_grad.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) CHECK((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));
  }
}

TEST_CASE("max_pool2d: the whole-window fast path equals a plain scan (ties, NaN, strides, overlaps)") {
  // Small integers make ties common; a few NaNs; several window shapes that
  // take the fast path (no clipped window) and one with padding that does not.
  // Widths 13 and 37: one partial 16-column chunk of outputs, and several
  // (the f32 AVX-512 row kernel works 16 output columns at a time).
  Generator g(21);
  for (const int64_t W : {13, 37}) {
    CAPTURE(W);
    const int64_t H = 11;
    Tensor x = randint(0, 4, Shape{2, 3, H, W}, DType::i64, &g).to(DType::f32);
    std::vector<double> xv = x.to_vector<double>();
    for (size_t i = 5; i < xv.size(); i += 97) xv[i] = std::nan("");
    x = from_vector<double>(xv, {2, 3, H, W}, DType::f32);
    struct Case {
      int64_t k0, k1, s0, s1, p;
    };
    for (Case c :
         {Case{2, 2, 2, 2, 0}, Case{3, 3, 1, 1, 0}, Case{3, 2, 2, 3, 0}, Case{2, 3, 2, 2, 1}, Case{1, 3, 1, 2, 0}}) {
      CAPTURE(c.k0);
      CAPTURE(c.s1);
      CAPTURE(c.p);
      Tensor xr = x.clone().requires_grad_();
      Tensor y = F::max_pool2d(xr, {c.k0, c.k1}, {c.s0, c.s1}, {c.p, c.p});
      const int64_t Ho = y.size(2), Wo = y.size(3);
      // Gradient 1 per output shows where each argmax went.
      y.sum().backward();
      std::vector<double> got = y.to_vector<double>(), gx = xr.grad().to_vector<double>();
      std::vector<double> want_gx(xv.size(), 0.0);
      for (int64_t pl = 0; pl < 6; ++pl)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            double best = -INFINITY;
            int64_t arg = -1;
            for (int64_t h = oh * c.s0 - c.p; h < oh * c.s0 - c.p + c.k0; ++h)
              for (int64_t w = ow * c.s1 - c.p; w < ow * c.s1 - c.p + c.k1; ++w) {
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const double v = xv[size_t(pl * H * W + h * W + w)];
                if (arg < 0 || v > best || v != v) best = v, arg = h * W + w;
              }
            const double o = got[size_t(pl * Ho * Wo + oh * Wo + ow)];
            if (std::isnan(best))
              CHECK(std::isnan(o));
            else
              CHECK(o == best);
            want_gx[size_t(pl * H * W + arg)] += 1.0;
          }
      CHECK(gx == want_gx);
    }
  }
}

TEST_CASE("avg_pool2d values, count_include_pad, gradient") {
  Tensor x = plane4().requires_grad_();
  Tensor y = F::avg_pool2d(x, {2, 2});
  check_vals(y, {3.5, 5.5, 11.5, 13.5});
  y.sum().backward();
  check_vals(x.grad(), std::vector<double>(16, 0.25));
  // Padding 1, kernel 2, stride 2: the corner window holds 1 real value and 3 pads; divisor is 4.
  Tensor yp = F::avg_pool2d(plane4(), {2, 2}, {2, 2}, {1, 1});
  check_vals(yp, {1 / 4.0, (2 + 3) / 4.0, 4 / 4.0, (5 + 9) / 4.0, (6 + 7 + 10 + 11) / 4.0, (8 + 12) / 4.0, 13 / 4.0,
                  (14 + 15) / 4.0, 16 / 4.0});
  // Kernel 3, stride 2, padding 1 on 4x4: the windows end at the padded edge (rows -1..1 and 1..3).
  Tensor y3 = F::avg_pool2d(plane4(), {3, 3}, {2, 2}, {1, 1});
  check_vals(y3, {(1 + 2 + 5 + 6) / 9.0, (2 + 3 + 4 + 6 + 7 + 8) / 9.0, (5 + 6 + 9 + 10 + 13 + 14) / 9.0,
                  (6 + 7 + 8 + 10 + 11 + 12 + 14 + 15 + 16) / 9.0});
}

TEST_CASE("adaptive_avg_pool2d: global, exact and uneven windows") {
  check_vals(F::adaptive_avg_pool2d(plane4(), {1, 1}), {8.5});
  check_vals(F::adaptive_avg_pool2d(plane4(), {2, 2}), {3.5, 5.5, 11.5, 13.5});
  // 4 -> 3: rows [0,2), [1,3), [2,4) (floor(o*4/3), ceil((o+1)*4/3)).
  Tensor y = F::adaptive_avg_pool2d(plane4(), {3, 1});
  check_vals(y, {(1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) / 8.0, (5 + 6 + 7 + 8 + 9 + 10 + 11 + 12) / 8.0,
                 (9 + 10 + 11 + 12 + 13 + 14 + 15 + 16) / 8.0});
  // Larger output than input repeats values.
  check_vals(F::adaptive_avg_pool2d(from_vector<double>({1, 2}, {1, 1, 1, 2}, DType::f32), {1, 4}), {1, 1, 2, 2});
}

TEST_CASE("pooling gradients match finite differences") {
  Generator gen(5);
  Tensor x = randn({2, 3, 7, 6}, DType::f64, &gen);  // distinct values: max is differentiable
  grad_ok([](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], {3, 2}, {2, 2}, {1, 1}); }, x);
  grad_ok([](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], {2, 2}); }, x);
  grad_ok([](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], {3, 3}, {2, 1}, {1, 1}); }, x);
  grad_ok([](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], {2, 2}); }, x);
  grad_ok([](const std::vector<Tensor>& in) { return F::adaptive_avg_pool2d(in[0], {3, 4}); }, x);
  grad_ok([](const std::vector<Tensor>& in) { return F::adaptive_avg_pool2d(in[0], {1, 1}); }, x);
}

TEST_CASE("pooling keeps f16/bf16 and works on strided input") {
  Tensor x = plane4();
  check_vals(F::max_pool2d(x.to(DType::f16), {2, 2}), {6, 8, 14, 16});
  check_vals(F::avg_pool2d(x.to(DType::bf16), {2, 2}), {3.5, 5.5, 11.5, 13.5});
  CHECK(F::avg_pool2d(x.to(DType::bf16), {2, 2}).dtype() == DType::bf16);
  Tensor t = x.transpose(2, 3);  // not contiguous
  check_vals(F::max_pool2d(t, {2, 2}), {6, 14, 8, 16});
}

TEST_CASE("pooling modules") {
  nn::MaxPool2d mp(2);
  CHECK(mp.stride == std::array<int64_t, 2>{2, 2});
  CHECK(mp(randn({2, 3, 9, 8})).shape() == Shape{2, 3, 4, 4});
  nn::AvgPool2d ap(3, 1, 1);
  CHECK(ap(randn({1, 2, 5, 5})).shape() == Shape{1, 2, 5, 5});
  nn::AdaptiveAvgPool2d gp(1);
  CHECK(gp(randn({4, 8, 7, 7})).shape() == Shape{4, 8, 1, 1});
  CHECK(mp.repr() == "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  CHECK(mp.num_parameters() == 0);
}

TEST_CASE("pooling errors") {
  CHECK_THROWS_WITH_AS(F::max_pool2d(randn({3, 4, 4}), {2, 2}), doctest::Contains("expected input (N, C, H, W)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::max_pool2d(randn({1, 1, 4, 4}), {2, 2}, {1, 1}, {2, 2}),
                       doctest::Contains("padding must be between 0 and half the kernel size"), ValueError);
  CHECK_THROWS_WITH_AS(F::avg_pool2d(randn({1, 1, 2, 2}), {3, 3}), doctest::Contains("smaller than the kernel"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::avg_pool2d(randn({1, 1, 4, 4}), {0, 2}), doctest::Contains("kernel size must be >= 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(F::adaptive_avg_pool2d(randn({1, 1, 4, 4}), {0, 1}),
                       doctest::Contains("output size must be >= 1"), ValueError);
  CHECK_THROWS_WITH_AS(F::max_pool2d(ones({1, 1, 4, 4}, DType::i64), {2, 2}),
                       doctest::Contains("expected a floating input"), DTypeError);
  CHECK_THROWS_AS(nn::MaxPool2d(2, 2, 2), ValueError);
}
