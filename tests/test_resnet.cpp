// SPDX-License-Identifier: MIT
// nn/models/resnet.h: BasicBlock and ResNet shapes and parameter counts,
// torchvision-style state_dict names, a forward/backward smoke test that
// learns a batch, and the errors for bad input and bad configurations.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/resnet.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;
namespace F = snug::nn::functional;
using nn::models::BasicBlock;
using nn::models::ResNet;

TEST_CASE("BasicBlock: identity skip, or a 1x1 downsample when channels or stride change") {
  manual_seed(31);
  BasicBlock same(8, 8, 1);
  CHECK(same.downsample == nullptr);
  CHECK(same.forward(randn({2, 8, 10, 10})).shape() == Shape{2, 8, 10, 10});
  // conv1 + bn1 + conv2 + bn2, no conv bias: 2 * 8*8*9 + 2 * 2*8.
  CHECK(same.num_parameters() == 2 * 8 * 8 * 9 + 4 * 8);

  BasicBlock down(8, 16, 2);
  REQUIRE(down.downsample != nullptr);
  CHECK(down.forward(randn({2, 8, 7, 7})).shape() == Shape{2, 16, 4, 4});
  BasicBlock strided(8, 8, 2);  // same channels, half the resolution: still a downsample
  CHECK(strided.downsample != nullptr);
  CHECK(strided.forward(randn({1, 8, 8, 8})).shape() == Shape{1, 8, 4, 4});

  // The output is the ReLU of the sum: never negative.
  const auto v = same.forward(randn({2, 8, 5, 5})).contiguous().to_vector<float>();
  CHECK(*std::min_element(v.begin(), v.end()) >= 0.0f);
}

TEST_CASE("ResNet: MNIST and CIFAR shapes, 174,970 parameters by default, torchvision names") {
  manual_seed(32);
  auto m = nn::models::make_resnet();
  // stem 144 + 32; layer1 2 x 4672; layer2 14528 + 18560; layer3 57728 + 73984; fc 650.
  CHECK(m->num_parameters() == 174970);
  CHECK(m->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(m->layers.size() == 3);
  auto keys = m->state_dict();
  auto has = [&](const std::string& k) {
    return std::any_of(keys.begin(), keys.end(), [&](auto& kv) { return kv.first == k; });
  };
  CHECK(has("conv1.weight"));
  CHECK(has("bn1.running_var"));
  CHECK(has("layer1.1.conv2.weight"));
  CHECK(has("layer2.0.downsample.0.weight"));
  CHECK(has("layer2.0.downsample.1.running_mean"));
  CHECK(has("layer3.1.bn2.bias"));
  CHECK(has("fc.weight"));
  CHECK_FALSE(has("layer1.0.downsample.0.weight"));  // 16 -> 16, stride 1: identity
  CHECK_FALSE(has("conv1.bias"));

  auto cifar = nn::models::make_resnet({.in_channels = 3, .classes = 10, .widths = {8, 16}, .blocks = {1, 1}});
  CHECK(cifar->forward(randn({2, 3, 32, 32})).shape() == Shape{2, 10});
  CHECK(cifar->repr() == "ResNet(in=3, widths={8, 16}, blocks={1, 1}, classes=10)");
}

TEST_CASE("ResNet: forward and backward reach every parameter, and SGD learns a batch") {
  manual_seed(33);
  auto m = nn::models::make_resnet({.widths = {8, 16}, .blocks = {1, 1}});
  Generator gen(9);
  Tensor x = rand({8, 1, 12, 12}, DType::f32, &gen);
  Tensor y = randint(0, 10, {8}, DType::i64, &gen);
  nn::optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int s = 0; s < 15; ++s) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(m->forward(x), y);
    loss.backward();
    if (s == 0)
      for (auto& [name, p] : m->named_parameters()) {
        INFO(name);
        REQUIRE(p.grad().defined());
        CHECK(p.grad().shape() == p.shape());
      }
    opt.step();
    (s == 0 ? first : last) = loss.item();
  }
  CHECK(last < first * 0.5);
  // Eval mode uses the running statistics the training updated.
  m->eval();
  CHECK(m->forward(x).shape() == Shape{8, 10});
}

TEST_CASE("ResNet: bad input and bad configurations throw, naming the shape or the setting") {
  auto m = nn::models::make_resnet({.widths = {4}, .blocks = {1}});
  CHECK_THROWS_WITH_AS(m->forward(randn({2, 3, 28, 28})), doctest::Contains("[2, 3, 28, 28]"), ShapeError);
  CHECK_THROWS_WITH_AS(m->forward(randn({2, 3, 28, 28})), doctest::Contains("expected input (N, 1, H, W)"),
                       ShapeError);
  CHECK_THROWS_AS(m->forward(randn({1, 28, 28})), ShapeError);
  BasicBlock b(4, 8, 1);
  CHECK_THROWS_WITH_AS(b.forward(randn({1, 5, 6, 6})), doctest::Contains("[1, 5, 6, 6]"), ShapeError);
  CHECK_THROWS_WITH_AS(nn::models::make_resnet({.widths = {8, 16}, .blocks = {1}}),
                       doctest::Contains("2 widths and 1 block counts"), ValueError);
  CHECK_THROWS_AS(nn::models::make_resnet({.widths = {8, 0}, .blocks = {1, 1}}), ValueError);
  CHECK_THROWS_AS(nn::models::make_resnet({.widths = {}, .blocks = {}}), ValueError);
  CHECK_THROWS_AS(BasicBlock(4, 8, 0), ValueError);
}
