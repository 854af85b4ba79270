// SPDX-License-Identifier: MIT
// Compaction (prune/compact.h): with the pruned channels exactly zero the
// compacted model computes the same outputs (Linear->Linear, Conv->BN->Conv
// with the constant a dropped channel emits folded into the next bias,
// Conv->pool->Flatten->Linear); parameters, gradients, masks and optimizer
// state shrink.
#include <doctest/doctest.h>

#include <cmath>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/attention.h>
#include <snug/nn/batch_norm.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/pool.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include "test_util.h"

using namespace snug;
using snug::testing::max_abs_diff;

namespace {
Tensor run_eval(nn::Module& m, const Tensor& x) {
  NoGradGuard ng;
  m.eval();
  Tensor y = m.forward(x);
  m.train();
  return y;
}
}  // namespace

TEST_CASE("Linear -> ReLU -> Linear: same outputs, smaller tensors, optimizer state shrinks") {
  manual_seed(21);
  auto fc1 = std::make_shared<nn::Linear>(12, 16), fc2 = std::make_shared<nn::Linear>(16, 5);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{fc1, std::make_shared<nn::ReLU>(), fc2});
  nn::optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({7, 12});
  Tensor loss = sum(square(net->forward(x)));
  loss.backward();
  opt.step();  // creates momentum buffers
  prune::output_channels(*fc1, 0.5);
  const Tensor before = run_eval(*net, x);
  const std::size_t state_before = opt.state_bytes();

  auto rep = prune::compact(*net, &opt);
  REQUIRE(rep.layers.size() == 1);
  CHECK(rep.layers[0].name == "0");
  CHECK(rep.layers[0].channels_before == 16);
  CHECK(rep.layers[0].channels_after == 8);
  CHECK(fc1->weight.shape() == Shape{8, 12});
  CHECK(fc1->bias.shape() == Shape{8});
  CHECK(fc2->weight.shape() == Shape{5, 8});
  CHECK(fc1->out_features == 8);
  CHECK(fc2->in_features == 8);
  CHECK(fc1->weight.grad().shape() == Shape{8, 12});
  CHECK(prune::mask(fc1->weight).shape() == Shape{8, 12});
  CHECK(rep.param_bytes_after < rep.param_bytes_before);
  CHECK(opt.state_bytes() < state_before);
  CHECK(opt.state_bytes() == rep.param_bytes_after);  // one momentum buffer per parameter
  CHECK(max_abs_diff(run_eval(*net, x), before) <= 1e-5);
  // Training goes on with the smaller tensors.
  opt.zero_grad();
  Tensor l2 = sum(square(net->forward(x)));
  l2.backward();
  opt.step();
  CHECK(fc2->weight.grad().shape() == Shape{5, 8});
}

TEST_CASE("Conv -> BatchNorm -> ReLU -> Conv: the dropped channels' BN constant is folded") {
  manual_seed(22);
  auto c1 = std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1);
  auto bn = std::make_shared<nn::BatchNorm2d>(8);
  auto c2 = std::make_shared<nn::Conv2d>(8, 4, 3);  // no padding: the fold is exact
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{c1, bn, std::make_shared<nn::ReLU>(), c2});
  {
    NoGradGuard ng;  // running stats and affine parameters away from their defaults
    bn->running_mean.copy_(randn({8}));
    bn->running_var.copy_(rand({8}) + 0.5);
    bn->weight.copy_(randn({8}));
    bn->bias.copy_(randn({8}));
  }
  prune::output_channels(*c1, 0.5);
  Tensor x = randn({2, 3, 9, 9});
  const Tensor before = run_eval(*net, x);
  auto rep = prune::compact(*net);
  REQUIRE(rep.layers.size() == 1);
  CHECK(c1->weight.shape() == Shape{4, 3, 3, 3});
  CHECK(bn->running_mean.shape() == Shape{4});
  CHECK(bn->num_features == 4);
  CHECK(c2->weight.shape() == Shape{4, 4, 3, 3});
  CHECK(max_abs_diff(run_eval(*net, x), before) <= 1e-5);
}

TEST_CASE("Conv -> ReLU -> MaxPool -> Flatten -> Linear -> ReLU -> Linear (W-CNN shaped)") {
  manual_seed(23);
  auto c1 = std::make_shared<nn::Conv2d>(1, 6, 3), c2 = std::make_shared<nn::Conv2d>(6, 8, 3);
  auto f1 = std::make_shared<nn::Linear>(8 * 3 * 3, 10), f2 = std::make_shared<nn::Linear>(10, 3);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      c1, std::make_shared<nn::ReLU>(), c2, std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), f1, std::make_shared<nn::ReLU>(), f2});
  for (auto* m : std::vector<nn::Module*>{c1.get(), c2.get(), f1.get()}) prune::output_channels(*m, 0.5);
  prune::output_channels(*f2, 0.5);  // the output layer: masked, never shrunk
  Tensor x = randn({3, 1, 10, 10});
  const Tensor before = run_eval(*net, x);
  auto rep = prune::compact(*net);
  CHECK(rep.layers.size() == 3);
  CHECK(c1->weight.shape() == Shape{3, 1, 3, 3});
  CHECK(c2->weight.shape() == Shape{4, 3, 3, 3});
  CHECK(f1->weight.shape() == Shape{5, 4 * 9});
  CHECK(f2->weight.shape() == Shape{3, 5});
  CHECK(max_abs_diff(run_eval(*net, x), before) <= 1e-5);
}

TEST_CASE("a pruned channel with a live bias is folded into the next Linear exactly") {
  manual_seed(24);
  auto fc1 = std::make_shared<nn::Linear>(4, 6), fc2 = std::make_shared<nn::Linear>(6, 2);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{fc1, std::make_shared<nn::ReLU>(), fc2});
  prune::ln_structured(*fc1, "weight", 0.5, 1, 0);  // weights only: the bias stays
  Tensor x = randn({5, 4});
  const Tensor before = run_eval(*net, x);
  prune::compact(*net);
  CHECK(fc1->weight.shape() == Shape{3, 4});
  CHECK(max_abs_diff(run_eval(*net, x), before) <= 1e-5);
}

TEST_CASE("a model on a virtual device compacts there: index, folded bias and optimizer state on cpu:3") {
  // The indices and the folded constants are built on the host; compaction
  // must move them to the model's device (it threw a DeviceError before).
  manual_seed(25);
  const Device dev("cpu:3");
  auto fc1 = std::make_shared<nn::Linear>(4, 6), fc2 = std::make_shared<nn::Linear>(6, 2);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{fc1, std::make_shared<nn::ReLU>(), fc2});
  net->to(dev);
  nn::optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({5, 4}).to(dev);
  sum(square(net->forward(x))).backward();
  opt.step();                                       // momentum buffers on cpu:3
  prune::ln_structured(*fc1, "weight", 0.5, 1, 0);  // weights only: the live bias is folded into fc2's
  const Tensor before = run_eval(*net, x);
  prune::compact(*net, &opt);
  CHECK(fc1->weight.shape() == Shape{3, 4});
  CHECK(fc1->weight.device() == dev);
  CHECK(fc2->bias.device() == dev);
  CHECK(max_abs_diff(run_eval(*net, x).to(kCPU), before.to(kCPU)) <= 1e-5);
  opt.zero_grad();
  sum(square(net->forward(x))).backward();
  opt.step();  // the shrunk momentum buffers still fit
  CHECK(fc2->weight.grad().shape() == Shape{2, 3});

  // A producer without a bias before a BatchNorm: the constant it emits is computed on cpu:3 too.
  auto c1 = std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1, 1, 1, /*bias=*/false);
  auto bn = std::make_shared<nn::BatchNorm2d>(8);
  auto c2 = std::make_shared<nn::Conv2d>(8, 4, 3);
  auto cnn = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{c1, bn, std::make_shared<nn::ReLU>(), c2});
  cnn->to(dev);
  prune::output_channels(*c1, 0.5);
  Tensor img = randn({2, 3, 9, 9}).to(dev);
  const Tensor cnn_before = run_eval(*cnn, img);
  prune::compact(*cnn);
  CHECK(c1->weight.shape() == Shape{4, 3, 3, 3});
  CHECK(bn->running_mean.device() == dev);
  CHECK(max_abs_diff(run_eval(*cnn, img).to(kCPU), cnn_before.to(kCPU)) <= 1e-5);
}

TEST_CASE("attention heads: pruned heads are removed, outputs unchanged, proj takes the value bias") {
  manual_seed(25);
  auto block = std::make_shared<nn::TransformerBlock>(16, 4, /*causal=*/true);
  Tensor x = randn({2, 5, 16});
  prune::attention_heads(*block->attn, 0.5);
  prune::output_channels(*block->fc, 0.25);
  {
    // A live value bias on the pruned heads: compaction must fold it, not lose it.
    NoGradGuard ng;
    prune::remove(*block->attn->qkv, "bias");
    block->attn->qkv->bias.copy_(randn({48}));
  }
  const Tensor before = run_eval(*block, x);
  nn::optim::AdamW opt(block->parameters(), {.lr = 1e-3});
  auto rep = prune::compact(*block, &opt);
  CHECK(block->attn->heads == 2);
  CHECK(block->attn->qkv->weight.shape() == Shape{24, 16});
  CHECK(block->attn->proj->weight.shape() == Shape{16, 8});
  CHECK(block->fc->weight.shape() == Shape{48, 16});
  CHECK(block->fc_proj->weight.shape() == Shape{16, 48});
  CHECK(rep.layers.size() == 2);
  CHECK(max_abs_diff(run_eval(*block, x), before) <= 1e-5);
  Tensor loss = sum(square(block->forward(x)));
  loss.backward();
  opt.step();
  CHECK(block->attn->qkv->weight.grad().shape() == Shape{24, 16});
}
