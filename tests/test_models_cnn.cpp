// SPDX-License-Identifier: MIT
// The image models: exact parameter counts, output shapes, and a few SGD
// steps on one tiny batch lower the loss.
#include <doctest/doctest.h>

#include <memory>

#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/vit.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;
namespace F = snug::nn::functional;

namespace {

// Loss before and after `steps` SGD steps on one fixed batch of 8 images.
// SGD with momentum 0.9, or AdamW when adam is set.
std::pair<double, double> fit_batch(nn::Module& m, int steps, double lr, bool adam = false) {
  Generator gen(9);
  Tensor x = rand({8, 1, 28, 28}, DType::f32, &gen);
  Tensor y = randint(0, 10, {8}, DType::i64, &gen);
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<nn::optim::AdamW>(m.parameters(), nn::optim::AdamWOptions{.lr = lr, .weight_decay = 0});
  else
    opt = std::make_unique<nn::optim::SGD>(m.parameters(), nn::optim::SGDOptions{.lr = lr, .momentum = 0.9});
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Tensor loss = F::cross_entropy(m(x), y);
    loss.backward();
    opt->step();
    (s == 0 ? first : last) = loss.item();
  }
  return {first, last};
}

}  // namespace

TEST_CASE("W-CNN: 1,199,882 parameters, (N, 10) logits, learns a batch") {
  auto m = nn::models::make_wcnn();
  CHECK(m->num_parameters() == 1199882);
  CHECK(m->size() == 9);
  CHECK(m->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  auto [first, last] = fit_batch(*m, 20, 0.02);
  CHECK(last < first * 0.5);
}

TEST_CASE("W-MLP: 1,863,690 parameters, takes images or flat rows") {
  auto m = nn::models::make_wmlp();
  CHECK(m->num_parameters() == 1863690);
  CHECK(m->forward(randn({3, 1, 28, 28})).shape() == Shape{3, 10});
  CHECK(m->forward(randn({3, 784})).shape() == Shape{3, 10});
  auto [first, last] = fit_batch(*m, 8, 0.05);
  CHECK(last < first * 0.5);
}

TEST_CASE("MobileNet-style CNN: depthwise-separable blocks with batch norm") {
  auto m = nn::models::make_mobilenet();
  CHECK(m->forward(randn({4, 1, 28, 28})).shape() == Shape{4, 10});
  int64_t depthwise = 0, bns = 0;
  for (auto& [name, mod] : m->named_modules())
    if (mod->repr().find("groups=") != std::string::npos)
      ++depthwise;
    else if (mod->name() == "BatchNorm2d")
      ++bns;
  CHECK(depthwise == 4);
  CHECK(bns == 9);
  const int64_t params = m->num_parameters();
  CHECK(params > 30000);
  CHECK(params < 200000);
  auto [first, last] = fit_batch(*m, 10, 0.05);
  CHECK(last < first * 0.5);
  m->eval();
  CHECK(m->forward(randn({1, 1, 28, 28})).shape() == Shape{1, 10});
}

TEST_CASE("ViT: class token + positions + encoder blocks, (N, 10) logits, learns a batch") {
  auto m = nn::models::make_vit();
  // patch conv 1*64*49 + 64, cls 64, pos 17*64, 4 blocks, final LN, head.
  const int64_t block = (64 * 192 + 192) + (64 * 64 + 64) + 2 * 2 * 64 + (64 * 128 + 128) + (128 * 64 + 64);
  CHECK(m->num_parameters() == (49 * 64 + 64) + 64 + 17 * 64 + 4 * block + 2 * 64 + (64 * 10 + 10));
  CHECK(m->forward(randn({3, 1, 28, 28})).shape() == Shape{3, 10});
  auto [first, last] = fit_batch(*m, 20, 1e-3, true);
  CHECK(last < first * 0.5);
}
