// SPDX-License-Identifier: MIT
// linear_relu, linear_gelu, relu_mlp and gelu_mlp (nn/fused.h;
// kernels::gemm_f32_bias_act, gemm_f32_act_grad): the same values and
// gradients as the ops they fuse, for f32 and f16/bf16 (the one-pass GEMMs)
// and f64 (the composed path), finite differences, partial gradients, retained graphs,
// nn::fuse's and the GPT block's use of them, and errors.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/nn/attention.h>
#include <snug/nn/functional.h>
#include <snug/nn/fuse.h>
#include <snug/nn/fused.h>
#include <snug/nn/layers.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::contains;
using snug::testing::error_of;
namespace F = snug::nn::functional;

namespace {

enum class Act { relu, gelu, gelu_tanh };

Tensor fused(Act a, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (a == Act::relu) return F::linear_relu(x, w, b);
  return F::linear_gelu(x, w, b, a == Act::gelu ? GeluApprox::none : GeluApprox::tanh);
}
Tensor composed(Act a, const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = F::linear(x, w, b);
  if (a == Act::relu) return relu(y);
  return gelu(y, a == Act::gelu ? GeluApprox::none : GeluApprox::tanh);
}

void check_same(const Tensor& a, const Tensor& b, const std::string& what) {
  CAPTURE(what);
  REQUIRE(a.defined() == b.defined());
  if (!a.defined()) return;
  REQUIRE(a.shape() == b.shape());
  CHECK(a.to_vector<double>() == b.to_vector<double>());
}

// Forward and every gradient of sum(act(linear) * r), fused against composed.
void check_against_composed(Act a, DType dt, const Shape& xs, int64_t out, bool bias, bool gx, bool gw, uint64_t seed) {
  Generator g(seed);
  const int64_t in = xs.back();
  Tensor x0 = randn(xs, TensorOptions(dt), &g), w0 = randn({out, in}, TensorOptions(dt), &g);
  Tensor b0 = bias ? randn({out}, TensorOptions(dt), &g) : Tensor();
  Shape ys = xs;
  ys.back() = out;
  Tensor r = randn(ys, TensorOptions(dt), &g);
  std::vector<Tensor> grads[2];
  Tensor y[2];
  for (int k = 0; k < 2; ++k) {
    Tensor x = x0.clone(), w = w0.clone(), b = bias ? b0.clone() : Tensor();
    x.requires_grad_(gx);
    w.requires_grad_(gw);
    if (bias) b.requires_grad_(true);
    y[k] = k == 0 ? fused(a, x, w, b) : composed(a, x, w, b);
    (y[k] * r).sum().backward();
    grads[k] = {gx ? x.grad() : Tensor(), gw ? w.grad() : Tensor(), bias ? b.grad() : Tensor()};
  }
  check_same(y[0], y[1], "y");
  check_same(grads[0][0], grads[1][0], "grad x");
  check_same(grads[0][1], grads[1][1], "grad weight");
  check_same(grads[0][2], grads[1][2], "grad bias");
}

}  // namespace

TEST_CASE("linear_relu / linear_gelu equal the activation after linear: values and gradients, bit for bit") {
  int64_t seed = 1;
  for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh})
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {  // 16-bit: NOTE [ 16-bit one-pass linear ]
      CAPTURE(int(a));
      CAPTURE(dtype_name(dt));
      check_against_composed(a, dt, {7, 5}, 9, true, true, true, seed++);
      check_against_composed(a, dt, {4, 32, 128}, 512, true, true, true, seed++);  // W-GPT's fc, batch 4
      check_against_composed(a, dt, {128, 784}, 300, true, true, true, seed++);    // K over several blocks
      check_against_composed(a, dt, {3, 6, 10}, 4, false, true, true, seed++);     // no bias
      check_against_composed(a, dt, {5, 10}, 6, true, false, true, seed++);        // x needs no gradient
      check_against_composed(a, dt, {5, 10}, 6, true, true, false, seed++);        // frozen weight
    }
}

TEST_CASE("backward twice with retain_graph: the early release of the activation waits for the last pass") {
  // The backward frees the saved activation before its GEMMs only when the
  // graph is not retained (autograd::saved_tensors_die_after_node).
  Generator g(8);
  for (Act a : {Act::relu, Act::gelu}) {
    CAPTURE(int(a));
    Tensor x = randn({16, 12}, TensorOptions(kFloat32), &g), w = randn({20, 12}, TensorOptions(kFloat32), &g);
    Tensor b = randn({20}, TensorOptions(kFloat32), &g);
    w.requires_grad_(true);
    Tensor y = fused(a, x, w, b);
    y.sum().backward(Tensor(), /*retain_graph=*/true);
    const std::vector<double> once = w.grad().to_vector<double>();
    y.sum().backward();  // the second pass still finds the activation
    const std::vector<double> twice = w.grad().to_vector<double>();
    REQUIRE(once.size() == twice.size());
    int bad = 0;
    for (size_t i = 0; i < once.size(); ++i) bad += std::abs(twice[i] - 2 * once[i]) > 1e-5 * (1 + std::abs(once[i]));
    CHECK(bad == 0);
    CHECK(contains(error_of([&] { y.sum().backward(); }), "already freed by an earlier backward"));  // now freed
  }
}

namespace {
// relu_mlp / gelu_mlp against linear, act, linear: y and every gradient, with
// `want` saying which of x, w1, b1, w2, b2 require a gradient.
void check_mlp(Act a, DType dt, const Shape& xs, int64_t hid, int64_t out, std::array<bool, 5> want, uint64_t seed) {
  Generator g(seed);
  const int64_t in = xs.back();
  std::vector<Tensor> p0 = {randn(xs, TensorOptions(dt), &g), randn({hid, in}, TensorOptions(dt), &g),
                            randn({hid}, TensorOptions(dt), &g), randn({out, hid}, TensorOptions(dt), &g),
                            randn({out}, TensorOptions(dt), &g)};
  Shape ys = xs;
  ys.back() = out;
  Tensor r = randn(ys, TensorOptions(dt), &g);
  Tensor y[2];
  std::vector<Tensor> grads[2];
  for (int k = 0; k < 2; ++k) {
    std::vector<Tensor> p;
    for (size_t i = 0; i < 5; ++i) p.push_back(p0[i].clone().requires_grad_(want[i]));
    if (k == 0)
      y[k] = a == Act::relu
                 ? F::relu_mlp(p[0], p[1], p[2], p[3], p[4])
                 : F::gelu_mlp(p[0], p[1], p[2], p[3], p[4], a == Act::gelu ? GeluApprox::none : GeluApprox::tanh);
    else
      y[k] = F::linear(composed(a, p[0], p[1], p[2]), p[3], p[4]);
    if (want[0] || want[1] || want[2] || want[3] || want[4]) (y[k] * r).sum().backward();
    for (size_t i = 0; i < 5; ++i) grads[k].push_back(want[i] ? p[i].grad() : Tensor());
  }
  check_same(y[0], y[1], "y");
  for (size_t i = 0; i < 5; ++i) check_same(grads[0][i], grads[1][i], str("grad of input ", i));
}
}  // namespace

TEST_CASE("relu_mlp / gelu_mlp equal linear, activation, linear: values and gradients, bit for bit") {
  uint64_t seed = 100;
  const std::array<bool, 5> all{true, true, true, true, true};
  for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh})
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {  // 16-bit: NOTE [ 16-bit one-pass linear ]
      CAPTURE(int(a));
      CAPTURE(dtype_name(dt));
      check_mlp(a, dt, {6, 5}, 9, 4, all, seed++);
      check_mlp(a, dt, {4, 32, 128}, 512, 128, all, seed++);                        // W-GPT's MLP, batch 4
      check_mlp(a, dt, {64, 300}, 700, 10, all, seed++);                            // K past one block in both layers
      check_mlp(a, dt, {5, 7}, 8, 3, {true, false, false, false, false}, seed++);   // input only
      check_mlp(a, dt, {5, 7}, 8, 3, {false, true, true, false, false}, seed++);    // first layer only
      check_mlp(a, dt, {5, 7}, 8, 3, {false, false, false, true, true}, seed++);    // second layer only
      check_mlp(a, dt, {5, 7}, 8, 3, {false, false, false, false, false}, seed++);  // no gradient at all
    }
}

TEST_CASE("gradcheck: relu_mlp, gelu_mlp (f64)") {
  Generator g(9);
  std::vector<Tensor> p = {randn({3, 4}, TensorOptions(kFloat64), &g), randn({5, 4}, TensorOptions(kFloat64), &g),
                           randn({5}, TensorOptions(kFloat64), &g), randn({2, 5}, TensorOptions(kFloat64), &g),
                           randn({2}, TensorOptions(kFloat64), &g)};
  check_grad([](const std::vector<Tensor>& t) { return F::relu_mlp(t[0], t[1], t[2], t[3], t[4]); }, p);
  check_grad([](const std::vector<Tensor>& t) { return F::gelu_mlp(t[0], t[1], t[2], t[3], t[4]); }, p);
}

TEST_CASE("gelu_mlp: backward twice with retain_graph, then the graph is freed") {
  Generator g(10);
  Tensor x = randn({8, 6}, TensorOptions(kFloat32), &g), w1 = randn({12, 6}, TensorOptions(kFloat32), &g),
         w2 = randn({3, 12}, TensorOptions(kFloat32), &g);
  x.requires_grad_(true);
  w2.requires_grad_(true);
  Tensor y = F::gelu_mlp(x, w1, Tensor(), w2, Tensor());
  y.sum().backward(Tensor(), /*retain_graph=*/true);
  const std::vector<double> gx1 = x.grad().to_vector<double>(), gw1 = w2.grad().to_vector<double>();
  y.sum().backward();
  const std::vector<double> gx2 = x.grad().to_vector<double>(), gw2 = w2.grad().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < gx1.size(); ++i) bad += std::abs(gx2[i] - 2 * gx1[i]) > 1e-5 * (1 + std::abs(gx1[i]));
  for (size_t i = 0; i < gw1.size(); ++i) bad += std::abs(gw2[i] - 2 * gw1[i]) > 1e-5 * (1 + std::abs(gw1[i]));
  CHECK(bad == 0);
  CHECK(contains(error_of([&] { y.sum().backward(); }), "already freed by an earlier backward"));
}

TEST_CASE("nn::fuse: W-MLP's Linear, ReLU, Linear, ReLU, Linear runs as a pair and a triple") {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(20, 16));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(16, 16));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(16, 4));
  const Tensor x = randn({9, 20});
  const Tensor h = net->forward(x);  // unfused: module by module
  REQUIRE(nn::fuse(*net).size() == 2);
  profiler::Profile prof;
  Tensor a = net->forward(x);
  prof.stop();
  int matmuls = 0, others = 0;
  for (const auto& e : prof.events()) (e.name == "matmul" ? matmuls : others) += 1;
  CHECK(matmuls == 3);
  CHECK(others == 0);  // no separate ReLU
  CHECK(a.grad_fn() != nullptr);
  CHECK(std::string(a.grad_fn()->name()) == "relu_mlp");
  CHECK(std::string(a.grad_fn()->next[0].fn->name()) == "linear_relu");
  check_same(a, h, "Sequential");
}

TEST_CASE("relu_mlp / gelu_mlp: bad input names the op and the problem") {
  Tensor x = zeros({4, 5});
  CHECK(contains(error_of([&] {
                   F::gelu_mlp(x, zeros({6, 5}), zeros({6}), zeros({3, 7}), zeros({3}));
                 }),
                 "gelu_mlp: second weight of shape [3, 7] does not take the first layer's 6 outputs"));
  CHECK(contains(error_of([&] {
                   F::relu_mlp(x, zeros({6, 4}), zeros({6}), zeros({3, 6}), zeros({3}));
                 }),
                 "relu_mlp: input of shape [4, 5]"));
  CHECK(contains(error_of([&] {
                   F::relu_mlp(x, zeros({6, 5}), zeros({6}), zeros({3, 6}), zeros({4}));
                 }),
                 "relu_mlp: bias of shape [4]"));
}

TEST_CASE("gradcheck: linear_relu, linear_gelu (f64)") {
  Generator g(3);
  Tensor x = randn({4, 5}, TensorOptions(kFloat64), &g), w = randn({3, 5}, TensorOptions(kFloat64), &g),
         b = randn({3}, TensorOptions(kFloat64), &g);
  check_grad([](const std::vector<Tensor>& t) { return F::linear_relu(t[0], t[1], t[2]); }, {x, w, b});
  check_grad([](const std::vector<Tensor>& t) { return F::linear_gelu(t[0], t[1], t[2]); }, {x, w, b});
  check_grad([](const std::vector<Tensor>& t) { return F::linear_gelu(t[0], t[1], t[2], GeluApprox::tanh); },
             {x, w, b});
}

TEST_CASE("f32 on the CPU: one GEMM, no separate activation pass") {
  Generator g(4);
  Tensor x = randn({64, 32}, TensorOptions(kFloat32), &g), w = randn({48, 32}, TensorOptions(kFloat32), &g),
         b = randn({48}, TensorOptions(kFloat32), &g);
  profiler::Profile prof;
  F::linear_gelu(x, w, b);
  F::linear_relu(x, w, b);
  prof.stop();
  int matmuls = 0, others = 0;
  for (const auto& e : prof.events()) (e.name == "matmul" ? matmuls : others) += 1;
  CHECK(matmuls == 2);
  CHECK(others == 0);
}

TEST_CASE("nn::fuse runs Linear, GELU, Linear as gelu_mlp; the GPT block's MLP is gelu_mlp on its own") {
  manual_seed(5);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(12, 20));
  net->push_back(std::make_shared<nn::GELU>(GeluApprox::tanh));
  net->push_back(std::make_shared<nn::Linear>(20, 3));
  const Tensor x = randn({6, 12});
  const Tensor h = net->forward(x);  // module by module: no fusion
  REQUIRE(nn::fuse(*net).size() == 1);
  Tensor a = net->forward(x);
  CHECK(std::string(a.grad_fn()->name()) == "gelu_mlp");
  check_same(a, h, "Sequential");

  nn::TransformerBlock block(16, 2);
  const Tensor t = randn({2, 5, 16});
  Tensor y = block.forward(t);
  // The same block by hand, with fc and GELU as two ops.
  Tensor u = t + block.attn->forward(block.ln_1->forward(t));
  Tensor ref = u + block.fc_proj->forward(gelu(block.fc->forward(block.ln_2->forward(u))));
  check_same(y, ref, "TransformerBlock");
  // The MLP is one node: the residual add's second input is gelu_mlp's output.
  CHECK(std::string(y.grad_fn()->next[1].fn->name()) == "gelu_mlp");
}

TEST_CASE("TransformerBlock: a layer put in fc's place runs its own forward") {
  // A Linear subclass with a forward of its own stands in for fc (as quant/'s
  // layers do): the block must call it, not read its weight into gelu_mlp.
  struct Doubled : nn::Linear {
    explicit Doubled(const nn::Linear& l) : nn::Linear("Doubled", l), inner(l.weight), inner_bias(l.bias) {
      register_parameter("weight", inner);
      register_parameter("bias", inner_bias);
    }
    Tensor forward(const Tensor& x) override { return F::linear(x, inner, inner_bias) * 2.0; }
    Tensor inner, inner_bias;
  };
  manual_seed(6);
  nn::TransformerBlock block(16, 2);
  block.eval();
  const Tensor t = randn({2, 5, 16});
  const Tensor before = block.forward(t);
  block.replace_module("fc", std::make_shared<Doubled>(*block.fc));
  const Tensor after = block.forward(t);
  Tensor u = t + block.attn->forward(block.ln_1->forward(t));
  Tensor ref = u + block.fc_proj->forward(gelu(block.fc->forward(block.ln_2->forward(u))));
  check_same(after, ref, "replaced fc");
  CHECK(after.to_vector<double>() != before.to_vector<double>());
}

TEST_CASE("linear_relu / linear_gelu: bad input names the op and the problem") {
  Tensor x = zeros({4, 5}), w = zeros({3, 6}), b = zeros({3});
  CHECK(contains(error_of([&] { F::linear_relu(x, w, b); }), "linear_relu: input of shape [4, 5]"));
  CHECK(contains(error_of([&] { F::linear_gelu(x, zeros({3, 5}), zeros({4})); }), "linear_gelu: bias of shape [4]"));
  CHECK(contains(error_of([&] { F::linear_gelu(x, zeros({5})); }), "linear_gelu: weight must be (out, in)"));
  // Empty batch: an empty result of the right shape.
  CHECK(F::linear_relu(zeros({0, 5}), zeros({3, 5}), b).shape() == Shape{0, 3});
}
