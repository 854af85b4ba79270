// SPDX-License-Identifier: MIT
// conv2d: forward against a direct loop over many geometries (stride,
// padding, dilation, groups, depthwise, pointwise), dtypes, gradients by
// finite differences, the Conv2d module, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
namespace F = snug::nn::functional;

namespace {

struct Cfg {
  int64_t N, C, H, W, Cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
};

// The definition, in double: y[n,co,oh,ow] = b[co] + sum w[co,c,i,j] x[n, g*Cg + c, oh*sh-ph+i*dh, ow*sw-pw+j*dw]
std::vector<double> direct_conv(const Cfg& c, const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, int64_t Ho, int64_t Wo) {
  const int64_t Cg = c.C / c.groups, Cog = c.Cout / c.groups;
  std::vector<double> y(size_t(c.N * c.Cout * Ho * Wo), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t co = 0; co < c.Cout; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = c.bias ? b[size_t(co)] : 0.0;
          const int64_t g = co / Cog;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t ih = oh * c.sh - c.ph + i * c.dh, iw = ow * c.sw - c.pw + j * c.dw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                s += w[size_t(((co * Cg + ci) * c.kh + i) * c.kw + j)] *
                     x[size_t(((n * c.C + g * Cg + ci) * c.H + ih) * c.W + iw)];
              }
          y[size_t(((n * c.Cout + co) * Ho + oh) * Wo + ow)] = s;
        }
  return y;
}

void check_config(const Cfg& c, DType dt, double tol) {
  Generator gen(uint64_t(c.N * 131 + c.C * 17 + c.kh * 5 + c.groups));
  Tensor x = randn({c.N, c.C, c.H, c.W}, DType::f64, &gen);
  Tensor w = randn({c.Cout, c.C / c.groups, c.kh, c.kw}, DType::f64, &gen);
  Tensor b = randn({c.Cout}, DType::f64, &gen);
  Tensor y =
      F::conv2d(x.to(dt), w.to(dt), c.bias ? b.to(dt) : Tensor(), {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
  const int64_t Ho = (c.H + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
  const int64_t Wo = (c.W + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
  REQUIRE(y.shape() == Shape{c.N, c.Cout, Ho, Wo});
  CHECK(y.dtype() == dt);
  auto want = direct_conv(c, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), Ho, Wo);
  auto got = y.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
  INFO("config N=", c.N, " C=", c.C, " H=", c.H, " W=", c.W, " Cout=", c.Cout, " k=", c.kh, "x", c.kw, " s=", c.sh, ",",
       c.sw, " p=", c.ph, ",", c.pw, " d=", c.dh, ",", c.dw, " g=", c.groups, " dtype=", dtype_name(dt));
  CHECK(worst < tol);
}

const std::vector<Cfg> kConfigs = {
    // N  C  H  W  Cout kh kw sh sw ph pw dh dw g  bias
    {2, 1, 8, 8, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},      // plain
    {1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},      // padding, one image (GEMM threads)
    {3, 4, 9, 8, 6, 3, 2, 2, 1, 1, 0, 1, 1, 1, false},     // stride, non-square kernel, no bias
    {4, 2, 10, 10, 3, 3, 3, 2, 3, 2, 1, 2, 1, 1, true},    // dilation, uneven stride
    {2, 4, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, true},      // groups 2
    {2, 6, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, true},      // depthwise
    {2, 6, 9, 9, 12, 3, 3, 2, 2, 1, 1, 1, 1, 6, false},    // depthwise with multiplier 2, stride 2
    {3, 8, 5, 5, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},     // pointwise (no im2col)
    {2, 8, 5, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 4, true},      // grouped pointwise
    {2, 3, 6, 6, 2, 1, 1, 2, 2, 1, 1, 1, 1, 1, true},      // 1x1 with stride and padding (im2col path)
    {2, 2, 5, 5, 3, 5, 5, 1, 1, 2, 2, 1, 1, 1, true},      // kernel as big as the input
    {2, 2, 4, 4, 3, 3, 3, 1, 1, 3, 3, 1, 1, 1, true},      // padding larger than half the kernel
    {5, 3, 12, 11, 7, 3, 3, 2, 2, 2, 2, 3, 2, 1, true},    // everything at once
    {64, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},  // the W-CNN first layer
};

}  // namespace

TEST_CASE("conv2d forward matches the direct loop (f32 and f64)") {
  for (const Cfg& c : kConfigs) {
    check_config(c, DType::f32, 1e-4);
    check_config(c, DType::f64, 1e-11);
  }
}

TEST_CASE("conv2d in f16 and bf16 computes in f32 and rounds once") {
  check_config(kConfigs[4], DType::f16, 1e-2);
  check_config(kConfigs[4], DType::bf16, 4e-2);
}

TEST_CASE("conv2d accepts strided inputs") {
  Generator gen(3);
  Tensor x = randn({2, 5, 6, 3}, DType::f32, &gen).permute({0, 3, 1, 2});  // (2, 3, 5, 6), not contiguous
  Tensor w = randn({4, 3, 3, 3}, DType::f32, &gen);
  Tensor a = F::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  Tensor b = F::conv2d(x.contiguous(), w, Tensor(), {1, 1}, {1, 1});
  CHECK(max(abs(a - b)).item() == 0.0);
}

TEST_CASE("conv2d gradients match finite differences") {
  Generator gen(7);
  struct G {
    Shape xs, ws;
    std::array<int64_t, 2> s, p, d;
    int64_t groups;
  };
  const std::vector<G> cases = {
      {{2, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1}, {{2, 4, 6, 5}, {4, 2, 3, 2}, {2, 1}, {1, 1}, {1, 1}, 2},
      {{1, 2, 7, 7}, {2, 2, 3, 3}, {2, 2}, {2, 1}, {2, 2}, 1},  // one image: the threaded-GEMM path
      {{3, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},  // depthwise
      {{2, 4, 3, 4}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  // pointwise
  };
  for (const G& c : cases) {
    Tensor x = randn(c.xs, DType::f64, &gen), w = randn(c.ws, DType::f64, &gen);
    Tensor b = randn({c.ws[0]}, DType::f64, &gen);
    check_grad([&](const std::vector<Tensor>& in) { return F::conv2d(in[0], in[1], in[2], c.s, c.p, c.d, c.groups); },
               {x, w, b});
  }
}

TEST_CASE("conv2d backward with only some inputs requiring grad") {
  Generator gen(11);
  Tensor x = randn({2, 2, 5, 5}, DType::f64, &gen), w = randn({3, 2, 3, 3}, DType::f64, &gen);
  Tensor b = randn({3}, DType::f64, &gen);
  // Reference: everything requires grad.
  Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(), br = b.clone().requires_grad_();
  F::conv2d(xr, wr, br, {1, 1}, {1, 1}).sum().backward();
  SUBCASE("input only") {
    Tensor xi = x.clone().requires_grad_();
    F::conv2d(xi, w, b, {1, 1}, {1, 1}).sum().backward();
    CHECK(max(abs(xi.grad() - xr.grad())).item() < 1e-12);
  }
  SUBCASE("weight only") {
    Tensor wi = w.clone().requires_grad_();
    F::conv2d(x, wi, b, {1, 1}, {1, 1}).sum().backward();
    CHECK(max(abs(wi.grad() - wr.grad())).item() < 1e-12);
  }
  SUBCASE("bias only") {
    Tensor bi = b.clone().requires_grad_();
    F::conv2d(x, w, bi, {1, 1}, {1, 1}).sum().backward();
    CHECK(max(abs(bi.grad() - br.grad())).item() < 1e-12);
  }
}

TEST_CASE("conv2d backward: images spread over threads agree with one image at a time") {
  // Big enough (> 2^20 multiply-adds) for the per-thread path; each single
  // image alone goes through the serial path.
  Generator gen(13);
  Tensor x = randn({4, 8, 20, 20}, DType::f32, &gen), w = randn({16, 4, 3, 3}, DType::f32, &gen);
  Tensor b = randn({16}, DType::f32, &gen);
  Tensor xa = x.clone().requires_grad_(), wa = w.clone().requires_grad_(), ba = b.clone().requires_grad_();
  Tensor ga = randn({4, 16, 10, 10}, DType::f32, &gen);
  F::conv2d(xa, wa, ba, {2, 2}, {1, 1}, {1, 1}, 2).backward(ga);
  Tensor gw = zeros(w.shape()), gb = zeros({16});
  for (int64_t n = 0; n < 4; ++n) {
    Tensor xn = x.slice(0, n, n + 1).clone().requires_grad_(), wn = w.clone().requires_grad_();
    Tensor bn = b.clone().requires_grad_();
    F::conv2d(xn, wn, bn, {2, 2}, {1, 1}, {1, 1}, 2).backward(ga.slice(0, n, n + 1).contiguous());
    CHECK(max(abs(xn.grad() - xa.grad().slice(0, n, n + 1))).item() < 1e-5);
    gw = gw + wn.grad();
    gb = gb + bn.grad();
  }
  CHECK(max(abs(gw - wa.grad())).item() < 1e-3);
  CHECK(max(abs(gb - ba.grad())).item() < 1e-3);
}

TEST_CASE("Conv2d module: shapes, init bounds, repr") {
  nn::Conv2d conv(4, 8, 3, 2, 1, 1, 2);
  CHECK(conv.weight.shape() == Shape{8, 2, 3, 3});
  CHECK(conv.bias.shape() == Shape{8});
  CHECK(conv.num_parameters() == 8 * 2 * 9 + 8);
  const double bound = 1.0 / std::sqrt(18.0);
  CHECK(max(abs(conv.weight)).item() <= bound);
  CHECK(max(abs(conv.bias)).item() <= bound);
  CHECK(conv.weight.requires_grad());
  Tensor y = conv(randn({3, 4, 9, 9}));
  CHECK(y.shape() == Shape{3, 8, 5, 5});
  CHECK(conv.repr() == "Conv2d(4, 8, kernel_size=3, stride=2, padding=1, groups=2)");
  nn::Conv2d nb(1, 2, 3, 1, 0, 1, 1, false);
  CHECK(!nb.bias.defined());
  CHECK(nb.named_parameters().size() == 1);
}

TEST_CASE("conv2d errors name the op, the shapes and what was expected") {
  Tensor x = randn({2, 4, 8, 8}), w = randn({6, 2, 3, 3});
  CHECK_THROWS_WITH_AS(F::conv2d(randn({4, 8, 8}), w), doctest::Contains("expected input (N, C, H, W), got [4, 8, 8]"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({6, 2, 3})), doctest::Contains("expected weight (Cout, Cin/groups, kH, kW)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, w), doctest::Contains("expects 2 input channels"), ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 3),
                       doctest::Contains("input channels 4 are not divisible by groups 3"), ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({5, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
                       doctest::Contains("output channels 5"), ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 0), doctest::Contains("groups must be >= 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, w, randn({5}), {1, 1}, {0, 0}, {1, 1}, 2), doctest::Contains("bias of shape [5]"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({6, 4, 9, 9})), doctest::Contains("is smaller than the kernel 9x9"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({6, 4, 3, 3}), Tensor(), {0, 1}), doctest::Contains("stride must be >= 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({6, 4, 3, 3}), Tensor(), {1, 1}, {-1, 0}),
                       doctest::Contains("padding must be >= 0"), ValueError);
  CHECK_THROWS_WITH_AS(F::conv2d(x, randn({6, 4, 3, 3}, DType::f64)), doctest::Contains("must have the same dtype"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(nn::Conv2d(4, 6, 3, 1, 0, 1, 4), doctest::Contains("groups=4 must divide"), ValueError);
}
