// SPDX-License-Identifier: MIT
// Pruning (prune/prune.h): each method's mask against a hand count, masks
// persisting through optimizer steps (gradients masked, weights re-masked),
// remove, the sparsity report, and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/prune/prune.h>
#include "test_util.h"

using namespace snug;
using snug::testing::error_of;

namespace {
int64_t count_zeros(const Tensor& t) {
  int64_t z = 0;
  for (float v : t.contiguous().to_vector<float>()) z += v == 0.0f;
  return z;
}
std::shared_ptr<nn::Linear> seeded_linear(int64_t in, int64_t out, uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Linear>(in, out);
}
}  // namespace

TEST_CASE("l1_unstructured zeroes exactly the smallest |w|, and iterates on what is left") {
  auto fc = seeded_linear(4, 2, 1);
  {
    NoGradGuard ng;
    fc->weight.copy_(from_vector<float>({0.5f, -0.1f, 0.3f, -0.8f, 0.05f, 0.9f, -0.2f, 0.4f}, {2, 4}));
  }
  prune::l1_unstructured(*fc, "weight", 0.25);  // 2 of 8: |0.05| and |-0.1|
  CHECK(fc->weight.to_vector<float>() == std::vector<float>{0.5f, 0.f, 0.3f, -0.8f, 0.f, 0.9f, -0.2f, 0.4f});
  CHECK(prune::is_pruned(fc->weight));
  CHECK_FALSE(prune::is_pruned(fc->bias));
  // 50% of the 6 still alive: -0.2, 0.3, 0.4 go.
  prune::l1_unstructured(*fc, "weight", 0.5);
  CHECK(fc->weight.to_vector<float>() == std::vector<float>{0.5f, 0.f, 0.f, -0.8f, 0.f, 0.9f, 0.f, 0.f});
  CHECK(prune::mask(fc->weight).to_vector<float>() == std::vector<float>{1, 0, 0, 1, 0, 1, 0, 0});
}

TEST_CASE("random_unstructured prunes the requested count, reproducibly from a generator") {
  auto fc = seeded_linear(10, 10, 2);
  Generator g(7);
  prune::random_unstructured(*fc, "weight", 0.3, &g);
  CHECK(count_zeros(fc->weight) == 30);
  auto fc2 = seeded_linear(10, 10, 2);
  Generator g2(7);
  prune::random_unstructured(*fc2, "weight", 0.3, &g2);
  CHECK(prune::mask(fc->weight).to_vector<float>() == prune::mask(fc2->weight).to_vector<float>());
}

TEST_CASE("ln_structured prunes whole output channels by their L2 norm") {
  manual_seed(3);
  auto conv = std::make_shared<nn::Conv2d>(2, 4, 3);
  {
    NoGradGuard ng;
    // Channel c has all weights equal to (c + 1) * sign: norms rank 0 < 1 < 2 < 3, except channel 2 made tiny.
    std::vector<float> w(4 * 2 * 9);
    for (int c = 0; c < 4; ++c)
      for (int j = 0; j < 18; ++j) w[size_t(c * 18 + j)] = (c == 2 ? 0.01f : float(c + 1)) * (j % 2 ? -1.f : 1.f);
    conv->weight.copy_(from_vector<float>(w, {4, 2, 3, 3}));
  }
  prune::ln_structured(*conv, "weight", 0.5, 2, 0);
  std::vector<float> m = prune::mask(conv->weight).to_vector<float>();
  for (int c = 0; c < 4; ++c) {
    const bool pruned = c == 0 || c == 2;
    for (int j = 0; j < 18; ++j) CHECK(m[size_t(c * 18 + j)] == (pruned ? 0.f : 1.f));
  }
  // Along dim 1 (input channels) of the remaining ones: 1 of 2 goes.
  prune::ln_structured(*conv, "weight", 0.5, INFINITY, 1);
  CHECK(count_zeros(conv->weight) == 4 * 2 * 9 - 2 * 9);
}

TEST_CASE("output_channels masks the bias of pruned channels too") {
  auto fc = seeded_linear(6, 8, 4);
  prune::output_channels(*fc, 0.5);
  auto w = fc->weight.to_vector<float>();
  auto b = fc->bias.to_vector<float>();
  int dead = 0;
  for (int r = 0; r < 8; ++r) {
    bool zero_row = std::all_of(w.begin() + r * 6, w.begin() + r * 6 + 6, [](float x) { return x == 0; });
    dead += zero_row;
    if (zero_row)
      CHECK(b[size_t(r)] == 0.f);
    else
      CHECK(b[size_t(r)] != 0.f);
  }
  CHECK(dead == 4);
}

TEST_CASE("global_unstructured ranks across layers") {
  auto a = seeded_linear(2, 2, 5), b = seeded_linear(2, 2, 6);
  {
    NoGradGuard ng;
    a->weight.copy_(from_vector<float>({0.1f, 0.2f, 0.3f, 0.4f}, {2, 2}));
    b->weight.copy_(from_vector<float>({5.f, 6.f, 0.15f, 8.f}, {2, 2}));
  }
  prune::global_unstructured({{a.get(), "weight"}, {b.get(), "weight"}}, 0.5);
  CHECK(a->weight.to_vector<float>() == std::vector<float>{0.f, 0.f, 0.f, 0.4f});
  CHECK(b->weight.to_vector<float>() == std::vector<float>{5.f, 6.f, 0.f, 8.f});
  CHECK(error_of([&] {
          prune::global_unstructured({{a.get(), "weight"}, {a.get(), "weight"}}, 0.1);
        }).find("given twice") != std::string::npos);
}

TEST_CASE("2:4 keeps the two largest of every four along the row") {
  auto fc = seeded_linear(8, 3, 8);
  prune::n_m_unstructured(*fc, "weight", 2, 4);
  auto w = fc->weight.to_vector<float>();
  auto m = prune::mask(fc->weight).to_vector<float>();
  for (size_t g = 0; g < w.size(); g += 4) {
    CHECK(m[g] + m[g + 1] + m[g + 2] + m[g + 3] == 2.f);
    float kept_min = 1e9f, dropped_max = 0;
    for (size_t j = g; j < g + 4; ++j) {
      float orig = std::fabs(w[j]);
      if (m[j] == 1) kept_min = std::min(kept_min, orig);
    }
    // The dropped ones are zero now; the kept ones must be the larger pair.
    for (size_t j = g; j < g + 4; ++j)
      if (m[j] == 0) dropped_max = std::max(dropped_max, std::fabs(w[j]));
    CHECK(dropped_max == 0.f);
    CHECK(kept_min > 0.f);
  }
  auto odd = seeded_linear(6, 2, 9);
  CHECK(error_of([&] { prune::n_m_unstructured(*odd, "weight", 2, 4); }).find("multiple of 4") != std::string::npos);
}

TEST_CASE("masks persist through optimizer steps: gradients masked, weights re-masked") {
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    auto fc = seeded_linear(16, 8, 10);
    prune::l1_unstructured(*fc, "weight", 0.75);
    const auto mk = prune::mask(fc->weight).to_vector<float>();
    std::unique_ptr<nn::optim::Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<nn::optim::SGD>(fc->parameters(),
                                             nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    else if (which == 1)
      opt = std::make_unique<nn::optim::AdamW>(fc->parameters(),
                                               nn::optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    else
      opt = std::make_unique<nn::optim::Adam>(fc->parameters(), nn::optim::AdamOptions{.lr = 0.01});
    Generator g(11);
    for (int s = 0; s < 5; ++s) {
      Tensor x = randn({4, 16}, {}, &g);
      opt->zero_grad();
      Tensor loss = sum(square(fc->forward(x)));
      loss.backward();
      auto gr = fc->weight.grad().to_vector<float>();
      for (size_t i = 0; i < gr.size(); ++i)
        if (mk[i] == 0) REQUIRE(gr[i] == 0.f);
      // Something that would revive a pruned weight if the step did not re-mask.
      {
        NoGradGuard ng;
        fc->weight.grad().add_(1.0);
      }
      opt->step();
      auto w = fc->weight.to_vector<float>();
      for (size_t i = 0; i < w.size(); ++i)
        if (mk[i] == 0) REQUIRE(w[i] == 0.f);
    }
    CHECK(count_zeros(fc->weight) == 96);
  }
}

TEST_CASE("remove makes pruning permanent and stops masking") {
  auto fc = seeded_linear(4, 4, 12);
  prune::l1_unstructured(*fc, "weight", 0.5);
  prune::remove(*fc, "weight");
  CHECK_FALSE(prune::is_pruned(fc->weight));
  CHECK(count_zeros(fc->weight) == 8);
  nn::optim::SGD opt(fc->parameters(), {.lr = 0.1});
  Tensor loss = sum(fc->forward(ones({2, 4})));
  loss.backward();
  CHECK(count_zeros(fc->weight.grad()) == 0);  // the hook is off
  opt.step();
  CHECK(count_zeros(fc->weight) == 0);
  CHECK(error_of([&] { prune::remove(*fc, "weight"); }).find("not pruned") != std::string::npos);
}

TEST_CASE("custom masks, the sparsity report and errors") {
  auto seq = std::make_shared<nn::Sequential>();
  manual_seed(13);
  auto fc = std::make_shared<nn::Linear>(2, 3);
  seq->push_back(fc);
  prune::custom_from_mask(*fc, "weight", from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}));
  auto rep = prune::sparsity_report(*seq);
  REQUIRE(rep.size() == 2);
  CHECK(rep[0].name == "0.weight");
  CHECK(rep[0].zeros == 2);
  CHECK(rep[0].masked);
  CHECK(rep[0].sparsity() == doctest::Approx(1.0 / 3));
  CHECK(prune::format_sparsity_report(rep).find("0.weight") != std::string::npos);
  prune::remove_all(*seq);
  CHECK_FALSE(prune::is_pruned(fc->weight));

  CHECK(error_of([&] { prune::custom_from_mask(*fc, "weight", ones({2, 3})); }).find("shape") != std::string::npos);
  CHECK(error_of([&] {
          prune::custom_from_mask(*fc, "weight", full({3, 2}, 0.5));
        }).find("0 or 1") != std::string::npos);
  CHECK(error_of([&] { prune::l1_unstructured(*fc, "weight", 1.5); }).find("[0, 1]") != std::string::npos);
  CHECK(error_of([&] { prune::l1_unstructured(*fc, "wieght", 0.5); }).find("has no parameter \"wieght\"") !=
        std::string::npos);
  CHECK(error_of([&] { prune::ln_structured(*fc, "weight", 0.5, 2, 3); }).find("out of range") != std::string::npos);
}

TEST_CASE("optimizer step post-hooks: per optimizer and global, removable") {
  auto fc = seeded_linear(2, 2, 14);
  nn::optim::SGD opt(fc->parameters(), {.lr = 0.1});
  int local = 0, global = 0;
  opt.register_step_post_hook([&](nn::optim::Optimizer& o) {
    CHECK(&o == &opt);
    ++local;
  });
  const int64_t id = nn::optim::register_optimizer_step_post_hook([&](nn::optim::Optimizer&) { ++global; });
  opt.step();
  opt.step();
  nn::optim::remove_optimizer_step_post_hook(id);
  opt.step();
  CHECK(local == 3);
  CHECK(global == 2);
}
