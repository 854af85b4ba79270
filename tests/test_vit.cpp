// SPDX-License-Identifier: MIT
// The vision transformer at sizes other than the default (examples/vit sets
// them from flags), its checks on a configuration, and its blocks run under
// checkpointing: the same gradients bit for bit, a lower activation peak.
#include <doctest/doctest.h>

#include <string>

#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/vit.h>
#include "test_util.h"

using namespace snug;
using nn::models::ViTConfig;
namespace F = snug::nn::functional;

namespace {

// Parameters of a ViT built from c, counted from its layers' shapes.
int64_t expected_params(const ViTConfig& c) {
  const int64_t d = c.dim, h = c.mlp_ratio * d, tokens = 1 + (c.image / c.patch) * (c.image / c.patch);
  const int64_t block = (d * 3 * d + 3 * d) + (d * d + d) + 2 * 2 * d + (d * h + h) + (h * d + d);
  return (c.channels * c.patch * c.patch * d + d) + d + tokens * d + c.depth * block + 2 * d + (d * c.classes + c.classes);
}

}  // namespace

TEST_CASE("ViT at other sizes: patch, width, depth, heads, MLP ratio, channels, image and classes") {
  for (const ViTConfig& c : {ViTConfig{.patch = 4, .dim = 48, .depth = 2, .heads = 3, .mlp_ratio = 3},
                             ViTConfig{.image = 32, .channels = 3, .patch = 8, .dim = 32, .depth = 1, .heads = 1,
                                       .mlp_ratio = 1, .classes = 5},
                             ViTConfig{.patch = 14, .dim = 16, .depth = 3, .heads = 8}}) {
    CAPTURE(c.patch);
    auto m = nn::models::make_vit(c);
    CHECK(m->num_parameters() == expected_params(c));
    CHECK(int64_t(m->blocks->size()) == c.depth);
    const Tensor y = m->forward(randn({2, c.channels, c.image, c.image}));
    CHECK(y.shape() == Shape{2, c.classes});
    F::cross_entropy(y, zeros({2}, DType::i64)).backward();
    for (const Tensor& p : m->parameters()) CHECK(p.grad().defined());
  }
  CHECK(nn::models::make_vit({.patch = 4, .dim = 48, .depth = 2, .heads = 3})->repr().find("patch=4") !=
        std::string::npos);
}

TEST_CASE("ViT rejects a configuration that cannot work, naming the sizes") {
  auto message = [](ViTConfig c) {
    try {
      nn::models::make_vit(c);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message({.dim = 50, .heads = 4}).find("dim 50, heads 4") != std::string::npos);
  CHECK(message({.patch = 5}).find("patch 5 must divide the image size 28") != std::string::npos);
  CHECK(message({.depth = 0}).find("depth 0") != std::string::npos);
  CHECK(message({.mlp_ratio = 0}).find("VisionTransformer") != std::string::npos);
  CHECK_THROWS_AS(nn::models::make_vit()->forward(randn({2, 1, 27, 27})), ShapeError);
}

TEST_CASE("ViT with checkpointed blocks: the same gradients bit for bit, under half the activation peak") {
  const ViTConfig c{.dim = 32, .depth = 4, .heads = 2};
  const Tensor x = randn({16, 1, 28, 28});
  const Tensor y = randint(0, 10, {16}, DType::i64);
  std::vector<std::vector<Tensor>> grads;
  std::vector<int64_t> act_peak;
  for (bool ck : {false, true}) {
    manual_seed(5);
    auto m = nn::models::make_vit(c);
    if (ck) m->checkpointing = nn::balanced_plan(c.depth, c.depth);
    memory::reset_peak(kCPU);
    const int64_t before = memory::stats(kCPU).tag_bytes[size_t(memory::Tag::activation)].current;
    Tensor loss;
    {
      memory::TagScope tag(memory::Tag::activation);
      loss = F::cross_entropy(m->forward(x), y);
    }
    loss.backward();
    act_peak.push_back(memory::stats(kCPU).tag_bytes[size_t(memory::Tag::activation)].peak - before);
    grads.emplace_back();
    for (const Tensor& p : m->parameters()) grads.back().push_back(p.grad().clone());
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) CHECK(snug::testing::max_abs_diff(grads[0][i], grads[1][i]) == 0.0);
  CHECK(act_peak[1] * 2 < act_peak[0]);
}
