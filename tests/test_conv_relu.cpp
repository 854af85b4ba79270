// SPDX-License-Identifier: MIT
// conv2d_relu (nn/fused.h, core/cpu/conv.h): the same values and gradients as
// relu(conv2d(...)) on many geometries, finite differences, partial
// gradients, nn::fuse's Conv2dReLU, the composed path
// for 16-bit inputs, and the fused entry points' argument checks.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <snug/autograd/ops.h>
#include <snug/core/cpu/conv.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/fuse.h>
#include <snug/nn/fused.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/pool.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
namespace F = snug::nn::functional;

namespace {

struct Geo {
  Shape xs, ws;
  std::array<int64_t, 2> s, p, d;
  int64_t groups;
};

const std::vector<Geo> kGeos = {
    {{2, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},    {{2, 4, 6, 5}, {4, 2, 3, 2}, {2, 1}, {1, 1}, {1, 1}, 2},
    {{1, 2, 7, 7}, {2, 2, 3, 3}, {2, 2}, {2, 1}, {2, 2}, 1},     // one image: threaded GEMMs
    {{3, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},     // depthwise
    {{2, 4, 3, 4}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},     // pointwise
    {{4, 8, 20, 20}, {16, 4, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2},  // images over threads
};

// Values equal (a -0 beside a +0 counts as equal: the composed mask writes g * 0).
void check_same(const Tensor& a, const Tensor& b, const std::string& what) {
  CAPTURE(what);
  REQUIRE(a.shape() == b.shape());
  CHECK(a.to_vector<double>() == b.to_vector<double>());
}

}  // namespace

TEST_CASE("conv2d_relu equals relu(conv2d): values and every gradient, f32 and f64") {
  Generator gen(21);
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Geo& c : kGeos) {
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(c.xs));
      const Tensor x = randn(c.xs, dt, &gen), w = randn(c.ws, dt, &gen), b = randn({c.ws[0]}, dt, &gen);
      Tensor x1 = x.clone().requires_grad_(), w1 = w.clone().requires_grad_(), b1 = b.clone().requires_grad_();
      Tensor x2 = x.clone().requires_grad_(), w2 = w.clone().requires_grad_(), b2 = b.clone().requires_grad_();
      const Tensor fused = F::conv2d_relu(x1, w1, b1, c.s, c.p, c.d, c.groups);
      const Tensor composed = relu(F::conv2d(x2, w2, b2, c.s, c.p, c.d, c.groups));
      check_same(fused, composed, "y");
      // Some outputs must be clipped, or the mask is not tested.
      int clipped = 0;
      for (double v : fused.to_vector<double>()) clipped += v == 0.0;
      CHECK(clipped > 0);
      const Tensor g = randn(fused.shape(), dt, &gen);
      fused.backward(g);
      composed.backward(g);
      check_same(x1.grad(), x2.grad(), "grad x");
      check_same(w1.grad(), w2.grad(), "grad w");
      check_same(b1.grad(), b2.grad(), "grad b");
    }
  }
}

TEST_CASE("conv2d_relu gradients match finite differences") {
  Generator gen(23);
  for (size_t i = 0; i < 5; ++i) {
    const Geo& c = kGeos[i];
    CAPTURE(i);
    Tensor x = randn(c.xs, DType::f64, &gen), w = randn(c.ws, DType::f64, &gen);
    Tensor b = randn({c.ws[0]}, DType::f64, &gen);
    check_grad(
        [&](const std::vector<Tensor>& in) { return F::conv2d_relu(in[0], in[1], in[2], c.s, c.p, c.d, c.groups); },
        {x, w, b});
  }
}

TEST_CASE("conv2d_relu with only some inputs requiring grad, and without a bias") {
  Generator gen(29);
  const Tensor x = randn({2, 2, 5, 5}, DType::f64, &gen), w = randn({3, 2, 3, 3}, DType::f64, &gen);
  const Tensor b = randn({3}, DType::f64, &gen);
  Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(), br = b.clone().requires_grad_();
  relu(F::conv2d(xr, wr, br, {1, 1}, {1, 1})).sum().backward();
  SUBCASE("input only") {
    Tensor xi = x.clone().requires_grad_();
    F::conv2d_relu(xi, w, b, {1, 1}, {1, 1}).sum().backward();
    check_same(xi.grad(), xr.grad(), "grad x");
  }
  SUBCASE("weight only") {
    Tensor wi = w.clone().requires_grad_();
    F::conv2d_relu(x, wi, b, {1, 1}, {1, 1}).sum().backward();
    check_same(wi.grad(), wr.grad(), "grad w");
  }
  SUBCASE("bias only") {
    Tensor bi = b.clone().requires_grad_();
    F::conv2d_relu(x, w, bi, {1, 1}, {1, 1}).sum().backward();
    check_same(bi.grad(), br.grad(), "grad b");
  }
  SUBCASE("no bias") {
    Tensor xi = x.clone().requires_grad_(), xj = x.clone().requires_grad_();
    const Tensor y1 = F::conv2d_relu(xi, w, Tensor(), {1, 1}, {1, 1});
    const Tensor y2 = relu(F::conv2d(xj, w, Tensor(), {1, 1}, {1, 1}));
    check_same(y1, y2, "y");
    y1.sum().backward();
    y2.sum().backward();
    check_same(xi.grad(), xj.grad(), "grad x");
  }
}

TEST_CASE(
    "nn::fuse runs Conv2d + ReLU as conv2d_relu and Linear + ReLU + Linear as relu_mlp, with the unfused result") {
  manual_seed(31);
  auto net = nn::models::make_wcnn();  // Conv2d, ReLU, Conv2d, ReLU, MaxPool2d, Flatten, Linear, ReLU, Linear
  const Tensor x = randn({4, 1, 28, 28});
  // Unfused: Sequential runs module by module.
  Tensor loss_plain = net->forward(x).pow(2.0).mean();
  loss_plain.backward();
  std::vector<Tensor> g_plain;
  for (const Tensor& p : net->parameters()) g_plain.push_back(p.grad().clone());
  net->zero_grad();
  REQUIRE(nn::fuse(*net).size() == 3);
  Tensor loss_fused;
  {
    profiler::Profile prof;
    loss_fused = net->forward(x).pow(2.0).mean();
    prof.stop();
    int fused_ops = 0, relu_ops = 0;
    for (const auto& e : prof.events()) {
      fused_ops += e.name == "conv2d_relu";
      relu_ops += e.name == "relu";
    }
    CHECK(fused_ops == 2);  // both convolutions
    CHECK(relu_ops == 0);   // the ReLU after the Linear goes into its GEMM (relu_mlp with the last Linear)
  }
  loss_fused.backward();
  CHECK(loss_fused.item() == loss_plain.item());
  const auto params = net->parameters();
  REQUIRE(params.size() == g_plain.size());
  for (size_t i = 0; i < params.size(); ++i) check_same(params[i].grad(), g_plain[i], str("parameter ", i));
}

TEST_CASE("conv2d_relu on 16-bit inputs composes conv2d and relu; the fused entry points check their arguments") {
  Generator gen(37);
  const Tensor x = randn({2, 2, 6, 6}, DType::f32, &gen).to(DType::bf16);
  const Tensor w = randn({3, 2, 3, 3}, DType::f32, &gen).to(DType::bf16);
  check_same(F::conv2d_relu(x, w), relu(F::conv2d(x, w)), "bf16");
  const Tensor out = empty({2, 3, 4, 4}, TensorOptions(DType::bf16));
  CHECK_THROWS_AS(cpu::conv2d_relu(x, w, Tensor(), Conv2dParams{}, out), DTypeError);
  const Tensor xf = randn({2, 2, 6, 6}), wf = randn({3, 2, 3, 3});
  const Tensor strided = randn({2, 3, 4, 8}).slice(3, 0, 4);  // not contiguous
  CHECK_THROWS_AS(cpu::conv2d_relu(xf, wf, Tensor(), Conv2dParams{}, strided), ValueError);
  CHECK_THROWS_AS(cpu::conv2d_relu_backward(randn({2, 3, 4, 4}), randn({2, 3, 4, 5}), xf, wf, Conv2dParams{},
                                            empty({2, 2, 6, 6}), Tensor(), Tensor()),
                  ShapeError);
}
